//! `weir bench`: throughput and latency of a Kafka-protocol broker, measured against the
//! raw device and loopback TCP of the same run.
//!
//! Each scenario runs its weir phase between raw samples (sequential direct 1 MiB writes
//! and reads of a preallocated file, then one loopback TCP stream), so weir's figures come
//! out as ratios of what the machine could do at that moment. Progress goes to stderr, a
//! summary table to stdout, every figure to a JSON file and the curves to an SVG.

mod broker;
mod idle;
mod raw;
#[cfg(feature = "rdkafka")]
mod rdclient;
/// Built without the `rdkafka` feature: `--client rdkafka` says so.
#[cfg(not(feature = "rdkafka"))]
#[path = "rdclient_off.rs"]
mod rdclient;
mod report;
mod workload;

use std::collections::HashMap;
use std::future::Future;
use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use glommio::{ExecutorJoinHandle, LocalExecutorBuilder, Placement};
use hdrhistogram::Histogram;
use serde_json::json;

use crate::client::{Acks, Cluster, ClusterConfig, TopicPartition};
use broker::Broker;
use raw::{RawConfig, RawSample};
use report::{Latency, Report, SeriesPoint};
use workload::{ConsumeSpec, Counters, ProduceSpec};

const SCENARIOS: &str = "\
Scenarios:
  produce       N producers (--producers) send --record-size records as fast as they can
                for --duration seconds with --acks; MB/s and records/s over time, and the
                send->ack latency p50/p99/p999. Goal: >= 0.8 x min(raw disk write, TCP).
  consume-tail  consumers tail the log while producers send at a fixed offered rate
                (--rate records/s; default: half the max rate found by a 5 s probe);
                end-to-end latency (send -> record in the consumer's hands) p50/p99/p999;
                --fetch both (default) compares pipelined long polls with streaming fetch
                (requests/s, pushes/s, latency) in the same run.
                Goal: p99 < 1 ms.
  consume-disk  write --dataset bytes (several times the broker's cache), then read them
                from offset 0 with --consumers consumers; MB/s of the catch-up read.
                Goal: >= 0.8 x min(raw disk read, TCP).
  idle-polls    --fetchers long-poll fetches (one connection each) parked on idle
                partitions: broker CPU (from /proc/PID/stat) and RSS while they wait, then
                the wake-up latency when one record lands on a partition.
                Goal: < 2% of one core, wake-up p99 < 1 ms.

--client rdkafka runs produce, consume-tail and consume-disk through librdkafka (the
rdkafka crate: producers with delivery reports, consumers that `assign` without a
group) instead of weir's own client; --rd-set key=value passes any librdkafka
property (after the bench's own, so it wins), e.g. --rd-set fetch.max.bytes=67108864.
consume-tail then runs librdkafka's fetch only (--fetch is ignored); idle-polls stays
native-only.

Every scenario samples the raw device (sequential direct 1 MiB writes and reads of a
preallocated file at --raw-write-qd / --raw-read-qd) and loopback TCP before and after the
weir phase, and reports weir's figures as ratios of them. Without --bootstrap the bench
starts its own `weir serve` on 127.0.0.1:0 with data under --work-dir.

Output: progress on stderr, a summary table on stdout, all figures in --json
(default target/bench/<scenario>.json), throughput and latency curves in --svg
(default target/bench/<scenario>.svg).";

/// Which client library drives the load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ClientKind {
    /// weir's own client (crate::client) on glommio executors.
    Native,
    /// librdkafka through the rdkafka crate.
    Rdkafka,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    Produce,
    ConsumeTail,
    ConsumeDisk,
    IdlePolls,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Produce => "produce",
            Scenario::ConsumeTail => "consume-tail",
            Scenario::ConsumeDisk => "consume-disk",
            Scenario::IdlePolls => "idle-polls",
        }
    }
}

/// How the bench's consumers fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FetchMode {
    LongPoll,
    Stream,
    Both,
}

