//! Starts the real `weir serve` binary on port 0 and talks raw Kafka frames to it.
//!
//! Bad input (garbage, an oversized size prefix, an unknown API key, a truncated frame)
//! must close only the offending connection: every test here checks that a fresh
//! connection is still served afterwards. The happy paths (ApiVersions, Metadata with
//! auto-create, Produce then Fetch across both cores, long polling) use the same raw
//! framing so that a regression in the codec layer shows up here, not only in the Python
//! client tests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use weir_storage::batch::RecordBatchBuilder;

struct Broker {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Broker {
    fn start() -> Broker {
        // On the repository's filesystem (ext4: O_DIRECT works), not a tmpfs /tmp.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
        std::fs::create_dir_all(&root).expect("target dir");
        let dir = tempfile::tempdir_in(root).expect("temp dir");
        Self::start_in(dir)
    }

    fn start_in(dir: tempfile::TempDir) -> Broker {
        let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--cores",
                "2",
                "--set",
                "metrics.listen=127.0.0.1:0",
                "--data-dir",
            ])
            .arg(dir.path())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start weir");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let port = loop {
            let line = lines
                .next()
                .expect("weir exited before listening")
                .expect("read stdout");
            if let Some(addr) = line.strip_prefix("listening on ") {
                break addr.rsplit(':').next().unwrap().parse().unwrap();
            }
        };
        Broker {
            child,
            port,
            _dir: dir,
        }
    }

    /// SIGTERM, then waits for a clean exit; returns the data dir for a restart.
    fn stop(mut self) -> tempfile::TempDir {
        let pid = self.child.id() as i32;
        // SAFETY: plain syscall on our own child's pid.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                assert!(status.success(), "weir exited with {status} after SIGTERM");
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "weir did not stop in 15 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.take_dir()
    }

    /// SIGKILL: no chance to flush or close anything.
    fn kill9(mut self) -> tempfile::TempDir {
        self.child.kill().expect("kill -9");
        self.child.wait().expect("wait");
        self.take_dir()
    }

    fn take_dir(&mut self) -> tempfile::TempDir {
        let placeholder = tempfile::tempdir().expect("temp dir");
        std::mem::replace(&mut self._dir, placeholder)
    }

    fn connect(&self) -> TcpStream {
        let s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn request<T: Encodable>(key: ApiKey, version: i16, correlation_id: i32, body: &T) -> Vec<u8> {
    let mut header = RequestHeader::default();
    header.request_api_key = key as i16;
    header.request_api_version = version;
    header.correlation_id = correlation_id;
    header.client_id = Some(StrBytes::from_static_str("wire-test"));
    let mut buf = BytesMut::new();
    header
        .encode(&mut buf, key.request_header_version(version))
        .unwrap();
    body.encode(&mut buf, version).unwrap();
    let mut framed = (buf.len() as i32).to_be_bytes().to_vec();
    framed.extend_from_slice(&buf);
    framed
}

/// Reads one response frame and returns (correlation id, body) for the given header version.
fn read_response(s: &mut TcpStream, header_version: i16) -> (i32, Bytes) {
    let mut size = [0u8; 4];
    s.read_exact(&mut size).expect("response size");
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    s.read_exact(&mut body).expect("response body");
    let mut b = Bytes::from(body);
    let h = ResponseHeader::decode(&mut b, header_version).unwrap();
    (h.correlation_id, b)
}

fn call<Req: Encodable, Resp: Decodable>(
    s: &mut TcpStream,
    key: ApiKey,
    version: i16,
    body: &Req,
) -> Resp {
    s.write_all(&request(key, version, 7, body)).unwrap();
    let (cid, mut b) = read_response(s, key.response_header_version(version));
    assert_eq!(cid, 7);
    Resp::decode(&mut b, version).unwrap()
}

fn api_versions_ok(b: &Broker) {
    let mut s = b.connect();
    let r: ApiVersionsResponse = call(
        &mut s,
        ApiKey::ApiVersions,
        3,
        &ApiVersionsRequest::default(),
    );
    assert_eq!(r.error_code, 0);
    assert!(r
        .api_keys
        .iter()
        .any(|k| k.api_key == ApiKey::Produce as i16));
}

fn closed_by_broker(mut s: TcpStream) -> bool {
    let mut buf = [0u8; 64];
    matches!(s.read(&mut buf), Ok(0) | Err(_))
}

#[test]
fn bad_input_closes_only_that_connection() {
    let b = Broker::start();
    api_versions_ok(&b);

    // Garbage bytes: a size prefix and nonsense.
    let mut s = b.connect();
    s.write_all(&[0, 0, 0, 12, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8])
        .unwrap();
    assert!(closed_by_broker(s), "garbage must close the connection");
    api_versions_ok(&b);

    // Oversized size prefix: refused before the body is read (we never send one).
    let mut s = b.connect();
    s.write_all(&0x7fff_fff0_i32.to_be_bytes()).unwrap();
    assert!(
        closed_by_broker(s),
        "an oversized frame must close the connection"
    );
    api_versions_ok(&b);

    // Negative size.
    let mut s = b.connect();
    s.write_all(&(-5i32).to_be_bytes()).unwrap();
    assert!(closed_by_broker(s));

    // Unknown API key.
    let mut s = b.connect();
    let mut frame = request(ApiKey::ApiVersions, 0, 1, &ApiVersionsRequest::default());
    frame[4..6].copy_from_slice(&999i16.to_be_bytes());
    s.write_all(&frame).unwrap();
    assert!(
        closed_by_broker(s),
        "unknown api key must close the connection"
    );

    // Truncated frame, then the client goes away.
    let mut s = b.connect();
    let frame = request(ApiKey::Metadata, 1, 1, &MetadataRequest::default());
    s.write_all(&frame[..frame.len() - 3]).unwrap();
    drop(s);

    // Unsupported version of an API we know (Produce v2: magic 0/1 batches).
    let mut s = b.connect();
    let mut frame = request(ApiKey::Produce, 3, 1, &ProduceRequest::default());
    frame[6..8].copy_from_slice(&2i16.to_be_bytes());
    s.write_all(&frame).unwrap();
    assert!(closed_by_broker(s));

    api_versions_ok(&b);
}

#[test]
fn api_versions_too_new_answers_unsupported_version_in_v0() {
    let b = Broker::start();
    let mut s = b.connect();
    // Encoded as v0 (header v1, empty body), then labelled v99: a client newer than us.
    let mut frame = request(ApiKey::ApiVersions, 0, 5, &ApiVersionsRequest::default());
    frame[6..8].copy_from_slice(&99i16.to_be_bytes());
    s.write_all(&frame).unwrap();
    let (cid, mut body) = read_response(&mut s, 0);
    assert_eq!(cid, 5);
    let r = ApiVersionsResponse::decode(&mut body, 0).unwrap();
    assert_eq!(r.error_code, 35);
    assert!(!r.api_keys.is_empty());
}

fn produce_req(topic: &str, partition: i32, acks: i16, values: &[&[u8]]) -> ProduceRequest {
    let mut builder = RecordBatchBuilder::new(0);
    for v in values {
        builder = builder.record(None, Some(*v), &[]);
    }
    let mut pd = PartitionProduceData::default();
    pd.index = partition;
    pd.records = Some(builder.build());
    let mut td = TopicProduceData::default();
    td.name = TopicName(StrBytes::from_string(topic.to_string()));
    td.partition_data = vec![pd];
    let mut p = ProduceRequest::default();
    p.acks = acks;
    p.timeout_ms = 5000;
    p.topic_data = vec![td];
    p
}

fn fetch_req(topic: &str, partitions: &[(i32, i64)], max_wait_ms: i32) -> FetchRequest {
    let mut ft = FetchTopic::default();
    ft.topic = TopicName(StrBytes::from_string(topic.to_string()));
    ft.partitions = partitions
        .iter()
        .map(|&(p, off)| {
            let mut fp = FetchPartition::default();
            fp.partition = p;
            fp.fetch_offset = off;
            fp.partition_max_bytes = 1 << 20;
            fp
        })
        .collect();
    let mut f = FetchRequest::default();
    f.replica_id = BrokerId(-1);
    f.max_wait_ms = max_wait_ms;
    f.min_bytes = 1;
    f.max_bytes = 8 << 20;
    f.session_epoch = -1;
    f.topics = vec![ft];
    f
}

fn create_topic(s: &mut TcpStream, name: &str, partitions: i32) {
    let mut t = create_topics_request::CreatableTopic::default();
    t.name = TopicName(StrBytes::from_string(name.to_string()));
    t.num_partitions = partitions;
    t.replication_factor = 1;
    let mut c = CreateTopicsRequest::default();
    c.topics = vec![t];
    c.timeout_ms = 5000;
    let r: CreateTopicsResponse = call(s, ApiKey::CreateTopics, 4, &c);
    assert_eq!(r.topics[0].error_code, 0, "{:?}", r.topics[0].error_message);
}

#[test]
fn produce_then_fetch_on_both_cores_and_long_poll() {
    let b = Broker::start();
    let mut s = b.connect();
    create_topic(&mut s, "wire", 2);
    let mut m = MetadataRequest::default();
    m.topics = None;
    let md: MetadataResponse = call(&mut s, ApiKey::Metadata, 9, &m);
    let t = md
        .topics
        .iter()
        .find(|t| t.name.as_ref().unwrap().as_str() == "wire")
        .unwrap();
    assert_eq!(t.partitions.len(), 2);
    // listeners.per.core (the default): one broker per core, each on its own port, each
    // answering, and every partition led by one of them.
    assert_eq!(md.brokers.len(), 2, "one broker per core");
    let ports: Vec<i32> = md.brokers.iter().map(|b| b.port).collect();
    assert_ne!(ports[0], ports[1]);
    for broker in &md.brokers {
        assert_eq!(broker.host.as_str(), "127.0.0.1");
        let port = u16::try_from(broker.port).expect("port");
        TcpStream::connect(("127.0.0.1", port)).expect("a core's advertised listener");
    }
    for part in &t.partitions {
        assert!(
            md.brokers.iter().any(|b| b.node_id == part.leader_id),
            "leader {:?} is not a listed broker",
            part.leader_id
        );
    }

    for p in 0..2 {
        let r: ProduceResponse = call(
            &mut s,
            ApiKey::Produce,
            9,
            &produce_req("wire", p, -1, &[b"one", b"two"]),
        );
        let pr = &r.responses[0].partition_responses[0];
        assert_eq!(pr.error_code, 0);
        assert_eq!(pr.base_offset, 0);
    }
    for version in [4i16, 11, 12] {
        let f: FetchResponse = call(
            &mut s,
            ApiKey::Fetch,
            version,
            &fetch_req("wire", &[(0, 0), (1, 0)], 100),
        );
        for part in &f.responses[0].partitions {
            assert_eq!(part.error_code, 0);
            assert_eq!(part.high_watermark, 2);
            let mut recs = part.records.clone().unwrap();
            let batches =
                kafka_protocol::records::RecordBatchDecoder::decode_all(&mut recs).unwrap();
            let values: Vec<Vec<u8>> = batches
                .into_iter()
                .flat_map(|set| set.records)
                .map(|r| r.value.unwrap().to_vec())
                .collect();
            assert_eq!(
                values,
                vec![b"one".to_vec(), b"two".to_vec()],
                "fetch v{version}"
            );
        }
    }

    // Unknown partition and out-of-range offset come back as partition errors.
    let f: FetchResponse = call(&mut s, ApiKey::Fetch, 11, &fetch_req("wire", &[(0, 99)], 0));
    assert_eq!(f.responses[0].partitions[0].error_code, 1);
    let f: FetchResponse = call(&mut s, ApiKey::Fetch, 11, &fetch_req("nope", &[(0, 0)], 0));
    assert_eq!(f.responses[0].partitions[0].error_code, 3);

    // Long poll: a fetch at the end of both partitions parks; a produce to either
    // partition (owned by different cores) answers it long before max_wait.
    for p in 0..2 {
        let mut waiter = b.connect();
        let started = Instant::now();
        waiter
            .write_all(&request(
                ApiKey::Fetch,
                11,
                7,
                &fetch_req("wire", &[(0, 2), (1, 2)], 5000),
            ))
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let r: ProduceResponse = call(
            &mut s,
            ApiKey::Produce,
            9,
            &produce_req("wire", p, 1, &[b"late"]),
        );
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
        let (_, mut body) = read_response(&mut waiter, 0);
        let f = FetchResponse::decode(&mut body, 11).unwrap();
        let elapsed = started.elapsed();
        assert!(
            elapsed < Duration::from_millis(2000),
            "parked fetch answered after {elapsed:?}"
        );
        let got: usize = f.responses[0]
            .partitions
            .iter()
            .map(|x| x.records.as_ref().map_or(0, |r| r.len()))
            .sum();
        assert!(got > 0, "the new record is in the response");
    }

    // An idle long poll returns empty after max_wait.
    let started = Instant::now();
    let f: FetchResponse = call(
        &mut s,
        ApiKey::Fetch,
        11,
        &fetch_req("wire", &[(0, 3), (1, 3)], 300),
    );
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(290),
        "returned early: {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_millis(1500),
        "returned late: {elapsed:?}"
    );
    assert!(f.responses[0]
        .partitions
        .iter()
        .all(|p| p.records.as_ref().is_none_or(|r| r.is_empty())));
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let b = Broker::start();
    let mut s = b.connect();
    create_topic(&mut s, "pipe", 1);
    // A parked fetch first, then ApiVersions: the ApiVersions answer must wait its turn.
    let mut batch = Vec::new();
    batch.extend(request(
        ApiKey::Fetch,
        11,
        1,
        &fetch_req("pipe", &[(0, 0)], 300),
    ));
    batch.extend(request(
        ApiKey::ApiVersions,
        0,
        2,
        &ApiVersionsRequest::default(),
    ));
    for i in 3..10 {
        batch.extend(request(
            ApiKey::Produce,
            9,
            i,
            &produce_req("pipe", 0, 1, &[b"x"]),
        ));
    }
    s.write_all(&batch).unwrap();
    let (c1, _) = read_response(&mut s, 0);
    let (c2, _) = read_response(&mut s, 0);
    assert_eq!((c1, c2), (1, 2));
    for i in 3..10 {
        let (c, mut body) = read_response(&mut s, 1);
        assert_eq!(c, i);
        let r = ProduceResponse::decode(&mut body, 9).unwrap();
        assert_eq!(
            r.responses[0].partition_responses[0].base_offset,
            i64::from(i - 3)
        );
    }
}

