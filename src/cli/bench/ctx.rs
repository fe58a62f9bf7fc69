//! The state of one benchmark run (`Ctx`): the broker under test, the same-run yardsticks
//! (raw device, loopback), the workers, and the report being filled in.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use glommio::ExecutorJoinHandle;
use hdrhistogram::Histogram;

use crate::client::Acks;
use broker::Broker;
use raw::{RawConfig, RawSample};
use report::{Report, SeriesPoint};
use workload::{ConsumeSpec, Counters, ProduceSpec};

use super::*;

pub(super) struct Ctx {
    pub(super) args: BenchArgs,
    pub(super) report: Report,
    pub(super) raw: RawConfig,
    pub(super) broker: Broker,
    pub(super) start: Instant,
    pub(super) topic: String,
    /// --rd-set, parsed.
    pub(super) rd_props: Vec<(String, String)>,
}

/// A producer or consumer worker: a glommio executor (native client) or a plain thread
/// (librdkafka runs its own I/O threads).
pub(super) enum Worker {
    Glommio(ExecutorJoinHandle<WorkerResult>),
    Thread(std::thread::JoinHandle<WorkerResult>),
}

impl Worker {
    pub(super) fn spawn_thread(
        name: String,
        f: impl FnOnce() -> WorkerResult + Send + 'static,
    ) -> Result<Worker, String> {
        std::thread::Builder::new()
            .name(name)
            .spawn(f)
            .map(Worker::Thread)
            .map_err(|e| format!("starting a bench thread: {e}"))
    }

    pub(super) fn join(self, what: &str) -> WorkerResult {
        match self {
            Worker::Glommio(h) => h.join().map_err(|e| format!("{what} executor: {e}"))?,
            Worker::Thread(h) => h.join().map_err(|_| format!("{what} thread panicked"))?,
        }
    }
}

impl Ctx {
    pub(super) fn raw_sample(&mut self, when: &str) -> Result<RawSample, String> {
        progress(&format!(
            "[raw {when}] disk write, disk read, loopback TCP ({:.0} s each)",
            self.raw.seconds
        ));
        let s = raw::sample(&self.raw).map_err(|e| format!("raw sample: {e}"))?;
        progress(&format!(
            "[raw {when}] disk write {:.0} MB/s, disk read {:.0} MB/s, TCP {:.0} MB/s",
            s.disk_write_bps / 1e6,
            s.disk_read_bps / 1e6,
            s.tcp_bps / 1e6
        ));
        progress_done();
        self.report.raw.push((when.to_string(), s));
        Ok(s)
    }

    pub(super) fn produce_spec(
        &self,
        rate: Option<f64>,
        stamp: bool,
        linger: Duration,
    ) -> ProduceSpec {
        ProduceSpec {
            bootstrap: self.broker.bootstrap.clone(),
            topic: self.topic.clone(),
            record_size: self.args.record_size as usize,
            batch_size: self.args.batch_size as usize,
            linger,
            acks: Acks::from_code(self.args.acks).unwrap_or(Acks::Leader),
            max_in_flight: self.args.max_in_flight,
            rate,
            stamp,
            payload: self.args.payload,
        }
    }

