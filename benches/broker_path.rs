//! The broker's request path, measured from Rust (harness-less, like storage/benches):
//!
//! | name | what |
//! |---|---|
//! | `decode_produce` | `weir::protocol::wire::decode_request` of a Produce v9 frame carrying 1 MiB of records (the records stay a zero-copy slice: this is the per-request cost every produce pays on the connection's core) |
//! | `decode_fetch` | the same for a Fetch v12 request of 64 partitions |
//! | `loopback` | the same-run yardstick: bytes through one 127.0.0.1 TCP connection, 1 MiB writes |
//! | `produce` / `consume` | a real `weir serve` (the built binary, 1 core, port 0, a temp dir under `target/`): the native client produces `--mib` MiB of 1 KiB records (acks=1, 4 partitions) and then reads them back from offset 0 |
//!
//! Throughput is reported beside loopback TCP measured in the same run (the machine's CPU and
//! disk are shared and noisy; the ratio is what compares across runs). The full end-to-end
//! figures with the raw device and librdkafka are `weir bench` (docs/bench.md); this one is
//! the quick check of the broker path a change touches.
//!
//! Run: `cargo bench --bench broker_path -- [--mib N]` (default 256). Without `--bench` on
//! the command line (as under `cargo test --benches`) it does a tiny smoke run.

#[path = "../tests/client_support/mod.rs"]
mod client_support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, FetchRequest, ProduceRequest, RequestHeader, TopicName};
use kafka_protocol::protocol::{Encodable, StrBytes};
use weir::client::{
    Acks, Cluster, ClusterConfig, Consumer, ConsumerConfig, Producer, ProducerConfig,
    ProducerRecord, TopicPartition,
};
use weir::protocol::wire::{decode_request, Body};
use weir_storage::batch::RecordBatchBuilder;

fn frame<T: Encodable>(key: ApiKey, version: i16, body: &T) -> Bytes {
    let header = RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("bench")));
    let header_version = key.request_header_version(version);
    let mut buf = BytesMut::new();
    header.encode(&mut buf, header_version).expect("header");
    body.encode(&mut buf, version).expect("body");
    buf.freeze()
}

/// Decodes `frame` `n` times; returns the rate in frames per second.
fn decode_rate(frame: &Bytes, n: usize, check: impl Fn(&Body) -> bool) -> f64 {
    let start = Instant::now();
    for _ in 0..n {
        let req = decode_request(frame.clone()).expect("decodes");
        assert!(check(&req.body), "decoded to the wrong request");
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn produce_frame() -> Bytes {
    let value = vec![b'x'; 1000];
    let mut records = BytesMut::new();
    while records.len() < 1 << 20 {
        let mut b = RecordBatchBuilder::new(0);
        for _ in 0..16 {
            b = b.record(None, Some(&value), &[]);
        }
        records.put(b.build());
    }
    let req = ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str("bench")))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(records.freeze()))])]);
    frame(ApiKey::Produce, 9, &req)
}

fn fetch_frame() -> Bytes {
    let parts = (0..64)
        .map(|p| {
            FetchPartition::default()
                .with_partition(p)
                .with_fetch_offset(1_000_000)
                .with_partition_max_bytes(1 << 20)
        })
        .collect();
    let req = FetchRequest::default()
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(50 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str("bench")))
            .with_partitions(parts)]);
    frame(ApiKey::Fetch, 12, &req)
}

/// MB/s through one loopback TCP connection.
fn loopback(mib: usize) -> f64 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let reader = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0usize;
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break total,
                Ok(n) => total += n,
            }
        }
    });
    let mut s = TcpStream::connect(addr).expect("connect");
    let chunk = vec![7u8; 1 << 20];
    let start = Instant::now();
    for _ in 0..mib {
        s.write_all(&chunk).expect("write");
    }
    drop(s);
    let got = reader.join().expect("reader");
    assert_eq!(got, mib << 20, "loopback lost bytes");
    (mib << 20) as f64 / 1e6 / start.elapsed().as_secs_f64()
}

/// Produces `mib` MiB of 1 KiB records, then consumes them from offset 0: (produce MB/s,
/// consume MB/s).
async fn produce_consume(addr: String, mib: usize) -> (f64, f64) {
    const PARTITIONS: i32 = 4;
    let cluster = Cluster::connect(ClusterConfig::new(addr))
        .await
        .expect("connect");
    cluster
        .create_topic("bench", PARTITIONS)
        .await
        .expect("create");
    let producer = Producer::new(
        cluster.clone(),
        ProducerConfig {
            acks: Acks::Leader,
            batch_size: 256 << 10,
            linger: Duration::from_millis(5),
            ..ProducerConfig::default()
        },
    );
    let value = vec![b'v'; 1024];
    let records = (mib << 20) / value.len();
    let start = Instant::now();
    let mut pending = Vec::with_capacity(records);
    for i in 0..records {
        let rec = ProducerRecord::new("bench", &value).partition(i as i32 % PARTITIONS);
        pending.push(producer.send(rec).await.expect("send"));
    }
    producer.flush().await;
    for d in pending {
        d.await.expect("acknowledged");
    }
    let produced = (records * value.len()) as f64 / 1e6 / start.elapsed().as_secs_f64();
    producer.close().await;

    let mut consumer = Consumer::new(cluster, ConsumerConfig::default());
    let tps: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new("bench", p))
        .collect();
    consumer.assign(&tps);
    for tp in &tps {
        consumer.seek(tp, 0).expect("seek");
    }
    let start = Instant::now();
    let mut read = 0usize;
    while read < records {
        for r in consumer.poll().await.expect("poll") {
            assert_eq!(r.value.as_deref().map(<[u8]>::len), Some(value.len()));
            read += 1;
        }
    }
    let consumed = (read * value.len()) as f64 / 1e6 / start.elapsed().as_secs_f64();
    (produced, consumed)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let full = args.iter().any(|a| a == "--bench");
    let mib = args
        .iter()
        .position(|a| a == "--mib")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(if full { 256 } else { 4 });
    let rounds = if full { 2_000 } else { 20 };

    let produce = produce_frame();
    let rate = decode_rate(&produce, rounds, |b| matches!(b, Body::Produce(_)));
    println!(
        "decode_produce  {rate:>9.0} frames/s  {:>6.0} ns/frame  (1 MiB of records, sliced, not copied)",
        1e9 / rate
    );
    let fetch = fetch_frame();
    let rate = decode_rate(&fetch, rounds * 10, |b| matches!(b, Body::Fetch(_)));
    println!(
        "decode_fetch    {rate:>9.0} frames/s  {:>6.0} ns/frame  (64 partitions)",
        1e9 / rate
    );

    let lo = loopback(mib.max(64));
    println!("loopback        {lo:>9.0} MB/s");
    let broker = client_support::TestBroker::start(&[]);
    let addr = broker.addr.clone();
    let (p, c) = client_support::run(move || produce_consume(addr, mib));
    println!(
        "produce         {p:>9.0} MB/s  = {:.2}x loopback  ({mib} MiB, acks=1)",
        p / lo
    );
    println!(
        "consume         {c:>9.0} MB/s  = {:.2}x loopback  (from offset 0)",
        c / lo
    );
}