/// Measure a broker: produce, tail-latency, disk-bound catch-up and idle long polls.
#[derive(Debug, Clone, Args)]
#[command(after_long_help = SCENARIOS, after_help = SCENARIOS)]
pub struct BenchArgs {
    /// Which scenario to run.
    #[arg(value_enum)]
    pub scenario: Scenario,
    /// Benchmark this broker (host:port) instead of starting one.
    #[arg(long)]
    pub bootstrap: Option<String>,
    /// With --bootstrap: the broker's pid, for CPU and RSS figures.
    #[arg(long)]
    pub broker_pid: Option<u32>,
    /// Scratch directory for the broker's data and the raw-device file (removed after).
    #[arg(long, default_value = "target/bench/work")]
    pub work_dir: PathBuf,
    /// Keep --work-dir after the run.
    #[arg(long)]
    pub keep: bool,
    /// Seconds of the measured weir phase (produce, consume-tail).
    #[arg(long, default_value_t = 20)]
    pub duration: u64,
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
    /// Partitions of the bench topic [default: 4; idle-polls: one per 10 fetchers].
    #[arg(long)]
    pub partitions: Option<i32>,
    /// Bytes per record value (e.g. 1KiB, 100, 4k).
    #[arg(long, default_value = "1KiB", value_parser = parse_size)]
    pub record_size: u64,
    /// Producer batch size per partition.
    #[arg(long, default_value = "256KiB", value_parser = parse_size)]
    pub batch_size: u64,
    #[arg(long, default_value_t = 1)]
    pub linger_ms: u64,
    /// 0, 1 or -1 (all).
    #[arg(long, default_value_t = 1, allow_hyphen_values = true)]
    pub acks: i16,
    /// Produce requests in flight per producer connection.
    #[arg(long, default_value_t = 8)]
    pub max_in_flight: usize,
    /// consume-tail: offered records per second (all producers together).
    #[arg(long)]
    pub rate: Option<f64>,
    /// consume-tail: long-poll, stream (weir's streaming fetch), or both in turn on the same
    /// run for a comparison; consume-disk: stream or long-poll (both: long-poll).
    #[arg(long, value_enum, default_value = "both")]
    pub fetch: FetchMode,
    /// consume-disk: bytes to write and then read back.
    #[arg(long, default_value = "2GiB", value_parser = parse_size)]
    pub dataset: u64,
    /// idle-polls: parked fetches (one connection each).
    #[arg(long, default_value_t = 10_000)]
    pub fetchers: usize,
    /// idle-polls: seconds to measure the broker while fetches are parked.
    #[arg(long, default_value_t = 10)]
    pub idle_secs: u64,
    /// idle-polls: single-record wake-ups to time.
    #[arg(long, default_value_t = 40)]
    pub wake_rounds: usize,
    /// Seconds per raw sample (disk write, disk read, TCP: each).
    #[arg(long, default_value_t = 2.0)]
    pub raw_secs: f64,
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    pub raw_file: u64,
    #[arg(long, default_value_t = 8)]
    pub raw_write_qd: usize,
    #[arg(long, default_value_t = 16)]
    pub raw_read_qd: usize,
    /// Kafka-named broker setting for the broker we start (repeatable), e.g.
    /// --set cache.bytes.per.core=268435456.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub broker_set: Vec<String>,
    /// Client library of the producers and consumers (idle-polls: native only).
    #[arg(long, value_enum, default_value = "native")]
    pub client: ClientKind,
    /// --client rdkafka: a librdkafka property for every producer and consumer
    /// (repeatable), e.g. --rd-set fetch.max.bytes=67108864 --rd-set debug=fetch.
    #[arg(long = "rd-set", value_name = "KEY=VALUE")]
    pub rd_set: Vec<String>,
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[arg(long)]
    pub svg: Option<PathBuf>,
}