    /// Samples counters once a second until `duration` passes (then raises `stop`) or
    /// every worker is done; appends to the time series.
    #[expect(clippy::too_many_arguments, reason = "one call site per phase kind")]
    pub(super) fn watch(
        &mut self,
        phase: &str,
        counters: &[Arc<Counters>],
        stop: &Arc<AtomicBool>,
        finished: &Arc<AtomicUsize>,
        workers: usize,
        duration: Option<Duration>,
        total_bytes: Option<u64>,
    ) -> PhaseStats {
        let t0 = Instant::now();
        let sum = |f: fn(&Counters) -> u64| counters.iter().map(|c| f(c)).sum::<u64>();
        let (mut last_b, mut last_r, mut last_t) = (0u64, 0u64, t0);
        loop {
            std::thread::sleep(Duration::from_millis(100));
            let now = Instant::now();
            let all_done = finished.load(Ordering::Relaxed) >= workers;
            if now.duration_since(last_t) >= Duration::from_secs(1) || all_done {
                let b = sum(|c| c.bytes.load(Ordering::Relaxed));
                let r = sum(|c| c.records.load(Ordering::Relaxed));
                let dt = now.duration_since(last_t).as_secs_f64();
                let (mbps, rps) = ((b - last_b) as f64 / dt / 1e6, (r - last_r) as f64 / dt);
                self.report.series.push(SeriesPoint {
                    phase: phase.to_string(),
                    t: now.duration_since(self.start).as_secs_f64(),
                    mb_per_s: mbps,
                    records_per_s: rps,
                });
                let elapsed = now.duration_since(t0).as_secs_f64();
                let frac = match (duration, total_bytes) {
                    (Some(d), _) => bar(elapsed, d.as_secs_f64()),
                    (None, Some(t)) => bar(b as f64, t as f64),
                    _ => String::new(),
                };
                progress(&format!(
                    "[{phase}] {frac} {elapsed:5.1} s  {mbps:8.1} MB/s  {rps:10.0} rec/s  errors {}",
                    sum(|c| c.errors.load(Ordering::Relaxed))
                ));
                (last_b, last_r, last_t) = (b, r, now);
            }
            if duration.is_some_and(|d| now.duration_since(t0) >= d) {
                stop.store(true, Ordering::Relaxed);
            }
            if all_done {
                break;
            }
        }
        progress_done();
        PhaseStats {
            bytes: sum(|c| c.bytes.load(Ordering::Relaxed)),
            records: sum(|c| c.records.load(Ordering::Relaxed)),
            errors: sum(|c| c.errors.load(Ordering::Relaxed)),
            seconds: t0.elapsed().as_secs_f64(),
        }
    }

