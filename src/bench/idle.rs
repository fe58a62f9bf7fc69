//! The idle-polls scenario: K fetches parked in long polls on idle partitions, each on its
//! own connection. Measures the broker's CPU and memory while they wait, then wakes one
//! partition at a time with a single record and measures how long the parked fetches take
//! to answer (produce sent → fetch response received).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::broker::{cpu_seconds, rss_bytes};
use super::workload::new_histogram;
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

async fn fetcher(conn: Connection, topic: String, partition: i32, mut offset: i64, sh: Rc<Shared>) {
    let Ok(version) = conn.version::<FetchRequest>(12) else {
        sh.errors.set(sh.errors.get() + 1);
        return;
    };
    while !sh.stop.get() {
        let fut = match conn
            .send(&fetch_request(&topic, partition, offset), version)
            .await
        {
            Ok(f) => f,
            Err(_) => {
                sh.errors.set(sh.errors.get() + 1);
                return;
            }
        };
        sh.parked.set(sh.parked.get() + 1);
        let resp = fut.await;
        let now = Instant::now();
        sh.parked.set(sh.parked.get() - 1);
        let Ok(resp) = resp else {
            sh.errors.set(sh.errors.get() + 1);
            return;
        };
        let p = resp
            .responses
            .iter()
            .flat_map(|t| t.partitions.iter())
            .next();
        if let Some(p) = p {
            if p.records.as_ref().is_some_and(|r| !r.is_empty()) && p.high_watermark > offset {
                offset = p.high_watermark;
                sh.woken.borrow_mut().push((partition, now));
            }
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
    for p in 0..spec.partitions {
        let tp = TopicPartition::new(spec.topic.clone(), p);
        let leader = cluster.leader(&tp).await.map_err(err)?;
        let addr = cluster
            .broker_addr(leader)
            .ok_or_else(|| format!("no address for broker {leader}"))?;
        ends.push((addr, cluster.list_offset(&tp, -1).await.map_err(err)?));
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
                glommio::spawn_local(async move {
                    Connection::connect(&addr, "weir-bench-idle")
                        .await
                        .map(|c| (c, p, end))
                })
            })
            .collect();
        for w in wave {
            let (conn, p, end) = w.await.map_err(err)?;
            glommio::spawn_local(fetcher(conn, spec.topic.clone(), p, end, sh.clone())).detach();
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
    Ok((res, hist))
}
