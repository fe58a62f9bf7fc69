//! `weir bench`: throughput and latency of a Kafka-protocol broker, measured against the
//! raw device and loopback TCP of the same run.
//!
//! Each scenario runs its weir phase between raw samples (sequential direct 1 MiB writes
//! and reads of a preallocated file, then one loopback TCP stream), so weir's figures come
//! out as ratios of what the machine could do at that moment. Progress goes to stderr, a
//! summary table to stdout, every figure to a JSON file and the curves to an SVG.

mod broker;
mod consume_disk;
mod consume_tail;
mod ctx;
mod idle;
mod idle_scenario;
mod produce;
mod raw;
#[cfg(feature = "rdkafka")]
mod rdclient;
/// Built without the `rdkafka` feature: `--client rdkafka` says so.
#[cfg(not(feature = "rdkafka"))]
#[path = "rdclient_off.rs"]
mod rdclient;
mod report;
mod workload;

use std::future::Future;
use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, ValueEnum};
use glommio::{ExecutorJoinHandle, LocalExecutorBuilder, Placement};
use hdrhistogram::Histogram;
use serde_json::json;

use crate::client::{Cluster, ClusterConfig};
use broker::Broker;
use consume_disk::*;
use consume_tail::*;
use ctx::*;
use idle_scenario::*;
use produce::*;
use raw::RawConfig;
use report::Report;

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
  raw           the yardsticks alone: --raw-secs of direct writes, of direct reads and of
                loopback TCP (for scripts that run several weir phases against one
                sample, e.g. benches/replication.py).
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

/// What the producers' record values hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Payload {
    /// One byte repeated (with the send time in the first 8 bytes): compresses ~100:1.
    Repeat,
    /// JSON-like event text, different in every record of a pool of 4,096: compresses about
    /// as log lines do (lz4 ~3:1), so compressed produce decompresses real work.
    Text,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    Produce,
    ConsumeTail,
    ConsumeDisk,
    IdlePolls,
    Raw,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Produce => "produce",
            Scenario::ConsumeTail => "consume-tail",
            Scenario::ConsumeDisk => "consume-disk",
            Scenario::IdlePolls => "idle-polls",
            Scenario::Raw => "raw",
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
    /// Produce into this topic (created with --partitions if it does not exist) instead of
    /// a new `bench-<scenario>-<pid>`; e.g. a topic of replication factor 3 made beforehand.
    #[arg(long)]
    pub topic: Option<String>,
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
    /// consume-tail, produce: offered records per second (all producers together);
    /// produce without it sends as fast as it can.
    #[arg(long)]
    pub rate: Option<f64>,
    /// consume-tail: long-poll, stream (weir's streaming fetch), or both in turn on the same
    /// run for a comparison; consume-disk: stream or long-poll (both: long-poll).
    #[arg(long, value_enum, default_value = "both")]
    pub fetch: FetchMode,
    /// consume-disk: bytes to write and then read back.
    #[arg(long, default_value = "2GiB", value_parser = parse_size)]
    pub dataset: u64,
    /// consume-disk: between writing the dataset and reading it back, write back dirty pages
    /// and drop the kernel's page cache (`sync; echo 3 > /proc/sys/vm/drop_caches`, as root),
    /// so that a broker reading through the page cache (Apache Kafka) reads from the device
    /// as weir's direct I/O does.
    #[arg(long)]
    pub drop_caches: bool,
    /// idle-polls: parked fetches (one connection each).
    #[arg(long, default_value_t = 10_000)]
    pub fetchers: usize,
    /// idle-polls: seconds to measure the broker while fetches are parked.
    #[arg(long, default_value_t = 10)]
    pub idle_secs: u64,
    /// idle-polls: single-record wake-ups to time.
    #[arg(long, default_value_t = 40)]
    pub wake_rounds: usize,
    /// Seconds per raw sample (disk write, disk read, TCP: each); 0: no raw samples (produce,
    /// consume-tail, consume-disk: no ratios then; the caller measures the yardsticks, e.g.
    /// with `weir bench raw`).
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
    /// What record values hold: `repeat` (one byte) or `text` (JSON-like events, varied).
    #[arg(long, value_enum, default_value = "repeat")]
    pub payload: Payload,
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

type WorkerResult = Result<Histogram<u64>, String>;

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
    let no_raw = args.raw_secs <= 0.0;
    if no_raw
        && !matches!(
            args.scenario,
            Scenario::Produce | Scenario::ConsumeTail | Scenario::ConsumeDisk
        )
    {
        return Err("--raw-secs 0 is for produce, consume-tail and consume-disk only".into());
    }
    if !no_raw {
        progress(&format!(
            "[setup] preallocating and writing the raw-device file ({} MiB)",
            args.raw_file >> 20
        ));
        raw::prepare(&raw).map_err(|e| format!("raw file: {e}"))?;
        progress_done();
    }
    if args.scenario == Scenario::Raw {
        return scenario_raw(args, raw);
    }
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
    let topic = args
        .topic
        .clone()
        .unwrap_or_else(|| format!("bench-{scenario}-{}", std::process::id()));
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
        Scenario::Raw => unreachable!("answered before a broker is started"),
    }
    ctx.broker.stop();
    finish(args, &ctx.report)
}

/// `weir bench raw`: one sample of each yardstick, no broker.
fn scenario_raw(args: &BenchArgs, raw: RawConfig) -> Result<(), String> {
    progress(&format!(
        "[raw] disk write, disk read, loopback TCP ({:.0} s each)",
        raw.seconds
    ));
    let s = raw::sample(&raw).map_err(|e| format!("raw sample: {e}"))?;
    progress_done();
    let report = Report {
        scenario: "raw".to_string(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        config: json!({
            "raw_write_qd": args.raw_write_qd, "raw_read_qd": args.raw_read_qd,
            "raw_file": args.raw_file, "raw_secs": args.raw_secs,
        }),
        raw: vec![("raw".to_string(), s)],
        ..Report::default()
    };
    finish(args, &report)
}

/// Prints the summary and writes the JSON and SVG files.
fn finish(args: &BenchArgs, report: &Report) -> Result<(), String> {
    let scenario = args.scenario.name();
    report.print_summary();
    let json_path = args
        .json
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("target/bench/{scenario}.json")));
    let svg_path = args
        .svg
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("target/bench/{scenario}.svg")));
    report
        .write_files(&json_path, &svg_path)
        .map_err(|e| format!("writing reports: {e}"))?;
    println!("\nwrote {} and {}", json_path.display(), svg_path.display());
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