impl BenchArgs {
    /// Partitions of the bench topic (`run_scenario` fills in the scenario's default).
    fn parts(&self) -> i32 {
        self.partitions.unwrap_or(4)
    }
}

/// Parses `1024`, `4k`, `1KiB`, `8GiB`, `1MB`...: binary multiples either way.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("not a size: {s}"))?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1u64,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(format!("unknown size unit in {s}")),
    };
    Ok((n * mult as f64) as u64)
}

/// Entry point of `weir bench`.
pub fn run(args: BenchArgs) -> ExitCode {
    match run_scenario(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("weir bench: {e}");
            ExitCode::FAILURE
        }
    }
}

pub(crate) fn spawn_executor<G, F, T>(name: &str, io_memory: usize, g: G) -> ExecutorJoinHandle<T>
where
    G: FnOnce() -> F + Send + 'static,
    F: Future<Output = T> + 'static,
    T: Send + 'static,
{
    LocalExecutorBuilder::new(Placement::Unbound)
        .name(name)
        .io_memory(io_memory)
        // No short preempt_timer: with 200-500 us, glommio 0.9 was seen to lose socket
        // wake-ups (responses left in Recv-Q for seconds); the default does not.
        .spawn(g)
        .expect("start a glommio executor")
}

/// Runs `g` on a fresh executor thread and waits for it.
pub(crate) fn executor<G, F, T>(name: &str, g: G) -> T
where
    G: FnOnce() -> F + Send + 'static,
    F: Future<Output = T> + 'static,
    T: Send + 'static,
{
    spawn_executor(name, 32 << 20, g)
        .join()
        .expect("bench executor panicked")
}

/// Progress on stderr: one line redrawn in place on a terminal, a line per update
/// otherwise (logs, CI).
fn progress(line: &str) {
    let mut e = std::io::stderr();
    if e.is_terminal() {
        let _ = write!(e, "\r\x1b[2K{line}");
    } else {
        let _ = writeln!(e, "{line}");
    }
    let _ = e.flush();
}

fn progress_done() {
    if std::io::stderr().is_terminal() {
        eprintln!();
    }
}

fn bar(done: f64, total: f64) -> String {
    let n = 20;
    let k = ((done / total.max(1e-9)).clamp(0.0, 1.0) * n as f64) as usize;
    format!("[{}{}]", "#".repeat(k), ".".repeat(n - k))
}

struct Ctx {
    args: BenchArgs,
    report: Report,
    raw: RawConfig,
    broker: Broker,
    start: Instant,
    topic: String,
    /// --rd-set, parsed.
    rd_props: Vec<(String, String)>,
}

type WorkerResult = Result<Histogram<u64>, String>;

/// A producer or consumer worker: a glommio executor (native client) or a plain thread
/// (librdkafka runs its own I/O threads).
enum Worker {
    Glommio(ExecutorJoinHandle<WorkerResult>),
    Thread(std::thread::JoinHandle<WorkerResult>),
}

impl Worker {
    fn spawn_thread(
        name: String,
        f: impl FnOnce() -> WorkerResult + Send + 'static,
    ) -> Result<Worker, String> {
        std::thread::Builder::new()
            .name(name)
            .spawn(f)
            .map(Worker::Thread)
            .map_err(|e| format!("starting a bench thread: {e}"))
    }

    fn join(self, what: &str) -> WorkerResult {
        match self {
            Worker::Glommio(h) => h.join().map_err(|e| format!("{what} executor: {e}"))?,
            Worker::Thread(h) => h.join().map_err(|_| format!("{what} thread panicked"))?,
        }
    }
}

impl Ctx {
    fn raw_sample(&mut self, when: &str) -> Result<RawSample, String> {
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

    fn produce_spec(&self, rate: Option<f64>, stamp: bool, linger: Duration) -> ProduceSpec {
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
        }
    }