fn fetch_values(s: &mut TcpStream, topic: &str, partition: i32) -> Vec<Vec<u8>> {
    let f: FetchResponse = call(
        s,
        ApiKey::Fetch,
        11,
        &fetch_req(topic, &[(partition, 0)], 0),
    );
    let part = &f.responses[0].partitions[0];
    assert_eq!(part.error_code, 0);
    let mut recs = part.records.clone().unwrap_or_default();
    kafka_protocol::records::RecordBatchDecoder::decode_all(&mut recs)
        .unwrap()
        .into_iter()
        .flat_map(|set| set.records)
        .map(|r| r.value.unwrap().to_vec())
        .collect()
}

/// Topics, configs and acknowledged data survive a graceful restart (which leaves the
/// clean-shutdown marker in every log) and a kill -9 (acks=-1 data was fdatasync'ed).
#[test]
fn data_and_topics_survive_sigterm_and_kill9() {
    let b = Broker::start();
    let mut s = b.connect();
    create_topic(&mut s, "durable", 2);
    for p in 0..2 {
        let r: ProduceResponse = call(
            &mut s,
            ApiKey::Produce,
            9,
            &produce_req("durable", p, -1, &[b"a", b"b"]),
        );
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    }
    drop(s);
    let dir = b.stop();
    for p in 0..2 {
        let marker = dir
            .path()
            .join(format!("durable-{p}"))
            .join("clean_shutdown");
        assert!(
            marker.exists(),
            "graceful shutdown leaves {}",
            marker.display()
        );
    }

    let b = Broker::start_in(dir);
    let mut s = b.connect();
    for p in 0..2 {
        assert_eq!(
            fetch_values(&mut s, "durable", p),
            vec![b"a".to_vec(), b"b".to_vec()]
        );
        let r: ProduceResponse = call(
            &mut s,
            ApiKey::Produce,
            9,
            &produce_req("durable", p, -1, &[b"c"]),
        );
        assert_eq!(r.responses[0].partition_responses[0].base_offset, 2);
    }
    drop(s);
    let dir = b.kill9();

    let b = Broker::start_in(dir);
    let mut s = b.connect();
    for p in 0..2 {
        assert_eq!(
            fetch_values(&mut s, "durable", p),
            vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
        );
    }
}

