//! Storage throughput benchmark: weir's `Log` against the raw device, in the same run.
//!
//! The disk weir is developed on is shared and its speed varies 2-5x from minute to minute
//! (see `docs/platform.md`), so absolute figures mean little. Every weir measurement is therefore
//! paired with a raw reference done with glommio directly, and the pairs are interleaved
//! over several rounds (raw, weir, raw, weir, ...; the order within a pair alternates from
//! round to round). The report gives medians with min-max and the weir/raw ratios.
//!
//! What is measured (all direct I/O on files in `--dir`, by default under `target/`):
//!
//! | name | what |
//! |---|---|
//! | `raw_write` | 1 MiB `write_at`s into a fallocated file, `writes_in_flight` (8) in flight |
//! | `append_16k` / `append_1m` | `Log::append` of 1 KiB records in ~16 KiB / ~1 MiB batches, many appends in flight, no flush |
//! | `append_16k_flush` / `append_1m_flush` | the same, with a `Log::flush` after every 1 MiB appended |
//! | `raw_read` | 1 MiB `read_at`s, 16 in flight, of the dataset log's segment files |
//! | `cold_read` | `Log::read(offset, 1 MiB)` from offset 0 to the end of the dataset log, reopened with a 1 MiB batch cache |
//!
//! fdatasyncs are counted from the values `flush` returns: every fdatasync publishes one new
//! flushed offset, and the flush call that issued it returns exactly that offset, so the
//! number of distinct returned offsets is the number of fdatasyncs (plus any segment seals).
//! A run on the simulated disk (`SimDisk`, which counts fdatasyncs exactly) cross-checks it.
//!
//! Run: `cargo bench -p weir-storage --bench log_throughput -- [--quick] [--dataset-gib N]`
//! (see `--help` and `benches/README.md`). Figures go to stdout and, as JSON, to
//! `target/bench-storage.json`. Without `--bench` on the command line (as under
//! `cargo test --benches`) it does a tiny smoke run.

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use glommio::io::{DmaFile, OpenOptions};
use weir_storage::batch::RecordBatchBuilder;
use weir_storage::io::SimDisk;
use weir_storage::{BatchCache, Log, LogConfig};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// One raw I/O, and the read size asked of `Log::read`.
const IO_BYTES: u64 = MIB;
/// Raw reads in flight (weir's default read-ahead is 16 MiB of 1 MiB chunks).
const RAW_READ_QD: usize = 16;
/// Goal of the storage issue: weir reaches this fraction of the raw figure.
const GOAL_RATIO: f64 = 0.9;
/// Bytes of each record's value: "1 KiB records".
const RECORD_VALUE_BYTES: usize = 1024;

const USAGE: &str = "\
log_throughput: weir Log append/read throughput vs raw glommio direct I/O, interleaved

usage: cargo bench -p weir-storage --bench log_throughput -- [options]

  --quick               short run: 3 rounds, 256 MiB per append run, 512 MiB read dataset
  --dataset-gib N       size of the cold-read dataset log (default 4, --quick 0.5)
  --write-mib N         bytes written per append/raw-write run (default 1024, --quick 256)
  --rounds N            interleaved rounds (default 5, --quick 3)
  --inflight-mib N      appended bytes kept in flight by the appending tasks (default 16)
  --read-batch-kib N    batch size of the cold-read dataset (default 16)
  --dir PATH            where the files go (default <target>/bench-storage); must be a real
                        filesystem (ext4), not tmpfs
  --json PATH           where the JSON goes (default <target>/bench-storage.json)
  --writes-in-flight N  weir's LogConfig::writes_in_flight and the raw write queue depth
                        (default: LogConfig's, 8)
  --preallocate-mib N   weir's LogConfig::preallocate_bytes (default: LogConfig's, 8)
  --raw-write-qd N      experiment: raw write queue depth other than --writes-in-flight
  --raw-prealloc-step-mib N
                        experiment: fallocate the raw file N MiB ahead as it is written
                        (as weir does) instead of whole up front
  --keep                keep the dataset and files afterwards
  --only A,B            run only these workloads (append_16k, append_1m, append_16k_flush,
                        append_1m_flush, cold_read), e.g. to profile one
  --help                this text
";

#[derive(Debug, Clone)]
struct Opts {
    mode: &'static str,
    rounds: usize,
    write_bytes: u64,
    dataset_bytes: u64,
    inflight_bytes: u64,
    read_batch_bytes: usize,
    flush_every_bytes: u64,
    dir: PathBuf,
    json: PathBuf,
    keep: bool,
    /// `LogConfig::writes_in_flight` for weir, and the raw write queue depth.
    writes_in_flight: usize,
    /// `LogConfig::preallocate_bytes` for weir (the raw file is always fallocated whole).
    preallocate_bytes: u64,
    /// Raw write queue depth if not `writes_in_flight` (an experiment).
    raw_write_qd: Option<usize>,
    /// Experiment: fallocate the raw file in steps as it is written, like weir does.
    raw_prealloc_step: Option<u64>,
    /// Only these workloads (for profiling one of them); empty = all.
    only: Vec<String>,
}

