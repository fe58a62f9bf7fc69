//! `weir bench --client rdkafka`: the same producer and consumer workers as workload.rs,
//! driven through librdkafka (the `rdkafka` crate), the client most users run. Each worker
//! is a plain thread (librdkafka runs its own I/O threads); the specs, counters, clock
//! stamps and histograms are the native workers', so the report is the same.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::workload::{clock_ns, new_histogram, ConsumeSpec, Counters, ProduceSpec};
use crate::client::Acks;

/// How long a catch-up read may go without a record before it gives up.
const STALL: Duration = Duration::from_secs(30);

/// Parses `--rd-set key=value` flags.
pub fn parse_props(props: &[String]) -> Result<Vec<(String, String)>, String> {
    props
        .iter()
        .map(|p| match p.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
            _ => Err(format!("--rd-set wants key=value, got {p:?}")),
        })
        .collect()
}

fn base_config(bootstrap: &str, props: &[(String, String)]) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap);
    for (k, v) in props {
        c.set(k, v);
    }
    c
}

/// Delivery reports land here (on the thread that polls the producer).
struct Delivery {
    counters: Arc<Counters>,
    record_size: u64,
    hist: Mutex<Histogram<u64>>,
    first_error: Mutex<Option<String>>,
}

impl ClientContext for Delivery {}

impl ProducerContext for Delivery {
    /// The send instant, for the send->ack latency.
    type DeliveryOpaque = Box<Instant>;

