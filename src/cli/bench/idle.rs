//! The idle-polls scenario: K fetches parked in long polls on idle partitions, each on its
//! own connection. Measures the broker's CPU and memory while they wait, then wakes one
//! partition at a time with a single record and measures how long the parked fetches take
//! to answer (produce sent → fetch response received).
//!
//! Each fetcher is a bare request/response loop on one socket (one fd), not a client
//! `Connection` (two fds: a dup for its reader task), so 10,000 of them fit under this
//! machine's fixed 20,000-fd hard limit.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use hdrhistogram::Histogram;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, FetchResponse, ResponseHeader, TopicName};
use kafka_protocol::protocol::{Decodable, HeaderVersion, StrBytes};

use super::broker::{cpu_seconds, rss_bytes};
use super::workload::new_histogram;
use crate::client::{encode_request_frame, MAX_FRAME_BYTES};
use crate::client::{
    Acks, Cluster, ClusterConfig, Connection, Partitioner, Producer, ProducerConfig,
    ProducerRecord, TopicPartition,
};

#[derive(Debug, Clone)]
pub struct IdleSpec {
    pub bootstrap: String,
    pub topic: String,
    pub partitions: i32,
    pub fetchers: usize,
    pub idle: Duration,
    pub rounds: usize,
    pub broker_pid: Option<u32>,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct IdleResult {
    pub parked: usize,
    pub connect_seconds: f64,
    pub idle_seconds: f64,
    /// Broker CPU while the fetches were parked, as a fraction of one core.
    pub broker_cpu_core_fraction: Option<f64>,
    pub broker_rss_before_bytes: Option<u64>,
    pub broker_rss_parked_bytes: Option<u64>,
    pub wakeups: u64,
    pub wakeup_timeouts: u64,
    /// The waking produce's own round trip (sent → acks=1 answer), p50 and p99 in µs: the
    /// part of the wake-up latency that is the append, not the parked fetches.
    pub produce_ack_p50_us: u64,
    pub produce_ack_p99_us: u64,
}

struct Shared {
    parked: Cell<usize>,
    woken: RefCell<Vec<(i32, Instant)>>,
    stop: Cell<bool>,
    errors: Cell<u64>,
}

fn fetch_request(topic: &str, partition: i32, offset: i64) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id((-1).into())
        .with_max_wait_ms(30_000)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_current_leader_epoch(-1)
                .with_fetch_offset(offset)
                .with_last_fetched_epoch(-1)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(1 << 20)])])
}

/// One fetch sent, one response read back: the partition's `(high watermark, has records)`.
async fn fetch_once(
    stream: &mut TcpStream,
    frame: &[u8],
    version: i16,
    buf: &mut Vec<u8>,
) -> std::io::Result<(i64, bool)> {
    let bad = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    stream.write_all(frame).await?;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).await?;
    let size = i32::from_be_bytes(size);
    if size < 4 || size as usize > MAX_FRAME_BYTES {
        return Err(bad(format!("response frame size {size}")));
    }
    buf.resize(size as usize, 0);
    stream.read_exact(buf).await?;
    let mut body = Bytes::copy_from_slice(buf);
    ResponseHeader::decode(&mut body, FetchResponse::header_version(version))
        .map_err(|e| bad(format!("response header: {e}")))?;
    let resp = FetchResponse::decode(&mut body, version)
        .map_err(|e| bad(format!("fetch response: {e}")))?;
    Ok(resp
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .next()
        .map(|p| {
            let has = p.records.as_ref().is_some_and(|r| !r.is_empty());
            (p.high_watermark, has)
        })
        .unwrap_or((-1, false)))
}

async fn fetcher(
    mut stream: TcpStream,
    version: i16,
    topic: String,
    partition: i32,
    mut offset: i64,
    sh: Rc<Shared>,
) {
    let client_id = StrBytes::from_static_str("weir-bench-idle");
    let mut buf = Vec::new();
    let mut correlation_id = 0;
    while !sh.stop.get() {
        correlation_id += 1;
        let req = fetch_request(&topic, partition, offset);
        let Ok(frame) = encode_request_frame(&req, version, correlation_id, &client_id) else {
            sh.errors.set(sh.errors.get() + 1);
            return;
        };
        sh.parked.set(sh.parked.get() + 1);
        let resp = fetch_once(&mut stream, &frame, version, &mut buf).await;
        let now = Instant::now();
        sh.parked.set(sh.parked.get() - 1);
        let Ok((high_watermark, has_records)) = resp else {
            sh.errors.set(sh.errors.get() + 1);
            return;
        };
        if has_records && high_watermark > offset {
            offset = high_watermark;
            sh.woken.borrow_mut().push((partition, now));
        }
    }
}