impl Opts {
    fn wants(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| o == name)
    }
}

fn target_dir() -> PathBuf {
    // CARGO_TARGET_TMPDIR is `<target>/tmp` for benches and integration tests.
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().map_or(tmp.clone(), Path::to_path_buf)
}

fn parse_args() -> Opts {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let bench = args.iter().any(|a| a == "--bench");
    let quick = args.iter().any(|a| a == "--quick");
    let target = target_dir();
    let mut o = if !bench && !quick {
        // `cargo test --benches` (or running the binary bare): a smoke run only.
        Opts {
            mode: "smoke",
            rounds: 1,
            write_bytes: 16 * MIB,
            dataset_bytes: 32 * MIB,
            inflight_bytes: 16 * MIB,
            read_batch_bytes: 16 << 10,
            flush_every_bytes: MIB,
            dir: target.join("bench-storage-smoke"),
            json: target.join("bench-storage-smoke.json"),
            keep: false,
            writes_in_flight: LogConfig::default().writes_in_flight,
            preallocate_bytes: LogConfig::default().preallocate_bytes,
            raw_prealloc_step: None,
            raw_write_qd: None,
            only: Vec::new(),
        }
    } else if quick {
        Opts {
            mode: "quick",
            rounds: 3,
            write_bytes: 256 * MIB,
            dataset_bytes: 512 * MIB,
            inflight_bytes: 16 * MIB,
            read_batch_bytes: 16 << 10,
            flush_every_bytes: MIB,
            dir: target.join("bench-storage"),
            json: target.join("bench-storage.json"),
            keep: false,
            writes_in_flight: LogConfig::default().writes_in_flight,
            preallocate_bytes: LogConfig::default().preallocate_bytes,
            raw_prealloc_step: None,
            raw_write_qd: None,
            only: Vec::new(),
        }
    } else {
        Opts {
            mode: "full",
            rounds: 5,
            write_bytes: GIB,
            dataset_bytes: 4 * GIB,
            inflight_bytes: 16 * MIB,
            read_batch_bytes: 16 << 10,
            flush_every_bytes: MIB,
            dir: target.join("bench-storage"),
            json: target.join("bench-storage.json"),
            keep: false,
            writes_in_flight: LogConfig::default().writes_in_flight,
            preallocate_bytes: LogConfig::default().preallocate_bytes,
            raw_prealloc_step: None,
            raw_write_qd: None,
            only: Vec::new(),
        }
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> String {
            it.next()
                .cloned()
                .unwrap_or_else(|| die(&format!("{name} needs a value")))
        };
        let num = |name: &str, v: String| -> f64 {
            v.parse::<f64>()
                .ok()
                .filter(|x| *x > 0.0)
                .unwrap_or_else(|| die(&format!("{name}: not a positive number: {v}")))
        };
        match a.as_str() {
            "--bench" | "--quick" => {}
            "--help" | "-h" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            "--keep" => o.keep = true,
            "--raw-write-qd" => o.raw_write_qd = Some(num(a, value(a)) as usize),
            "--raw-prealloc-step-mib" => {
                o.raw_prealloc_step = Some((num(a, value(a)) * MIB as f64) as u64);
            }
            "--writes-in-flight" => o.writes_in_flight = num(a, value(a)) as usize,
            "--preallocate-mib" => o.preallocate_bytes = (num(a, value(a)) * MIB as f64) as u64,
            "--only" => {
                o.only = value(a).split(',').map(str::to_owned).collect();
            }
            "--dataset-gib" => {
                o.dataset_bytes = (num(a, value(a)) * GIB as f64) as u64;
            }
            "--write-mib" => o.write_bytes = (num(a, value(a)) * MIB as f64) as u64,
            "--rounds" => o.rounds = num(a, value(a)) as usize,
            "--inflight-mib" => o.inflight_bytes = (num(a, value(a)) * MIB as f64) as u64,
            "--read-batch-kib" => o.read_batch_bytes = (num(a, value(a)) * 1024.0) as usize,
            "--dir" => o.dir = PathBuf::from(value(a)),
            "--json" => o.json = PathBuf::from(value(a)),
            // cargo and libtest pass flags a custom harness may ignore.
            other if other.starts_with("--") => {
                eprintln!("log_throughput: ignoring unknown flag {other}")
            }
            _ => {} // a test-name filter from `cargo bench NAME`
        }
    }
    o.rounds = o.rounds.max(1);
    o.write_bytes = o.write_bytes.max(IO_BYTES) / IO_BYTES * IO_BYTES;
    o.dataset_bytes = o.dataset_bytes.max(IO_BYTES);
    o.read_batch_bytes = o.read_batch_bytes.max(RECORD_VALUE_BYTES);
    o
}

fn die(msg: &str) -> ! {
    eprintln!("log_throughput: {msg}\n\n{USAGE}");
    std::process::exit(2);
}

// ---------------------------------------------------------------------------------------
// Figures