    /// Samples counters once a second until `duration` passes (then raises `stop`) or
    /// every worker is done; appends to the time series.
    #[expect(clippy::too_many_arguments, reason = "one call site per phase kind")]
    fn watch(
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
    fn run_phase(
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
            stats,
            consumed,
            produce_latency: p_hist,
            e2e_latency: c_hist,
        })
    }
}

#[derive(Debug, Clone, Copy)]
struct PhaseStats {
    bytes: u64,
    records: u64,
    errors: u64,
    seconds: f64,
}

impl PhaseStats {
    fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / self.seconds.max(1e-9) / 1e6
    }
    fn records_per_s(&self) -> f64 {
        self.records as f64 / self.seconds.max(1e-9)
    }
}

struct PhaseResult {
    /// Consumers' fetch requests (Fetch, or stream Open/Credit/Cancel) and pushes.
    fetch_requests: u64,
    pushes: u64,
    stats: PhaseStats,
    consumed: PhaseStats,
    produce_latency: Histogram<u64>,
    e2e_latency: Histogram<u64>,
}

fn run_scenario(args: &BenchArgs) -> Result<(), String> {
    let mut args = args.clone();
    // idle-polls: ten parked fetches per partition by default (say, ten consumer groups on
    // each), so that one record wakes ten fetches: wake-up latency, not fan-out.
    let default_partitions = match args.scenario {
        Scenario::IdlePolls => (args.fetchers / 10).clamp(1, 100_000) as i32,
        _ => 4,
    };
    args.partitions.get_or_insert(default_partitions);
    let args = &args;
    let scenario = args.scenario.name();
    if args.client == ClientKind::Rdkafka && args.scenario == Scenario::IdlePolls {
        return Err("idle-polls runs with the native client only (drop --client rdkafka)".into());
    }
    rdclient::parse_props(&args.rd_set)?;
    let work = args
        .work_dir
        .join(format!("{scenario}-{}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| format!("create {}: {e}", work.display()))?;
    let work = std::fs::canonicalize(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    raise_fd_limit();
    let result = run_in(args, &work);
    if !args.keep {
        let _ = std::fs::remove_dir_all(&work);
    }
    result
}

fn run_in(args: &BenchArgs, work: &std::path::Path) -> Result<(), String> {
    let scenario = args.scenario.name();
    let raw = RawConfig {
        dir: work.join("raw"),
        file_bytes: args.raw_file,
        seconds: args.raw_secs,
        write_qd: args.raw_write_qd,
        read_qd: args.raw_read_qd,
    };
    progress(&format!(
        "[setup] preallocating and writing the raw-device file ({} MiB)",
        args.raw_file >> 20
    ));
    raw::prepare(&raw).map_err(|e| format!("raw file: {e}"))?;
    progress_done();
    let broker = match &args.bootstrap {
        Some(b) => Broker::external(b, args.broker_pid),
        None => {
            let mut settings = vec![format!("num.partitions={}", args.parts())];
            if matches!(args.scenario, Scenario::IdlePolls) {
                // A thousand idle partitions: small segments, so that each log reserves
                // (preallocates) 2 MiB on open, not 64 MiB.
                settings.push("log.segment.bytes=1048576".to_string());
            }
            settings.extend(args.broker_set.iter().cloned());
            let b = Broker::spawn(&work.join("broker"), &settings)
                .map_err(|e| format!("starting weir serve: {e}"))?;
            eprintln!(
                "[setup] weir serve listening on {} (pid {:?})",
                b.bootstrap, b.pid
            );
            b
        }
    };
    let topic = format!("bench-{scenario}-{}", std::process::id());
    {
        let (bootstrap, topic, partitions) =
            (broker.bootstrap.clone(), topic.clone(), args.parts());
        executor("bench-setup", move || async move {
            let cluster = Cluster::connect(ClusterConfig::new(bootstrap)).await?;
            if let Err(e) = cluster.create_topic(&topic, partitions).await {
                // Brokers without CreateTopics: fall back to auto-creation.
                eprintln!("[setup] CreateTopics failed ({e}); relying on auto-creation");
            }
            cluster.partitions(&topic).await
        })
        .map_err(|e| format!("creating topic: {e}"))?;
    }
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let mut ctx = Ctx {
        report: Report {
            scenario: scenario.to_string(),
            command,
            config: json!({
                "producers": args.producers, "consumers": args.consumers,
                "partitions": args.parts(), "record_size": args.record_size,
                "batch_size": args.batch_size, "linger_ms": args.linger_ms, "acks": args.acks,
                "max_in_flight": args.max_in_flight, "duration_s": args.duration,
                "dataset": args.dataset, "fetchers": args.fetchers,
                "raw_write_qd": args.raw_write_qd, "raw_read_qd": args.raw_read_qd,
                "raw_file": args.raw_file, "raw_secs": args.raw_secs,
                "bootstrap": broker.bootstrap, "own_broker": args.bootstrap.is_none(),
                "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
                "client": match args.client {
                    ClientKind::Native => "native",
                    ClientKind::Rdkafka => "rdkafka",
                },
                "rd_set": args.rd_set,
            }),
            ..Report::default()
        },
        args: args.clone(),
        raw,
        broker,
        start: Instant::now(),
        topic,
        rd_props: rdclient::parse_props(&args.rd_set)?,
    };
    match args.scenario {
        Scenario::Produce => scenario_produce(&mut ctx)?,
        Scenario::ConsumeTail => scenario_consume_tail(&mut ctx)?,
        Scenario::ConsumeDisk => scenario_consume_disk(&mut ctx)?,
        Scenario::IdlePolls => scenario_idle(&mut ctx)?,
    }
    ctx.broker.stop();
    ctx.report.print_summary();
    let json_path = args
        .json
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("target/bench/{scenario}.json")));
    let svg_path = args
        .svg
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("target/bench/{scenario}.svg")));
    ctx.report
        .write_files(&json_path, &svg_path)
        .map_err(|e| format!("writing reports: {e}"))?;
    println!("\nwrote {} and {}", json_path.display(), svg_path.display());
    Ok(())
}

