//! Producer and consumer workers, each on its own glommio executor thread, reporting
//! progress through shared atomic counters and latencies through HDR histograms.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use glommio::channels::local_channel;
use hdrhistogram::Histogram;

use crate::client::{
    Acks, Cluster, ClusterConfig, Consumer, ConsumerConfig, Partitioner, Producer, ProducerConfig,
    ProducerRecord, TopicPartition,
};

/// Counters a worker bumps and the main thread samples once a second.
#[derive(Default)]
pub struct Counters {
    pub bytes: AtomicU64,
    pub records: AtomicU64,
    pub errors: AtomicU64,
    /// Consumers: requests sent to fetch (Fetch, or stream Open/Credit/Cancel), and
    /// streaming pushes received.
    pub requests: AtomicU64,
    pub pushes: AtomicU64,
    /// Consumers with a warm-up: the end-to-end latency of the first record (µs), not timed.
    pub first_record_us: AtomicU64,
}

/// A monotonic clock shared by producers and consumers of this process: nanoseconds since
/// the first call. Producers stamp it into record values for end-to-end latency.
pub fn clock_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
}

#[derive(Debug, Clone)]
pub struct ProduceSpec {
    pub bootstrap: String,
    pub topic: String,
    pub record_size: usize,
    pub batch_size: usize,
    pub linger: Duration,
    pub acks: Acks,
    pub max_in_flight: usize,
    /// Records per second for this producer; `None`: as fast as possible.
    pub rate: Option<f64>,
    /// Stamp `clock_ns()` into the first 8 bytes of each value.
    pub stamp: bool,
    /// What the values hold.
    pub payload: super::Payload,
}

/// The record values a producer cycles through: one for `Repeat`, 4,096 different JSON-like
/// events of `size` bytes for `Text` (a fixed seed: every run sends the same bytes).
pub fn values(payload: super::Payload, size: usize) -> Vec<Vec<u8>> {
    let size = size.max(8);
    match payload {
        super::Payload::Repeat => vec![vec![0x61u8; size]],
        super::Payload::Text => {
            const WORDS: [&str; 16] = [
                "click", "view", "purchase", "login", "logout", "search", "cart", "checkout",
                "alice", "bob", "carol", "dave", "/home", "/item", "/cart", "/search",
            ];
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            (0..4096)
                .map(|_| {
                    let mut v = Vec::with_capacity(size + 128);
                    while v.len() < size {
                        let r = next();
                        let event = format!(
                            "{{\"id\":{},\"user\":\"{}\",\"event\":\"{}\",\"path\":\"{}/{}\",\"ms\":{}}}\n",
                            r % 1_000_000_007,
                            WORDS[8 + (r >> 20) as usize % 4],
                            WORDS[(r >> 24) as usize % 8],
                            WORDS[12 + (r >> 28) as usize % 4],
                            (r >> 32) % 10_000,
                            (r >> 40) % 100_000,
                        );
                        v.extend_from_slice(event.as_bytes());
                    }
                    v.truncate(size);
                    v
                })
                .collect()
        }
    }
}

/// Produces until `stop` (or until `budget` bytes are used up); returns the send→ack
/// latency histogram in microseconds.
pub async fn produce(
    spec: ProduceSpec,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    budget: Option<Arc<AtomicI64>>,
) -> Result<Histogram<u64>, String> {
    let cluster = Cluster::connect(ClusterConfig::new(spec.bootstrap.clone()))
        .await
        .map_err(|e| e.to_string())?;
    let producer = Producer::new(
        cluster,
        ProducerConfig {
            batch_size: spec.batch_size,
            linger: spec.linger,
            acks: spec.acks,
            partitioner: Partitioner::RoundRobin,
            max_in_flight: spec.max_in_flight,
            buffer_memory: (spec.batch_size * spec.max_in_flight * 8).max(8 << 20),
            ..ProducerConfig::default()
        },
    );
    let (tx, rx) = local_channel::new_unbounded::<(Instant, crate::client::Delivery)>();
    let record_size = spec.record_size as u64;
    let c = counters.clone();
    let collector = glommio::spawn_local(async move {
        let mut hist = new_histogram();
        let mut first_error = None;
        while let Some((t0, d)) = rx.recv().await {
            match d.await {
                Ok(_) => {
                    let _ = hist.record(t0.elapsed().as_micros().max(1) as u64);
                    c.records.fetch_add(1, Ordering::Relaxed);
                    c.bytes.fetch_add(record_size, Ordering::Relaxed);
                }
                Err(e) => {
                    c.errors.fetch_add(1, Ordering::Relaxed);
                    first_error.get_or_insert(e.to_string());
                }
            }
        }
        (hist, first_error)
    });
    let mut pool = values(spec.payload, spec.record_size);
    let start = Instant::now();
    let mut sent = 0u64;
    let mut result = Ok(());
    while !stop.load(Ordering::Relaxed) {
        if let Some(rate) = spec.rate {
            let due = (start.elapsed().as_secs_f64() * rate) as u64;
            if sent >= due {
                glommio::timer::sleep(Duration::from_micros(100)).await;
                continue;
            }
        }
        if let Some(b) = &budget {
            if b.fetch_sub(record_size as i64, Ordering::Relaxed) <= 0 {
                break;
            }
        }
        let slot = sent as usize % pool.len();
        let value = &mut pool[slot];
        if spec.stamp {
            value[..8].copy_from_slice(&clock_ns().to_le_bytes());
        }
        let t0 = Instant::now();
        match producer.send(ProducerRecord::new(&spec.topic, value)).await {
            Ok(d) => {
                let _ = tx.try_send((t0, d));
            }
            Err(e) => {
                result = Err(e.to_string());
                break;
            }
        }
        sent += 1;
        if sent.is_multiple_of(32) {
            futures_lite::future::yield_now().await;
        }
    }
    producer.flush().await;
    drop(tx);
    let (hist, first_error) = collector.await;
    result?;
    match first_error {
        Some(e) if hist.is_empty() => Err(e),
        _ => Ok(hist),
    }
}