/// One measured figure over the rounds.
#[derive(Debug, Clone, Default)]
struct Series {
    values: Vec<f64>,
}

impl Series {
    fn push(&mut self, v: f64) {
        self.values.push(v);
    }
    fn sorted(&self) -> Vec<f64> {
        let mut v = self.values.clone();
        v.sort_by(f64::total_cmp);
        v
    }
    fn median(&self) -> f64 {
        let v = self.sorted();
        match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }
    fn min(&self) -> f64 {
        self.sorted().first().copied().unwrap_or(f64::NAN)
    }
    fn max(&self) -> f64 {
        self.sorted().last().copied().unwrap_or(f64::NAN)
    }
    fn show(&self, digits: usize) -> String {
        format!(
            "{:.d$} [{:.d$}-{:.d$}]",
            self.median(),
            self.min(),
            self.max(),
            d = digits
        )
    }
    fn json(&self) -> String {
        let vals: Vec<String> = self.values.iter().map(|v| format!("{v:.4}")).collect();
        format!(
            "{{\"median\": {:.4}, \"min\": {:.4}, \"max\": {:.4}, \"values\": [{}]}}",
            self.median(),
            self.min(),
            self.max(),
            vals.join(", ")
        )
    }
}

/// The figures of one weir workload and its paired raw reference.
#[derive(Debug, Clone, Default)]
struct Pair {
    raw_gbps: Series,
    weir_gbps: Series,
    /// weir / raw of each round's pair.
    ratio: Series,
    /// CPU seconds (whole process, user + system) per GB moved by weir.
    weir_cpu_s_per_gb: Series,
    raw_cpu_s_per_gb: Series,
    flush_calls_per_s: Series,
    fdatasyncs_per_s: Series,
    /// fdatasyncs / flush calls (group commit: at most 1).
    syncs_per_flush: Series,
    /// Fraction of the wall time the executor thread was on a CPU during weir's run.
    weir_busy: Series,
    /// Bytes weir wrote (appends) or read (cold read) on the device per byte of data.
    weir_io_amplification: Series,
    /// Average size of weir's direct writes (appends) or reads (cold read), KiB.
    weir_io_kib: Series,
}

/// Result of one timed run.
#[derive(Debug, Clone, Copy, Default)]
struct Run {
    bytes: u64,
    secs: f64,
    cpu_secs: f64,
    /// CPU time of the executor thread alone.
    thread_cpu_secs: f64,
    flush_calls: u64,
    fdatasyncs: u64,
    /// Direct writes / reads issued through glommio during the run, and their bytes.
    io_writes: u64,
    io_bytes_written: u64,
    io_reads: u64,
    io_bytes_read: u64,
}

impl Run {
    fn gbps(&self) -> f64 {
        self.bytes as f64 / self.secs / 1e9
    }
    fn cpu_per_gb(&self) -> f64 {
        self.cpu_secs / (self.bytes as f64 / 1e9)
    }
}