fn scenario_produce(ctx: &mut Ctx) -> Result<(), String> {
    ctx.raw_sample("before")?;
    let linger = Duration::from_millis(ctx.args.linger_ms);
    let specs = (0..ctx.args.producers)
        .map(|_| ctx.produce_spec(None, false, linger))
        .collect();
    let d = Duration::from_secs(ctx.args.duration);
    let r = ctx.run_phase("produce", specs, Vec::new(), Some(d), None)?;
    ctx.raw_sample("after")?;
    let raw = ctx.report.raw_means();
    let rep = &mut ctx.report;
    rep.figure("weir produce", r.stats.mb_per_s(), "MB/s");
    rep.figure("weir produce", r.stats.records_per_s(), "records/s");
    rep.figure("produce errors", r.stats.errors as f64, "records");
    let yard = raw.disk_write_bps.min(raw.tcp_bps) / 1e6;
    let ratio = r.stats.mb_per_s() / yard;
    rep.figure(
        "weir / raw disk write",
        r.stats.mb_per_s() / (raw.disk_write_bps / 1e6),
        "x",
    );
    rep.figure(
        "weir / loopback TCP",
        r.stats.mb_per_s() / (raw.tcp_bps / 1e6),
        "x",
    );
    rep.goal(
        "produce / min(raw write, TCP)",
        ratio,
        ">= 0.8",
        ratio >= 0.8,
    );
    rep.latencies.push(Latency {
        name: format!("produce latency (acks={})", ctx.args.acks),
        hist: r.produce_latency,
    });
    Ok(())
}