/// Runs the scenario on the current executor; returns figures and wake-up latencies (µs).
pub async fn run(
    spec: IdleSpec,
    progress: impl Fn(&str),
) -> Result<(IdleResult, Histogram<u64>), String> {
    let err = |e: crate::client::Error| e.to_string();
    let cluster = Cluster::connect(ClusterConfig::new(spec.bootstrap.clone()))
        .await
        .map_err(err)?;
    let mut ends = Vec::new();
    // The Fetch version each broker speaks, negotiated once by a client connection.
    let mut versions: std::collections::HashMap<String, i16> = Default::default();
    for p in 0..spec.partitions {
        let tp = TopicPartition::new(spec.topic.clone(), p);
        let leader = cluster.leader(&tp).await.map_err(err)?;
        let addr = cluster
            .broker_addr(leader)
            .ok_or_else(|| format!("no address for broker {leader}"))?;
        if !versions.contains_key(&addr) {
            let conn = Connection::connect(&addr, "weir-bench-idle")
                .await
                .map_err(err)?;
            versions.insert(addr.clone(), conn.version::<FetchRequest>(12).map_err(err)?);
        }
        ends.push((addr, cluster.list_offset(&tp, -1).await.map_err(err)?));
        if p % 256 == 255 {
            progress(&format!("end offsets {}/{}", p + 1, spec.partitions));
        }
    }
    let sh = Rc::new(Shared {
        parked: Cell::new(0),
        woken: RefCell::new(Vec::new()),
        stop: Cell::new(false),
        errors: Cell::new(0),
    });
    let mut res = IdleResult {
        broker_rss_before_bytes: spec.broker_pid.and_then(rss_bytes),
        ..IdleResult::default()
    };
    let t = Instant::now();
    let mut i = 0;
    while i < spec.fetchers {
        // Connect in waves of 64 to keep the accept queue sane.
        let wave: Vec<_> = (i..(i + 64).min(spec.fetchers))
            .map(|j| {
                let p = (j % spec.partitions as usize) as i32;
                let (addr, end) = ends[p as usize].clone();
                let version = versions[&addr];
                glommio::spawn_local(async move {
                    let stream = TcpStream::connect(addr.as_str())
                        .await
                        .map_err(|e| format!("connect {addr}: {e}"))?;
                    stream
                        .set_nodelay(true)
                        .map_err(|e| format!("set_nodelay {addr}: {e}"))?;
                    Ok::<_, String>((stream, version, p, end))
                })
            })
            .collect();
        for w in wave {
            let (stream, version, p, end) = w.await?;
            glommio::spawn_local(fetcher(
                stream,
                version,
                spec.topic.clone(),
                p,
                end,
                sh.clone(),
            ))
            .detach();
        }
        i += 64;
        if i % 1024 == 0 {
            progress(&format!("connected {i}/{}", spec.fetchers));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while sh.parked.get() < spec.fetchers && Instant::now() < deadline {
        glommio::timer::sleep(Duration::from_millis(10)).await;
    }
    res.connect_seconds = t.elapsed().as_secs_f64();
    res.parked = sh.parked.get();
    progress(&format!(
        "{} fetches parked; measuring broker CPU for {:.0} s",
        res.parked,
        spec.idle.as_secs_f64()
    ));
    // Let the connection storm settle before measuring.
    glommio::timer::sleep(Duration::from_millis(500)).await;
    let cpu0 = spec.broker_pid.and_then(cpu_seconds);
    let t = Instant::now();
    glommio::timer::sleep(spec.idle).await;
    res.idle_seconds = t.elapsed().as_secs_f64();
    let cpu1 = spec.broker_pid.and_then(cpu_seconds);
    if let (Some(a), Some(b)) = (cpu0, cpu1) {
        res.broker_cpu_core_fraction = Some((b - a) / res.idle_seconds);
    }
    res.broker_rss_parked_bytes = spec.broker_pid.and_then(rss_bytes);

    let producer = Producer::new(
        cluster,
        ProducerConfig {
            linger: Duration::ZERO,
            acks: Acks::Leader,
            partitioner: Partitioner::RoundRobin,
            ..ProducerConfig::default()
        },
    );
    let mut hist = new_histogram();
    let mut acks = new_histogram();
    let per_partition = |p: i32| {
        (0..spec.fetchers)
            .filter(|j| (j % spec.partitions as usize) as i32 == p)
            .count()
    };
    for r in 0..spec.rounds {
        let p = (r % spec.partitions as usize) as i32;
        let expect = per_partition(p);
        sh.woken.borrow_mut().clear();
        let t0 = Instant::now();
        let d = producer
            .send(ProducerRecord::new(&spec.topic, b"wake").partition(p))
            .await
            .map_err(err)?;
        d.await.map_err(err)?;
        let _ = acks.record(t0.elapsed().as_micros().max(1) as u64);
        let deadline = Instant::now() + Duration::from_secs(5);
        while sh.woken.borrow().len() < expect && Instant::now() < deadline {
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        let woken = sh.woken.borrow().clone();
        res.wakeup_timeouts += (expect - woken.len().min(expect)) as u64;
        for (_, at) in woken {
            res.wakeups += 1;
            let _ = hist.record(at.duration_since(t0).as_micros().max(1) as u64);
        }
        // Wait for the woken fetches to park again.
        let deadline = Instant::now() + Duration::from_secs(5);
        while sh.parked.get() < res.parked && Instant::now() < deadline {
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
        glommio::timer::sleep(Duration::from_millis(20)).await;
    }
    sh.stop.set(true);
    res.produce_ack_p50_us = acks.value_at_percentile(50.0);
    res.produce_ack_p99_us = acks.value_at_percentile(99.0);
    Ok((res, hist))
}