    fn delivery(&self, result: &DeliveryResult<'_>, sent: Self::DeliveryOpaque) {
        match result {
            Ok(_) => {
                let us = sent.elapsed().as_micros().max(1) as u64;
                let _ = self.hist.lock().expect("histogram").record(us);
                self.counters.records.fetch_add(1, Ordering::Relaxed);
                self.counters
                    .bytes
                    .fetch_add(self.record_size, Ordering::Relaxed);
            }
            Err((e, _)) => {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
                let mut first = self.first_error.lock().expect("first error");
                first.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

/// One librdkafka producer until `stop` (or until `budget` bytes are used up); returns
/// the send->ack latency histogram in microseconds.
pub fn produce(
    spec: ProduceSpec,
    props: &[(String, String)],
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    budget: Option<Arc<AtomicI64>>,
) -> Result<Histogram<u64>, String> {
    let acks = match spec.acks {
        Acks::None => "0",
        Acks::Leader => "1",
        Acks::All => "all",
    };
    // The bench's flags first, --rd-set after (it wins).
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", &spec.bootstrap)
        .set("acks", acks)
        .set("linger.ms", spec.linger.as_millis().to_string())
        .set("batch.size", spec.batch_size.to_string())
        .set(
            "max.in.flight.requests.per.connection",
            spec.max_in_flight.to_string(),
        )
        .set("enable.idempotence", "false");
    for (k, v) in props {
        cfg.set(k, v);
    }
    let record_size = spec.record_size as u64;
    let ctx = Delivery {
        counters: counters.clone(),
        record_size,
        hist: Mutex::new(new_histogram()),
        first_error: Mutex::new(None),
    };
    // A ThreadedProducer: its own thread serves delivery reports as they arrive. A
    // BaseProducer's `poll(0)` serves at most one event (one batch's reports) per call, so
    // polling it between sends let reports queue up: the send->ack figures measured the
    // bench's polling (p50 0.3-0.7 s at high rates), and unserved reports kept messages
    // counted against `queue.buffering.max.messages`.
    let producer: ThreadedProducer<Delivery> = cfg
        .create_with_context(ctx)
        .map_err(|e| format!("librdkafka producer: {e}"))?;
    // Learn the topic's leaders before the clock starts, as the native client's
    // `Cluster::connect` does. Without it the first records wait in librdkafka until its
    // first topic metadata request, which it sends only ~40-100 ms after the first send to
    // an unknown topic: a once-per-producer start-up cost that was most of the p99 and p999
    // of a 10 s run at 2,000 records/s (tcpdump: the first Produce left 103 ms after the
    // first record was created; in steady state the gap is < 1 ms).
    producer
        .client()
        .fetch_metadata(Some(&spec.topic), Duration::from_secs(10))
        .map_err(|e| format!("librdkafka metadata: {e}"))?;
    let mut pool = super::workload::values(spec.payload, spec.record_size);
    let start = Instant::now();
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if let Some(rate) = spec.rate {
            let due = (start.elapsed().as_secs_f64() * rate) as u64;
            if sent >= due {
                // Sleep to the next send slot: spinning here took the CPU the broker needs
                // on a 2-core machine (it was most of the tail at 2,000 records/s).
                let next = Duration::from_secs_f64((sent + 1) as f64 / rate);
                std::thread::sleep(next.saturating_sub(start.elapsed()));
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
        let mut record: BaseRecord<'_, (), [u8], Box<Instant>> =
            BaseRecord::with_opaque_to(&spec.topic, Box::new(Instant::now()))
                .payload(value.as_slice());
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    // The local queue is full: let the reports drain, then retry.
                    std::thread::sleep(Duration::from_millis(1));
                    record = r;
                }
                Err((e, _)) => return Err(format!("librdkafka send: {e}")),
            }
        }
        sent += 1;
    }
    producer
        .flush(Duration::from_secs(30))
        .map_err(|e| format!("librdkafka flush: {e}"))?;
    let ctx = producer.client().context();
    let hist = ctx.hist.lock().expect("histogram").clone();
    let first_error = ctx.first_error.lock().expect("first error").take();
    match first_error {
        Some(e) if hist.is_empty() => Err(e),
        _ => Ok(hist),
    }
}

/// One librdkafka consumer (`assign`, no group) until `stop` or `until`; returns the
/// end-to-end latency histogram (µs; empty unless `stamped`). Bumps `ready` once its
/// partitions are assigned at known offsets.
pub fn consume(
    spec: ConsumeSpec,
    props: &[(String, String)],
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    ready: Arc<AtomicU64>,
) -> Result<Histogram<u64>, String> {
    let mut cfg = base_config(&spec.bootstrap, &[]);
    cfg.set("group.id", format!("weir-bench-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("fetch.wait.max.ms", spec.max_wait.as_millis().to_string());
    for (k, v) in props {
        cfg.set(k, v);
    }
    let consumer: BaseConsumer = cfg
        .create()
        .map_err(|e| format!("librdkafka consumer: {e}"))?;
    let mut tpl = TopicPartitionList::new();
    for &p in &spec.partitions {
        let offset = if spec.from_end {
            // The end as of now, so that no record sent after `ready` is skipped while
            // librdkafka resolves a logical offset.
            // A topic created a moment ago may not have its leader known everywhere yet
            // (Apache Kafka answers NOT_LEADER_OR_FOLLOWER for a while): ask again.
            let t0 = Instant::now();
            let (_, high) = loop {
                match consumer.fetch_watermarks(&spec.topic, p, Duration::from_secs(10)) {
                    Ok(w) => break w,
                    Err(e) if t0.elapsed() < Duration::from_secs(15) => {
                        tracing::debug!("librdkafka watermarks of partition {p}: {e}; again");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Err(e) => return Err(format!("librdkafka watermarks: {e}")),
                }
            };
            Offset::Offset(high)
        } else {
            Offset::Offset(0)
        };
        tpl.add_partition_offset(&spec.topic, p, offset)
            .map_err(|e| format!("librdkafka assign: {e}"))?;
    }
    consumer
        .assign(&tpl)
        .map_err(|e| format!("librdkafka assign: {e}"))?;
    ready.fetch_add(1, Ordering::Relaxed);
    // Next offset per partition, to know when `until` is reached.
    let mut next: Vec<(i32, i64, i64)> = spec
        .partitions
        .iter()
        .map(|&p| {
            let end = spec.until.as_ref().and_then(|u| u.get(&p).copied());
            (p, 0, end.unwrap_or(i64::MAX))
        })
        .collect();
    let mut hist = new_histogram();
    let mut warm = super::workload::WarmupFilter::new(spec.warmup);
    let mut remaining = if spec.until.is_some() {
        next.iter().filter(|(_, pos, end)| pos < end).count()
    } else {
        usize::MAX
    };
    // A catch-up read that stops getting records (e.g. every response refused as larger
    // than receive.message.max.bytes) ends with the error rather than hanging.
    let mut last_record = Instant::now();
    let mut last_error = None;
    while !stop.load(Ordering::Relaxed) && remaining > 0 {
        if spec.until.is_some() && last_record.elapsed() > STALL {
            return Err(format!(
                "librdkafka consumer: no record for {} s (last error: {})",
                STALL.as_secs(),
                last_error.unwrap_or_else(|| "none".to_string())
            ));
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(e)) => {
                counters.errors.fetch_add(1, Ordering::Relaxed);
                last_error = Some(e.to_string());
            }
            Some(Ok(m)) => {
                last_record = Instant::now();
                let v = m.payload().unwrap_or(&[]);
                if spec.stamped && v.len() >= 8 {
                    let sent = u64::from_le_bytes(v[..8].try_into().expect("8 bytes"));
                    let now = clock_ns();
                    if warm.counts(sent, now, &counters) {
                        let _ = hist.record((now.saturating_sub(sent) / 1000).max(1));
                    }
                }
                counters.bytes.fetch_add(v.len() as u64, Ordering::Relaxed);
                counters.records.fetch_add(1, Ordering::Relaxed);
                if spec.until.is_some() {
                    if let Some(e) = next.iter_mut().find(|e| e.0 == m.partition()) {
                        let was_short = e.1 < e.2;
                        e.1 = m.offset() + 1;
                        if was_short && e.1 >= e.2 {
                            remaining -= 1;
                        }
                    }
                }
            }
        }
    }
    Ok(hist)
}