fn scenario_consume_tail(ctx: &mut Ctx) -> Result<(), String> {
    ctx.raw_sample("before")?;
    let rate = match ctx.args.rate {
        Some(r) => r,
        None => {
            let specs = (0..ctx.args.producers)
                .map(|_| ctx.produce_spec(None, false, Duration::from_millis(ctx.args.linger_ms)))
                .collect();
            let probe = ctx.run_phase(
                "max-rate probe",
                specs,
                Vec::new(),
                Some(Duration::from_secs(5)),
                None,
            )?;
            let max = probe.stats.records_per_s();
            ctx.report
                .figure("max produce rate (probe)", max, "records/s");
            max / 2.0
        }
    };
    ctx.report.figure("offered rate", rate, "records/s");
    let per = rate / ctx.args.producers.max(1) as f64;
    let modes: &[(&str, bool)] = match ctx.args.fetch {
        _ if ctx.args.client == ClientKind::Rdkafka => &[("librdkafka", false)],
        FetchMode::LongPoll => &[("long poll", false)],
        FetchMode::Stream => &[("stream", true)],
        FetchMode::Both => &[("long poll", false), ("stream", true)],
    };
    // (mode, e2e p99 µs, fetch requests per second)
    let mut summary: Vec<(&str, f64, f64)> = Vec::new();
    for &(mode, streaming) in modes {
        let producers = (0..ctx.args.producers)
            .map(|_| ctx.produce_spec(Some(per), true, Duration::ZERO))
            .collect();
        let consumers = split_partitions(ctx.args.parts(), ctx.args.consumers)
            .into_iter()
            .map(|parts| ConsumeSpec {
                bootstrap: ctx.broker.bootstrap.clone(),
                topic: ctx.topic.clone(),
                partitions: parts,
                from_end: true,
                until: None,
                stamped: true,
                max_wait: Duration::from_millis(500),
                streaming,
            })
            .collect();
        let d = Duration::from_secs(ctx.args.duration);
        let r = ctx.run_phase(
            &format!("tail ({mode})"),
            producers,
            consumers,
            Some(d),
            None,
        )?;
        let rep = &mut ctx.report;
        rep.figure(
            &format!("[{mode}] achieved produce rate"),
            r.stats.records_per_s(),
            "records/s",
        );
        rep.figure(
            &format!("[{mode}] consumed"),
            r.consumed.records as f64,
            "records",
        );
        rep.figure(
            &format!("[{mode}] produced"),
            r.stats.records as f64,
            "records",
        );
        let rps = r.fetch_requests as f64 / r.stats.seconds.max(1e-9);
        if ctx.args.client == ClientKind::Native {
            // librdkafka does not count its fetches for us.
            rep.figure(&format!("[{mode}] fetch requests"), rps, "requests/s");
        }
        if streaming {
            rep.figure(
                &format!("[{mode}] pushes"),
                r.pushes as f64 / r.stats.seconds.max(1e-9),
                "pushes/s",
            );
        }
        let p50 = r.e2e_latency.value_at_percentile(50.0) as f64;
        let p99 = r.e2e_latency.value_at_percentile(99.0) as f64;
        rep.figure(&format!("[{mode}] end-to-end p50"), p50, "us");
        rep.goal(
            &format!("[{mode}] end-to-end p99 (us)"),
            p99,
            "< 1000",
            p99 < 1000.0,
        );
        summary.push((mode, p99, rps));
        rep.latencies.push(Latency {
            name: format!("end-to-end latency ({mode})"),
            hist: r.e2e_latency,
        });
        rep.latencies.push(Latency {
            name: format!("produce latency (acks={}, {mode} phase)", ctx.args.acks),
            hist: r.produce_latency,
        });
    }
    if let [(_, lp_p99, lp_rps), (_, st_p99, st_rps)] = summary[..] {
        let rep = &mut ctx.report;
        let lat = lp_p99 / st_p99.max(1.0);
        let req = lp_rps / st_rps.max(1e-9);
        rep.goal(
            "stream: e2e p99 lower than long poll by (x)",
            lat,
            ">= 2",
            lat >= 2.0,
        );
        rep.goal(
            "stream: fewer fetch requests than long poll by (x)",
            req,
            ">= 5",
            req >= 5.0,
        );
    }
    ctx.raw_sample("after")?;
    Ok(())
}