/// Sends one request of every (API key, version) that ApiVersions advertises — a generated,
/// minimal request of that version — and decodes the response at that version. Each must be
/// answered on the same connection: a client that picks an advertised version must never
/// have its connection closed. (CreateTopics v0-1, DeleteTopics v0, DescribeConfigs v0,
/// OffsetCommit v0-1 and OffsetFetch v0 were advertised although the decoder refused them.)
#[test]
fn every_advertised_version_is_answered() {
    let b = Broker::start();
    let mut s = b.connect();
    let versions: ApiVersionsResponse = call(&mut s, ApiKey::ApiVersions, 3, &{
        let mut r = ApiVersionsRequest::default();
        r.client_software_name = StrBytes::from_static_str("wire-test");
        r.client_software_version = StrBytes::from_static_str("1");
        r
    });
    assert_eq!(versions.error_code, 0);
    let mut checked = 0;
    for k in &versions.api_keys {
        let key = ApiKey::try_from(k.api_key).expect("a Kafka API key");
        for v in k.min_version..=k.max_version {
            answered(&mut s, key, v);
            checked += 1;
        }
    }
    assert!(
        checked > 100,
        "only {checked} (key, version) pairs advertised"
    );
    api_versions_ok(&b);
}

/// One generated request of `key` at `version`, answered and decodable at that version.
fn answered(s: &mut TcpStream, key: ApiKey, version: i16) {
    fn go<Req: Encodable, Resp: Decodable>(s: &mut TcpStream, key: ApiKey, v: i16, req: Req) {
        let mut probe = BytesMut::new();
        if let Err(e) = req.encode(&mut probe, v) {
            panic!("{key:?} v{v}: the generated request does not encode: {e}");
        }
        s.write_all(&request(key, v, 7, &req)).unwrap();
        let mut size = [0u8; 4];
        s.read_exact(&mut size)
            .unwrap_or_else(|e| panic!("{key:?} v{v}: no response ({e})"));
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        s.read_exact(&mut body).unwrap();
        let mut b = Bytes::from(body);
        let h = ResponseHeader::decode(&mut b, key.response_header_version(v))
            .unwrap_or_else(|e| panic!("{key:?} v{v}: bad response header: {e}"));
        assert_eq!(h.correlation_id, 7, "{key:?} v{v}");
        Resp::decode(&mut b, v).unwrap_or_else(|e| panic!("{key:?} v{v}: bad response: {e}"));
    }
    let group = StrBytes::from_static_str("wire-test-group");
    match key {
        ApiKey::Produce => go::<_, ProduceResponse>(s, key, version, {
            let mut r = ProduceRequest::default();
            r.acks = 1;
            r.timeout_ms = 1000;
            r
        }),
        ApiKey::Fetch => go::<_, FetchResponse>(s, key, version, {
            let mut r = FetchRequest::default();
            r.max_wait_ms = 0;
            r.max_bytes = 1 << 20;
            r
        }),
        ApiKey::ListOffsets => {
            go::<_, ListOffsetsResponse>(s, key, version, ListOffsetsRequest::default())
        }
        ApiKey::Metadata => go::<_, MetadataResponse>(s, key, version, {
            let mut r = MetadataRequest::default();
            r.topics = if version == 0 { Some(Vec::new()) } else { None };
            r
        }),
        ApiKey::ApiVersions => go::<_, ApiVersionsResponse>(s, key, version, {
            let mut r = ApiVersionsRequest::default();
            r.client_software_name = StrBytes::from_static_str("wire-test");
            r.client_software_version = StrBytes::from_static_str("1");
            r
        }),
        ApiKey::CreateTopics => {
            go::<_, CreateTopicsResponse>(s, key, version, CreateTopicsRequest::default())
        }
        ApiKey::DeleteTopics => {
            go::<_, DeleteTopicsResponse>(s, key, version, DeleteTopicsRequest::default())
        }
        ApiKey::CreatePartitions => go::<_, CreatePartitionsResponse>(s, key, version, {
            // A topic that does not exist: an error answer, nothing changes.
            let mut t = create_partitions_request::CreatePartitionsTopic::default();
            t.name = TopicName(StrBytes::from_static_str("no-such-topic"));
            t.count = 2;
            let mut r = CreatePartitionsRequest::default();
            r.topics = vec![t];
            r.timeout_ms = 1000;
            r
        }),
        ApiKey::DeleteRecords => go::<_, DeleteRecordsResponse>(s, key, version, {
            let mut p = delete_records_request::DeleteRecordsPartition::default();
            p.offset = -1;
            let mut t = delete_records_request::DeleteRecordsTopic::default();
            t.name = TopicName(StrBytes::from_static_str("no-such-topic"));
            t.partitions = vec![p];
            let mut r = DeleteRecordsRequest::default();
            r.topics = vec![t];
            r.timeout_ms = 1000;
            r
        }),
        ApiKey::DescribeLogDirs => {
            go::<_, DescribeLogDirsResponse>(s, key, version, DescribeLogDirsRequest::default())
        }
        ApiKey::ElectLeaders => go::<_, ElectLeadersResponse>(s, key, version, {
            let mut t = elect_leaders_request::TopicPartitions::default();
            t.topic = TopicName(StrBytes::from_static_str("no-such-topic"));
            t.partitions = vec![0];
            let mut r = ElectLeadersRequest::default();
            r.topic_partitions = Some(vec![t]);
            r.timeout_ms = 1000;
            r
        }),
        ApiKey::DescribeCluster => {
            go::<_, DescribeClusterResponse>(s, key, version, DescribeClusterRequest::default())
        }
        ApiKey::DescribeConfigs => {
            go::<_, DescribeConfigsResponse>(s, key, version, DescribeConfigsRequest::default())
        }
        ApiKey::InitProducerId => go::<_, InitProducerIdResponse>(s, key, version, {
            let mut r = InitProducerIdRequest::default();
            r.transaction_timeout_ms = 60_000;
            r
        }),
        ApiKey::FindCoordinator => go::<_, FindCoordinatorResponse>(s, key, version, {
            let mut r = FindCoordinatorRequest::default();
            if version >= 4 {
                r.coordinator_keys = vec![group.clone()];
            } else {
                r.key = group.clone();
            }
            r
        }),
        ApiKey::JoinGroup => go::<_, JoinGroupResponse>(s, key, version, {
            // An unknown member of a group with no protocols: refused at once.
            let mut r = JoinGroupRequest::default();
            r.group_id = group.clone().into();
            r.session_timeout_ms = 10_000;
            r.rebalance_timeout_ms = 10_000;
            r.protocol_type = StrBytes::from_static_str("consumer");
            r
        }),
        ApiKey::SyncGroup => go::<_, SyncGroupResponse>(s, key, version, {
            let mut r = SyncGroupRequest::default();
            r.group_id = group.clone().into();
            r
        }),
        ApiKey::Heartbeat => go::<_, HeartbeatResponse>(s, key, version, {
            let mut r = HeartbeatRequest::default();
            r.group_id = group.clone().into();
            r
        }),
        ApiKey::LeaveGroup => go::<_, LeaveGroupResponse>(s, key, version, {
            let mut r = LeaveGroupRequest::default();
            r.group_id = group.clone().into();
            r
        }),
        ApiKey::OffsetCommit => go::<_, OffsetCommitResponse>(s, key, version, {
            let mut r = OffsetCommitRequest::default();
            r.group_id = group.clone().into();
            r
        }),
        ApiKey::OffsetFetch => go::<_, OffsetFetchResponse>(s, key, version, {
            let mut r = OffsetFetchRequest::default();
            if version < 8 {
                r.group_id = group.clone().into();
            }
            r
        }),
        ApiKey::DescribeGroups => {
            go::<_, DescribeGroupsResponse>(s, key, version, DescribeGroupsRequest::default())
        }
        ApiKey::ListGroups => {
            go::<_, ListGroupsResponse>(s, key, version, ListGroupsRequest::default())
        }
        ApiKey::DeleteGroups => {
            go::<_, DeleteGroupsResponse>(s, key, version, DeleteGroupsRequest::default())
        }
        ApiKey::AlterConfigs => {
            go::<_, AlterConfigsResponse>(s, key, version, AlterConfigsRequest::default())
        }
        ApiKey::IncrementalAlterConfigs => go::<_, IncrementalAlterConfigsResponse>(
            s,
            key,
            version,
            IncrementalAlterConfigsRequest::default(),
        ),
        other => panic!("{other:?} is advertised: add a generated request for it here"),
    }
}