    /// Runs producers (and optionally consumers started first) as one phase.
    pub(super) fn run_phase(
        &mut self,
        phase: &str,
        producers: Vec<ProduceSpec>,
        consumers: Vec<ConsumeSpec>,
        duration: Option<Duration>,
        budget: Option<u64>,
    ) -> Result<PhaseResult, String> {
        let stop = Arc::new(AtomicBool::new(false));
        // Tailing consumers run on until they caught up with what the producers sent.
        let c_stop = if producers.is_empty() {
            stop.clone()
        } else {
            Arc::new(AtomicBool::new(false))
        };
        let finished = Arc::new(AtomicUsize::new(0));
        let c_finished = if producers.is_empty() {
            finished.clone()
        } else {
            Arc::new(AtomicUsize::new(0))
        };
        let ready = Arc::new(AtomicU64::new(0));
        let budget_cell = budget.map(|b| Arc::new(AtomicI64::new(b as i64)));
        let mut c_handles = Vec::new();
        let mut c_counters = Vec::new();
        for (i, spec) in consumers.iter().cloned().enumerate() {
            let c = Arc::new(Counters::default());
            c_counters.push(c.clone());
            let (stop, finished, ready) = (c_stop.clone(), c_finished.clone(), ready.clone());
            let name = format!("bench-consumer-{i}");
            c_handles.push(match self.args.client {
                ClientKind::Native => {
                    Worker::Glommio(spawn_executor(&name, 1 << 20, move || async move {
                        let r = workload::consume(spec, c, stop, ready).await;
                        finished.fetch_add(1, Ordering::Relaxed);
                        r
                    }))
                }
                ClientKind::Rdkafka => {
                    let props = self.rd_props.clone();
                    Worker::spawn_thread(name, move || {
                        let r = rdclient::consume(spec, &props, c, stop, ready);
                        finished.fetch_add(1, Ordering::Relaxed);
                        r
                    })?
                }
            });
        }
        if !consumers.is_empty() {
            // Let the consumers find their positions and park their first fetch.
            let t = Instant::now();
            while ready.load(Ordering::Relaxed) < consumers.len() as u64
                && t.elapsed() < Duration::from_secs(10)
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        let mut p_handles = Vec::new();
        let mut p_counters = Vec::new();
        for (i, spec) in producers.iter().cloned().enumerate() {
            let c = Arc::new(Counters::default());
            p_counters.push(c.clone());
            let (stop, finished, budget) = (stop.clone(), finished.clone(), budget_cell.clone());
            let name = format!("bench-producer-{i}");
            p_handles.push(match self.args.client {
                ClientKind::Native => {
                    Worker::Glommio(spawn_executor(&name, 1 << 20, move || async move {
                        let r = workload::produce(spec, c, stop, budget).await;
                        finished.fetch_add(1, Ordering::Relaxed);
                        r
                    }))
                }
                ClientKind::Rdkafka => {
                    let props = self.rd_props.clone();
                    Worker::spawn_thread(name, move || {
                        let r = rdclient::produce(spec, &props, c, stop, budget);
                        finished.fetch_add(1, Ordering::Relaxed);
                        r
                    })?
                }
            });
        }
        let workers = producers.len() + consumers.len();
        // Throughput is what the producers got acked, or what consumers read if there are
        // no producers.
        let watched = if p_counters.is_empty() {
            &c_counters
        } else {
            &p_counters
        };
        let stats = if consumers.is_empty() || producers.is_empty() {
            self.watch(phase, watched, &stop, &finished, workers, duration, budget)
        } else {
            // Tailing: stop consumers once producers are done and they have caught up.
            let watched = watched.clone();
            let s = self.watch(
                phase,
                &watched,
                &stop,
                &finished,
                producers.len(),
                duration,
                None,
            );
            let want: u64 = watched
                .iter()
                .map(|c| c.records.load(Ordering::Relaxed))
                .sum();
            let t = Instant::now();
            while c_counters
                .iter()
                .map(|c| c.records.load(Ordering::Relaxed))
                .sum::<u64>()
                < want
                && t.elapsed() < Duration::from_secs(10)
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            c_stop.store(true, Ordering::Relaxed);
            s
        };
        let mut p_hist = workload::new_histogram();
        for h in p_handles {
            let h = h.join("producer")?;
            p_hist.add(h).map_err(|e| e.to_string())?;
        }
        let mut c_hist = workload::new_histogram();
        for h in c_handles {
            let h = h.join("consumer")?;
            c_hist.add(h).map_err(|e| e.to_string())?;
        }
        // The consumers' counters, summed.
        let total = |field: fn(&Counters) -> &AtomicU64| -> u64 {
            c_counters
                .iter()
                .map(|c| field(c).load(Ordering::Relaxed))
                .sum()
        };
        let consumed = PhaseStats {
            bytes: total(|c| &c.bytes),
            records: total(|c| &c.records),
            errors: total(|c| &c.errors),
            seconds: stats.seconds,
        };
        Ok(PhaseResult {
            fetch_requests: total(|c| &c.requests),
            pushes: total(|c| &c.pushes),
            first_record_us: c_counters
                .iter()
                .map(|c| c.first_record_us.load(Ordering::Relaxed))
                .max()
                .unwrap_or(0),
            stats,
            consumed,
            produce_latency: p_hist,
            e2e_latency: c_hist,
        })
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) struct PhaseStats {
    pub(super) bytes: u64,
    pub(super) records: u64,
    pub(super) errors: u64,
    pub(super) seconds: f64,
}

impl PhaseStats {
    pub(super) fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / self.seconds.max(1e-9) / 1e6
    }
    pub(super) fn records_per_s(&self) -> f64 {
        self.records as f64 / self.seconds.max(1e-9)
    }
}

pub(super) struct PhaseResult {
    /// Consumers' fetch requests (Fetch, or stream Open/Credit/Cancel) and pushes.
    pub(super) fetch_requests: u64,
    pub(super) pushes: u64,
    /// The slowest consumer's first record (µs, consumers with a warm-up).
    pub(super) first_record_us: u64,
    pub(super) stats: PhaseStats,
    pub(super) consumed: PhaseStats,
    pub(super) produce_latency: Histogram<u64>,
    pub(super) e2e_latency: Histogram<u64>,
}