fn scenario_consume_disk(ctx: &mut Ctx) -> Result<(), String> {
    ctx.raw_sample("before")?;
    let linger = Duration::from_millis(ctx.args.linger_ms);
    let specs = (0..ctx.args.producers)
        .map(|_| ctx.produce_spec(None, false, linger))
        .collect();
    let w = ctx.run_phase(
        "write dataset",
        specs,
        Vec::new(),
        None,
        Some(ctx.args.dataset),
    )?;
    ctx.report
        .figure("weir produce (dataset write)", w.stats.mb_per_s(), "MB/s");
    ctx.raw_sample("between")?;
    let (bootstrap, topic, n) = (
        ctx.broker.bootstrap.clone(),
        ctx.topic.clone(),
        ctx.args.parts(),
    );
    let ends: HashMap<i32, i64> = executor("bench-ends", move || async move {
        let cluster = Cluster::connect(ClusterConfig::new(bootstrap)).await?;
        let mut ends = HashMap::new();
        for p in 0..n {
            ends.insert(
                p,
                cluster
                    .list_offset(&TopicPartition::new(topic.clone(), p), -1)
                    .await?,
            );
        }
        Ok::<_, crate::client::Error>(ends)
    })
    .map_err(|e| format!("end offsets: {e}"))?;
    let consumers = split_partitions(ctx.args.parts(), ctx.args.consumers)
        .into_iter()
        .map(|parts| ConsumeSpec {
            bootstrap: ctx.broker.bootstrap.clone(),
            topic: ctx.topic.clone(),
            partitions: parts,
            from_end: false,
            until: Some(ends.clone()),
            stamped: false,
            max_wait: Duration::from_millis(500),
            streaming: ctx.args.fetch == FetchMode::Stream,
        })
        .collect();
    let r = ctx.run_phase(
        "catch-up read",
        Vec::new(),
        consumers,
        None,
        Some(w.stats.bytes),
    )?;
    ctx.raw_sample("after")?;
    let raw = ctx.report.raw_means();
    let rep = &mut ctx.report;
    let mbps = r.consumed.mb_per_s();
    rep.figure("dataset written", w.stats.bytes as f64 / 1e6, "MB");
    rep.figure("dataset read", r.consumed.bytes as f64 / 1e6, "MB");
    rep.figure("weir catch-up read", mbps, "MB/s");
    rep.figure(
        "weir read / raw disk read",
        mbps / (raw.disk_read_bps / 1e6),
        "x",
    );
    rep.figure("weir read / loopback TCP", mbps / (raw.tcp_bps / 1e6), "x");
    let ratio = mbps / (raw.disk_read_bps.min(raw.tcp_bps) / 1e6);
    rep.goal(
        "catch-up read / min(raw read, TCP)",
        ratio,
        ">= 0.8",
        ratio >= 0.8,
    );
    let wr = w.stats.mb_per_s() / (raw.disk_write_bps.min(raw.tcp_bps) / 1e6);
    rep.figure("dataset write / min(raw write, TCP)", wr, "x");
    rep.latencies.push(Latency {
        name: format!("produce latency (acks={})", ctx.args.acks),
        hist: w.produce_latency,
    });
    Ok(())
}