/// CPU time (user + system) so far of the whole process, or of the calling thread.
fn cpu_secs(clock: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; the clock ids are valid.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn process_cpu_secs() -> f64 {
    cpu_secs(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPU time of the executor thread (the benchmark runs everything on it).
fn thread_cpu_secs() -> f64 {
    cpu_secs(libc::CLOCK_THREAD_CPUTIME_ID)
}

struct Timer {
    wall: Instant,
    cpu: f64,
    thread_cpu: f64,
    io: glommio::RingIoStats,
}

fn io_stats() -> glommio::RingIoStats {
    glommio::executor().io_stats().all_rings()
}

impl Timer {
    fn start() -> Timer {
        Timer {
            wall: Instant::now(),
            cpu: process_cpu_secs(),
            thread_cpu: thread_cpu_secs(),
            io: io_stats(),
        }
    }
    fn stop(&self, bytes: u64) -> Run {
        let secs = self.wall.elapsed().as_secs_f64();
        let cpu_secs = process_cpu_secs() - self.cpu;
        let thread_cpu_secs = thread_cpu_secs() - self.thread_cpu;
        let io = io_stats();
        let (w0, wb0) = self.io.file_writes();
        let (w1, wb1) = io.file_writes();
        let (r0, rb0) = self.io.file_reads();
        let (r1, rb1) = io.file_reads();
        Run {
            bytes,
            secs,
            cpu_secs,
            thread_cpu_secs,
            io_writes: w1 - w0,
            io_bytes_written: wb1 - wb0,
            io_reads: r1 - r0,
            io_bytes_read: rb1 - rb0,
            ..Run::default()
        }
    }
}

// ---------------------------------------------------------------------------------------
// Raw references: glommio DMA files, no weir code.

async fn dma_open(path: &Path, create: bool) -> Rc<DmaFile> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .dma_open(path)
        .await
        .unwrap_or_else(|e| panic!("dma open {}: {e}", path.display()));
    Rc::new(f)
}

async fn dma_close(f: Rc<DmaFile>) {
    if let Ok(f) = Rc::try_unwrap(f) {
        let _ = f.close().await;
    }
}

/// Sequential 1 MiB direct writes into a fresh file, `qd` in flight. The file is fallocated
/// whole first; or, with `step`, fallocated `step` bytes ahead of the writes as they go (the
/// way weir's appender does it with `preallocate_bytes`): an experiment that shows what the
/// inline fallocates cost (`--raw-prealloc-step-mib`).
async fn raw_write(dir: &Path, bytes: u64, qd: usize, step: Option<u64>) -> Run {
    let path = dir.join("raw-write.dat");
    let _ = std::fs::remove_file(&path);
    let f = dma_open(&path, true).await;
    let first = step.map_or(bytes, |s| s.min(bytes));
    f.pre_allocate(first, false).await.expect("fallocate");
    let allocated = Rc::new(Cell::new(first));
    let lock = Rc::new(glommio::sync::Semaphore::new(1));
    let next = Rc::new(Cell::new(0u64));
    let t = Timer::start();
    let tasks: Vec<_> = (0..qd.max(1))
        .map(|_| {
            let f = f.clone();
            let next = next.clone();
            let allocated = allocated.clone();
            let lock = lock.clone();
            glommio::spawn_local(async move {
                loop {
                    let permit = lock.acquire_permit(1).await.expect("lock");
                    let pos = next.get();
                    if pos >= bytes {
                        break;
                    }
                    next.set(pos + IO_BYTES);
                    if let Some(step) = step {
                        if pos + IO_BYTES > allocated.get() {
                            let to = (pos + IO_BYTES + step).min(bytes);
                            f.pre_allocate(to, false).await.expect("fallocate");
                            allocated.set(to);
                        }
                    }
                    drop(permit);
                    let buf = f.alloc_dma_buffer(IO_BYTES as usize);
                    let n = f.write_at(buf, pos).await.expect("raw write");
                    assert_eq!(n as u64, IO_BYTES, "short raw write at {pos}");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await;
    }
    let run = t.stop(bytes);
    dma_close(f).await;
    std::fs::remove_file(&path).expect("remove raw file");
    run
}

/// Sequential 1 MiB direct reads of `files` (one after the other), `qd` in flight.
async fn raw_read(files: &[PathBuf], qd: usize) -> Run {
    let t = Timer::start();
    let mut total = 0u64;
    for path in files {
        let f = dma_open(path, false).await;
        let size = f.file_size().await.expect("stat");
        let next = Rc::new(Cell::new(0u64));
        let got = Rc::new(Cell::new(0u64));
        let tasks: Vec<_> = (0..qd.max(1))
            .map(|_| {
                let f = f.clone();
                let next = next.clone();
                let got = got.clone();
                glommio::spawn_local(async move {
                    loop {
                        let pos = next.get();
                        if pos >= size {
                            break;
                        }
                        next.set(pos + IO_BYTES);
                        let want = (size - pos).min(IO_BYTES) as usize;
                        let r = f.read_at(pos, want).await.expect("raw read");
                        got.set(got.get() + r.len().min(want) as u64);
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await;
        }
        assert_eq!(
            got.get(),
            size,
            "raw read of {} came up short",
            path.display()
        );
        total += size;
        dma_close(f).await;
    }
    t.stop(total)
}

// ---------------------------------------------------------------------------------------
// weir

/// One uncompressed batch of 1 KiB records, about `batch_bytes` long.
fn make_batch(batch_bytes: usize) -> Bytes {
    let records = (batch_bytes / RECORD_VALUE_BYTES).max(1);
    let value: Vec<u8> = (0..RECORD_VALUE_BYTES).map(|i| (i % 251) as u8).collect();
    let mut b = RecordBatchBuilder::new(1_700_000_000_000);
    for i in 0..records {
        let key = format!("key-{i:06}");
        b = b.record(Some(key.as_bytes()), Some(&value), &[]);
    }
    b.build()
}

/// Appends clones of `batch` until `total_bytes` are appended, from enough tasks to keep
/// `inflight_bytes` of appends outstanding; with `flush_every`, the task whose append
/// completes a multiple of that many bytes calls `flush`.
async fn append_run(
    log: &Rc<Log>,
    batch: &Bytes,
    total_bytes: u64,
    inflight_bytes: u64,
    flush_every: Option<u64>,
) -> Run {
    let len = batch.len() as u64;
    let count = total_bytes.div_ceil(len);
    let tasks_n = (inflight_bytes / len).clamp(2, 4096) as usize;
    let claimed = Rc::new(Cell::new(0u64));
    let done = Rc::new(Cell::new(0u64));
    let flush_calls = Rc::new(Cell::new(0u64));
    let flushed_values = Rc::new(RefCell::new(BTreeSet::new()));
    let t = Timer::start();
    let tasks: Vec<_> = (0..tasks_n)
        .map(|_| {
            let log = log.clone();
            let batch = batch.clone();
            let claimed = claimed.clone();
            let done = done.clone();
            let flush_calls = flush_calls.clone();
            let flushed_values = flushed_values.clone();
            glommio::spawn_local(async move {
                loop {
                    let n = claimed.get();
                    if n >= count {
                        break;
                    }
                    claimed.set(n + 1);
                    log.append(batch.clone()).await.expect("append");
                    let before = done.get();
                    let after = before + len;
                    done.set(after);
                    if let Some(every) = flush_every {
                        // One flush call per `every` bytes appended.
                        for _ in before / every..after / every {
                            let v = log.flush().await.expect("flush");
                            flush_calls.set(flush_calls.get() + 1);
                            flushed_values.borrow_mut().insert(v);
                        }
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await;
    }
    let mut run = t.stop(count * len);
    run.flush_calls = flush_calls.get();
    run.fdatasyncs = flushed_values.borrow().len() as u64;
    run
}

async fn weir_append(
    dir: &Path,
    cfg: &LogConfig,
    batch: &Bytes,
    total_bytes: u64,
    inflight_bytes: u64,
    flush_every: Option<u64>,
) -> Run {
    let log_dir = dir.join("append-log");
    if log_dir.exists() {
        std::fs::remove_dir_all(&log_dir).expect("remove old log");
    }
    let log = Rc::new(Log::open(&log_dir, cfg.clone()).await.expect("open log"));
    let run = append_run(&log, batch, total_bytes, inflight_bytes, flush_every).await;
    let log = Rc::try_unwrap(log).unwrap_or_else(|_| panic!("appending tasks still hold the log"));
    log.delete().await.expect("delete log");
    run
}

/// Writes the cold-read dataset: `bytes` of `batch_bytes` batches, then a clean close.
async fn build_dataset(log_dir: &Path, bytes: u64, batch_bytes: usize, inflight: u64) -> u64 {
    if log_dir.exists() {
        std::fs::remove_dir_all(log_dir).expect("remove old dataset");
    }
    let log = Rc::new(
        Log::open(log_dir, LogConfig::default())
            .await
            .expect("open dataset log"),
    );
    let batch = make_batch(batch_bytes);
    append_run(&log, &batch, bytes, inflight, None).await;
    let log = Rc::try_unwrap(log).unwrap_or_else(|_| panic!("appending tasks still hold the log"));
    let end = log.watermarks().log_end_offset;
    log.close().await.expect("close dataset log");
    end
}

fn segment_files(log_dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(log_dir)
        .expect("list dataset")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    v.sort();
    v
}

/// Reopens the dataset log with a 1 MiB batch cache and reads it from offset 0 to the end
/// with `read(offset, 1 MiB)`.
async fn weir_cold_read(log_dir: &Path, expect_end: u64) -> Run {
    let log = Log::open_with_cache(log_dir, LogConfig::default(), BatchCache::new(1 << 20))
        .await
        .expect("reopen dataset log");
    let end = log.watermarks().high_watermark;
    assert_eq!(end, expect_end, "dataset log lost data");
    let t = Timer::start();
    let mut offset = 0u64;
    let mut bytes = 0u64;
    while offset < end {
        let r = log.read(offset, IO_BYTES as usize).await.expect("read");
        let mut last = None;
        for (h, b) in r.batches() {
            bytes += b.len() as u64;
            last = Some(h.last_offset());
        }
        let Some(last) = last else {
            panic!("read at {offset} returned nothing below the high watermark {end}");
        };
        offset = last as u64 + 1;
    }
    let run = t.stop(bytes);
    log.close().await.expect("close dataset log");
    run
}

/// The group-commit check on the simulated disk, which counts fdatasyncs exactly.
async fn sim_group_commit(batch: &Bytes, total_bytes: u64, inflight: u64) -> (u64, u64, u64) {
    let disk = SimDisk::new();
    let log = Rc::new(
        Log::open_in(
            disk.vfs(),
            Path::new("/sim/p0"),
            LogConfig::default(),
            BatchCache::new(64 << 20),
        )
        .await
        .expect("open sim log"),
    );
    let before = disk.sync_count();
    let run = append_run(&log, batch, total_bytes, inflight, Some(MIB)).await;
    let exact = disk.sync_count() - before;
    (run.flush_calls, exact, run.fdatasyncs)
}

// ---------------------------------------------------------------------------------------
// The run

struct Report {
    opts: Opts,
    append: Vec<(&'static str, usize, bool, Pair)>,
    read: Pair,
    sim: Vec<(&'static str, u64, u64, u64)>,
    dataset_bytes: u64,
    dataset_segments: usize,
    started: String,
    secs: f64,
}

async fn bench(opts: Opts) -> Report {
    let started = Instant::now();
    std::fs::create_dir_all(&opts.dir).expect("create bench dir");
    // The raw references open DMA files with glommio directly, which the engine's own
    // priming (done before its opens) does not cover: prime by hand before any of them.
    weir_storage::io::prime_dma_probe(&opts.dir)
        .await
        .expect("prime dma probe");
    let qd = opts.raw_write_qd.unwrap_or(opts.writes_in_flight);
    let cfg = LogConfig {
        writes_in_flight: opts.writes_in_flight,
        preallocate_bytes: opts.preallocate_bytes,
        ..LogConfig::default()
    };

    let workloads: [(&'static str, usize, bool); 4] = [
        ("append_16k", 16 << 10, false),
        ("append_1m", 1 << 20, false),
        ("append_16k_flush", 16 << 10, true),
        ("append_1m_flush", 1 << 20, true),
    ];
    let batches: Vec<Bytes> = workloads.iter().map(|w| make_batch(w.1)).collect();
    eprintln!(
        "log_throughput ({}): {} rounds, {} MiB per append run, {:.2} GiB dataset, dir {}",
        opts.mode,
        opts.rounds,
        opts.write_bytes / MIB,
        opts.dataset_bytes as f64 / GIB as f64,
        opts.dir.display()
    );
    for (w, b) in workloads.iter().zip(&batches) {
        eprintln!(
            "  {}: batches of {} bytes ({} records of 1 KiB values)",
            w.0,
            b.len(),
            (w.1 / RECORD_VALUE_BYTES).max(1)
        );
    }

    // Group commit, counted exactly on the simulated disk.
    let mut sim = Vec::new();
    for (w, b) in workloads
        .iter()
        .zip(&batches)
        .filter(|(w, _)| w.2 && opts.wants(w.0))
    {
        let bytes = opts.write_bytes.min(64 * MIB);
        let (calls, exact, estimated) = sim_group_commit(b, bytes, opts.inflight_bytes).await;
        eprintln!(
            "  sim {}: {calls} flush calls, {exact} fdatasyncs (estimate from flush results: {estimated})",
            w.0
        );
        sim.push((w.0, calls, exact, estimated));
    }

    let dataset_dir = opts.dir.join("dataset-log");
    eprintln!("building the cold-read dataset ...");
    let t = Instant::now();
    let dataset_size = if opts.wants("cold_read") {
        opts.dataset_bytes
    } else {
        IO_BYTES
    };
    let dataset_end = build_dataset(
        &dataset_dir,
        dataset_size,
        opts.read_batch_bytes,
        opts.inflight_bytes,
    )
    .await;
    let files = segment_files(&dataset_dir);
    let dataset_bytes: u64 = files
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum();
    eprintln!(
        "  {} offsets, {} segments, {:.2} GiB in {:.1} s",
        dataset_end,
        files.len(),
        dataset_bytes as f64 / GIB as f64,
        t.elapsed().as_secs_f64()
    );

    let mut append: Vec<(&'static str, usize, bool, Pair)> = workloads
        .iter()
        .map(|w| (w.0, w.1, w.2, Pair::default()))
        .collect();
    let mut read = Pair::default();
    for round in 0..opts.rounds {
        let raw_first = round % 2 == 0;
        for ((name, _, flush, pair), batch) in append.iter_mut().zip(&batches) {
            if !opts.wants(name) {
                continue;
            }
            let every = flush.then_some(opts.flush_every_bytes);
            let (raw, weir) = if raw_first {
                let raw = raw_write(&opts.dir, opts.write_bytes, qd, opts.raw_prealloc_step).await;
                let weir = weir_append(
                    &opts.dir,
                    &cfg,
                    batch,
                    opts.write_bytes,
                    opts.inflight_bytes,
                    every,
                )
                .await;
                (raw, weir)
            } else {
                let weir = weir_append(
                    &opts.dir,
                    &cfg,
                    batch,
                    opts.write_bytes,
                    opts.inflight_bytes,
                    every,
                )
                .await;
                let raw = raw_write(&opts.dir, opts.write_bytes, qd, opts.raw_prealloc_step).await;
                (raw, weir)
            };
            record(pair, &raw, &weir);
            let extra = if *flush {
                format!(
                    ", {} flush calls, {} fdatasyncs",
                    weir.flush_calls, weir.fdatasyncs
                )
            } else {
                String::new()
            };
            eprintln!(
                "  round {}: raw_write {:.2} GB/s, {name} {:.2} GB/s{extra}",
                round + 1,
                raw.gbps(),
                weir.gbps()
            );
        }
        if !opts.wants("cold_read") {
            continue;
        }
        let (raw, weir) = if raw_first {
            let raw = raw_read(&files, RAW_READ_QD).await;
            (raw, weir_cold_read(&dataset_dir, dataset_end).await)
        } else {
            let weir = weir_cold_read(&dataset_dir, dataset_end).await;
            (raw_read(&files, RAW_READ_QD).await, weir)
        };
        assert_eq!(
            weir.bytes, raw.bytes,
            "weir read back a different number of bytes than the segment files hold"
        );
        record(&mut read, &raw, &weir);
        eprintln!(
            "  round {}: raw_read {:.2} GB/s, cold_read {:.2} GB/s",
            round + 1,
            raw.gbps(),
            weir.gbps()
        );
    }
    if !opts.keep {
        let _ = std::fs::remove_dir_all(&dataset_dir);
    }
    Report {
        dataset_bytes,
        dataset_segments: files.len(),
        opts,
        append,
        read,
        sim,
        started: utc_now(),
        secs: started.elapsed().as_secs_f64(),
    }
}

fn record(pair: &mut Pair, raw: &Run, weir: &Run) {
    let (ops, io_bytes) = if weir.io_writes > 0 {
        (weir.io_writes, weir.io_bytes_written)
    } else {
        (weir.io_reads, weir.io_bytes_read)
    };
    pair.weir_io_amplification
        .push(io_bytes as f64 / weir.bytes as f64);
    pair.weir_io_kib
        .push(io_bytes as f64 / ops.max(1) as f64 / 1024.0);
    pair.weir_busy.push(weir.thread_cpu_secs / weir.secs);
    pair.raw_gbps.push(raw.gbps());
    pair.weir_gbps.push(weir.gbps());
    pair.ratio.push(weir.gbps() / raw.gbps());
    pair.raw_cpu_s_per_gb.push(raw.cpu_per_gb());
    pair.weir_cpu_s_per_gb.push(weir.cpu_per_gb());
    if weir.flush_calls > 0 {
        pair.flush_calls_per_s
            .push(weir.flush_calls as f64 / weir.secs);
        pair.fdatasyncs_per_s
            .push(weir.fdatasyncs as f64 / weir.secs);
        pair.syncs_per_flush
            .push(weir.fdatasyncs as f64 / weir.flush_calls as f64);
    }
}

fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    // Civil date from days since the epoch (Howard Hinnant's algorithm).
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

fn verdict(ratio: f64) -> &'static str {
    if ratio >= GOAL_RATIO {
        "met"
    } else {
        "MISSED"
    }
}

fn print_report(r: &Report) {
    let o = &r.opts;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nweir storage benchmark ({} run, {} rounds interleaved, finished {}, {:.0} s)",
        o.mode, o.rounds, r.started, r.secs
    );
    let _ = writeln!(
        s,
        "GB/s = 1e9 bytes/s; median [min-max] over rounds; ratio = weir/raw of each round's pair, median [min-max]"
    );
    let _ = writeln!(
        s,
        "append runs: {} MiB each; raw write: 1 MiB direct writes, {} in flight, fallocated file",
        o.write_bytes / MIB,
        o.raw_write_qd.unwrap_or(o.writes_in_flight)
    );
    let _ = writeln!(
        s,
        "weir: LogConfig::default() but writes_in_flight {}, preallocate_bytes {} MiB; appends from tasks keeping {} MiB outstanding",
        o.writes_in_flight,
        o.preallocate_bytes / MIB,
        o.inflight_bytes / MIB
    );
    let _ = writeln!(
        s,
        "cold read: {:.2} GiB log of {} KiB batches in {} segments, read(offset, 1 MiB); raw read: 1 MiB direct reads, {} in flight, of the same files\n",
        r.dataset_bytes as f64 / GIB as f64,
        o.read_batch_bytes / 1024,
        r.dataset_segments,
        RAW_READ_QD
    );
    let _ = writeln!(
        s,
        "{:<18} {:>18} {:>18} {:>18} {:>14} {:>8} {:>8} {:>8} {:>8} {:>6}",
        "workload",
        "raw GB/s",
        "weir GB/s",
        "weir/raw",
        "goal",
        "cpu s/GB",
        "raw cpu",
        "io/data",
        "io KiB",
        "busy"
    );
    let mut row = |name: &str, p: &Pair| {
        if p.ratio.values.is_empty() {
            return;
        }
        let ratio = p.ratio.median();
        let _ = writeln!(
            s,
            "{:<18} {:>18} {:>18} {:>18} {:>14} {:>8.2} {:>8.2} {:>8.3} {:>8.0} {:>5.0}%",
            name,
            p.raw_gbps.show(2),
            p.weir_gbps.show(2),
            p.ratio.show(2),
            format!(">= {GOAL_RATIO:.1} {}", verdict(ratio)),
            p.weir_cpu_s_per_gb.median(),
            p.raw_cpu_s_per_gb.median(),
            p.weir_io_amplification.median(),
            p.weir_io_kib.median(),
            p.weir_busy.median() * 100.0
        );
    };
    for (name, _, _, p) in &r.append {
        row(name, p);
    }
    row("cold_read", &r.read);
    let _ = writeln!(
        s,
        "cpu s/GB: CPU seconds (whole process, user+sys) per GB, weir and raw; io/data: bytes weir\n\
         wrote (appends) or read (cold read) per byte of data; io KiB: average size of those I/Os;\n\
         busy: share of weir's run time the executor thread (one core) spent on a CPU"
    );
    let _ = writeln!(
        s,
        "\nflush every 1 MiB (group commit: fdatasyncs <= flush calls):"
    );
    for (name, _, flush, p) in &r.append {
        if *flush && !p.flush_calls_per_s.values.is_empty() {
            let _ = writeln!(
                s,
                "  {:<20} flush calls/s {}   fdatasyncs/s {}   fdatasyncs per flush call {} ({})",
                name,
                p.flush_calls_per_s.show(0),
                p.fdatasyncs_per_s.show(0),
                p.syncs_per_flush.show(3),
                if p.syncs_per_flush.max() <= 1.0 {
                    "met"
                } else {
                    "MISSED"
                }
            );
        }
    }
    for (name, calls, exact, est) in &r.sim {
        let _ = writeln!(
            s,
            "  {name:<20} simulated disk: {calls} flush calls -> {exact} fdatasyncs counted by the disk ({est} from flush results)"
        );
    }
    print!("{s}");
}

fn write_json(r: &Report) {
    let o = &r.opts;
    let mut s = String::new();
    let _ = writeln!(s, "{{");
    let _ = writeln!(s, "  \"benchmark\": \"weir-storage/log_throughput\",");
    let _ = writeln!(s, "  \"finished_utc\": \"{}\",", r.started);
    let _ = writeln!(s, "  \"mode\": \"{}\",", o.mode);
    let _ = writeln!(s, "  \"rounds\": {},", o.rounds);
    let _ = writeln!(s, "  \"seconds\": {:.1},", r.secs);
    let _ = writeln!(s, "  \"append_run_bytes\": {},", o.write_bytes);
    let _ = writeln!(s, "  \"dataset_bytes\": {},", r.dataset_bytes);
    let _ = writeln!(s, "  \"dataset_batch_bytes\": {},", o.read_batch_bytes);
    let _ = writeln!(s, "  \"inflight_bytes\": {},", o.inflight_bytes);
    let _ = writeln!(s, "  \"weir_writes_in_flight\": {},", o.writes_in_flight);
    let _ = writeln!(s, "  \"weir_preallocate_bytes\": {},", o.preallocate_bytes);
    let _ = writeln!(
        s,
        "  \"raw_write_queue_depth\": {},",
        o.raw_write_qd.unwrap_or(o.writes_in_flight)
    );
    let _ = writeln!(s, "  \"raw_read_queue_depth\": {RAW_READ_QD},");
    let _ = writeln!(s, "  \"goal_ratio\": {GOAL_RATIO},");
    let _ = writeln!(s, "  \"workloads\": {{");
    let mut entries = Vec::new();
    let pair_json = |name: &str, batch_bytes: usize, flush: bool, p: &Pair| {
        let mut e = String::new();
        let _ = write!(
            e,
            "    \"{name}\": {{\n      \"batch_bytes\": {batch_bytes},\n      \"flush_every_bytes\": {},\n      \"raw_gbps\": {},\n      \"weir_gbps\": {},\n      \"ratio\": {},\n      \"goal_met\": {},\n      \"raw_cpu_s_per_gb\": {},\n      \"weir_cpu_s_per_gb\": {},\n      \"weir_io_bytes_per_data_byte\": {},\n      \"weir_io_avg_kib\": {},\n      \"weir_executor_busy\": {}",
            if flush { o.flush_every_bytes } else { 0 },
            p.raw_gbps.json(),
            p.weir_gbps.json(),
            p.ratio.json(),
            p.ratio.median() >= GOAL_RATIO,
            p.raw_cpu_s_per_gb.json(),
            p.weir_cpu_s_per_gb.json(),
            p.weir_io_amplification.json(),
            p.weir_io_kib.json(),
            p.weir_busy.json()
        );
        if flush {
            let _ = write!(
                e,
                ",\n      \"flush_calls_per_s\": {},\n      \"fdatasyncs_per_s\": {},\n      \"fdatasyncs_per_flush_call\": {},\n      \"group_commit_met\": {}",
                p.flush_calls_per_s.json(),
                p.fdatasyncs_per_s.json(),
                p.syncs_per_flush.json(),
                p.syncs_per_flush.max() <= 1.0
            );
        }
        e.push_str("\n    }");
        e
    };
    for (name, batch, flush, p) in &r.append {
        entries.push(pair_json(name, *batch, *flush, p));
    }
    entries.push(pair_json("cold_read", o.read_batch_bytes, false, &r.read));
    let _ = writeln!(s, "{}", entries.join(",\n"));
    let _ = writeln!(s, "  }},");
    let sims: Vec<String> = r
        .sim
        .iter()
        .map(|(n, c, e, est)| {
            format!("    \"{n}\": {{\"flush_calls\": {c}, \"fdatasyncs\": {e}, \"fdatasyncs_estimated\": {est}}}")
        })
        .collect();
    let _ = writeln!(
        s,
        "  \"simulated_disk_group_commit\": {{\n{}\n  }}",
        sims.join(",\n")
    );
    let _ = writeln!(s, "}}");
    if let Some(parent) = o.json.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    match std::fs::write(&o.json, s) {
        Ok(()) => eprintln!("wrote {}", o.json.display()),
        Err(e) => eprintln!("could not write {}: {e}", o.json.display()),
    }
}

fn main() {
    let opts = parse_args();
    let dir = opts.dir.clone();
    let keep = opts.keep;
    let report = glommio::LocalExecutorBuilder::default()
        .name("log_throughput")
        .spawn(move || bench(opts))
        .expect("spawn executor")
        .join()
        .expect("benchmark executor");
    print_report(&report);
    write_json(&report);
    if !keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