#[derive(Debug, Clone)]
pub struct ConsumeSpec {
    pub bootstrap: String,
    pub topic: String,
    pub partitions: Vec<i32>,
    /// Start at the log end (tailing) instead of offset 0.
    pub from_end: bool,
    /// Stop once every partition's position reaches this offset.
    pub until: Option<HashMap<i32, i64>>,
    /// Values carry `clock_ns()` stamps: decode records and record end-to-end latency.
    pub stamped: bool,
    /// Streaming fetch (when the broker offers it) instead of pipelined long polls.
    pub streaming: bool,
    pub max_wait: Duration,
    /// Records sent before the consumer had its first record in hand are read but not
    /// timed: a client's start-up (librdkafka sends its first fetch after `assign` up to
    /// ~1.5 s late) is not the broker's latency. The first record's latency is reported apart
    /// (`Counters::first_record_us`).
    pub warmup: bool,
}

/// Decides which stamped records count towards end-to-end latency (`ConsumeSpec::warmup`).
pub struct WarmupFilter {
    /// Records sent from here on count; `None` until the first record arrives.
    from_ns: Option<u64>,
}

impl WarmupFilter {
    pub fn new(warmup: bool) -> WarmupFilter {
        WarmupFilter {
            from_ns: if warmup { None } else { Some(0) },
        }
    }

    pub fn counts(&mut self, sent_ns: u64, now_ns: u64, counters: &Counters) -> bool {
        let from = *self.from_ns.get_or_insert_with(|| {
            let first_us = now_ns.saturating_sub(sent_ns) / 1000;
            counters
                .first_record_us
                .fetch_max(first_us, Ordering::Relaxed);
            now_ns
        });
        sent_ns >= from
    }
}

/// Consumes until `stop` or `until`; returns the end-to-end latency histogram (µs; empty
/// unless `stamped`). Sets `ready` once positions are known and the first fetch is out.
pub async fn consume(
    spec: ConsumeSpec,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    ready: Arc<AtomicU64>,
) -> Result<Histogram<u64>, String> {
    let err = |e: crate::client::Error| e.to_string();
    let cluster = Cluster::connect(ClusterConfig::new(spec.bootstrap.clone()))
        .await
        .map_err(err)?;
    let mut consumer = Consumer::new(
        cluster,
        ConsumerConfig {
            max_wait: spec.max_wait,
            streaming: spec.streaming,
            ..ConsumerConfig::default()
        },
    );
    let tps: Vec<TopicPartition> = spec
        .partitions
        .iter()
        .map(|p| TopicPartition::new(spec.topic.clone(), *p))
        .collect();
    consumer.assign(&tps);
    for tp in &tps {
        if spec.from_end {
            consumer.seek_to_end(tp).await.map_err(err)?;
        } else {
            consumer.seek(tp, 0).map_err(err)?;
        }
    }
    let mut hist = new_histogram();
    let mut warm = WarmupFilter::new(spec.warmup);
    let done = |c: &Consumer| {
        spec.until.as_ref().is_some_and(|u| {
            tps.iter()
                .all(|tp| c.position(tp).unwrap_or(0) >= u.get(&tp.partition).copied().unwrap_or(0))
        })
    };
    let mut signalled = false;
    while !stop.load(Ordering::Relaxed) && !done(&consumer) {
        counters
            .requests
            .store(consumer.fetches_sent(), Ordering::Relaxed);
        counters
            .pushes
            .store(consumer.pushes_received(), Ordering::Relaxed);
        if !signalled && consumer.fetches_sent() == 0 {
            // The first poll sends the first fetch; say we're parked right after.
            signalled = true;
            ready.fetch_add(1, Ordering::Relaxed);
        }
        if spec.stamped {
            let recs = consumer.poll().await.map_err(err)?;
            let now = clock_ns();
            for r in &recs {
                let v = r.value.as_deref().unwrap_or(&[]);
                if v.len() >= 8 {
                    let sent = u64::from_le_bytes(v[..8].try_into().expect("8 bytes"));
                    if warm.counts(sent, now, &counters) {
                        let _ = hist.record((now.saturating_sub(sent) / 1000).max(1));
                    }
                }
                counters.bytes.fetch_add(v.len() as u64, Ordering::Relaxed);
            }
            counters
                .records
                .fetch_add(recs.len() as u64, Ordering::Relaxed);
        } else {
            let batches = consumer.poll_batches().await.map_err(err)?;
            for b in &batches {
                counters
                    .bytes
                    .fetch_add(b.bytes.len() as u64, Ordering::Relaxed);
                counters
                    .records
                    .fetch_add(b.record_count.max(0) as u64, Ordering::Relaxed);
            }
        }
    }
    Ok(hist)
}