fn scenario_idle(ctx: &mut Ctx) -> Result<(), String> {
    ctx.raw_sample("before")?;
    // One fd per fetcher (see idle.rs): stay under the fd limit.
    let fd_cap = fd_limit().saturating_sub(512).max(1);
    let fetchers = if ctx.args.fetchers > fd_cap {
        eprintln!(
            "[idle-polls] {} fetchers need ~{} fds; the limit allows {fd_cap}: using {fd_cap}",
            ctx.args.fetchers, ctx.args.fetchers
        );
        fd_cap
    } else {
        ctx.args.fetchers
    };
    let spec = idle::IdleSpec {
        bootstrap: ctx.broker.bootstrap.clone(),
        topic: ctx.topic.clone(),
        partitions: ctx.args.parts(),
        fetchers,
        idle: Duration::from_secs(ctx.args.idle_secs),
        rounds: ctx.args.wake_rounds,
        broker_pid: ctx.broker.pid,
    };
    let (res, hist) = spawn_executor("bench-idle", 1 << 20, move || async move {
        let r = idle::run(spec, |l| progress(&format!("[idle-polls] {l}"))).await;
        progress_done();
        r
    })
    .join()
    .map_err(|e| format!("idle executor: {e}"))??;
    ctx.raw_sample("after")?;
    let rep = &mut ctx.report;
    rep.figure("parked fetches", res.parked as f64, "fetches");
    if let Some(c) = res.broker_cpu_core_fraction {
        rep.figure("broker CPU while parked", c * 100.0, "% of a core");
        rep.goal("idle broker CPU (% of a core)", c * 100.0, "< 2", c < 0.02);
    }
    if let Some(r) = res.broker_rss_parked_bytes {
        rep.figure("broker RSS while parked", r as f64 / 1e6, "MB");
    }
    if let Some(r) = res.broker_rss_before_bytes {
        rep.figure("broker RSS before", r as f64 / 1e6, "MB");
    }
    rep.figure("wake-ups timed", res.wakeups as f64, "responses");
    rep.figure(
        "waking produce acked (acks=1) p50",
        res.produce_ack_p50_us as f64,
        "us",
    );
    rep.figure(
        "waking produce acked (acks=1) p99",
        res.produce_ack_p99_us as f64,
        "us",
    );
    rep.figure(
        "wake-ups missing (> 5 s)",
        res.wakeup_timeouts as f64,
        "responses",
    );
    let p99 = hist.value_at_percentile(99.0) as f64;
    rep.goal(
        "wake-up p99 (us)",
        p99,
        "< 1000",
        p99 < 1000.0 && res.wakeups > 0,
    );
    rep.extra = serde_json::to_value(&res).unwrap_or_default();
    rep.latencies.push(Latency {
        name: "wake-up latency (produce sent -> parked fetch answered)".to_string(),
        hist,
    });
    Ok(())
}

/// Partitions 0..n dealt round-robin to `k` consumers (none left empty).
fn split_partitions(n: i32, k: usize) -> Vec<Vec<i32>> {
    let k = k.clamp(1, n.max(1) as usize);
    let mut out = vec![Vec::new(); k];
    for p in 0..n {
        out[p as usize % k].push(p);
    }
    out
}

/// The soft limit on open files.
fn fd_limit() -> usize {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid pointer to a local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur as usize
    } else {
        1024
    }
}

/// Idle-polls opens one socket per fetch: lift the fd limit (the broker we spawn
/// inherits it).
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            // Each client connection holds two fds (see client::connection). Root may
            // raise the hard limit too; otherwise settle for the hard limit.
            let want: libc::rlim_t = 65_536;
            let raised = libc::rlimit {
                rlim_cur: want.max(lim.rlim_cur),
                rlim_max: want.max(lim.rlim_max),
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 && lim.rlim_cur < lim.rlim_max {
                lim.rlim_cur = lim.rlim_max;
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("1KiB").unwrap(), 1024);
        assert_eq!(parse_size("8GiB").unwrap(), 8 << 30);
        assert_eq!(parse_size("100").unwrap(), 100);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("1.5MiB").unwrap(), 3 << 19);
        assert!(parse_size("3 parsecs").is_err());
    }

    #[test]
    fn partitions_split_evenly() {
        assert_eq!(split_partitions(4, 2), vec![vec![0, 2], vec![1, 3]]);
        assert_eq!(split_partitions(2, 5), vec![vec![0], vec![1]]);
    }
}
