//! Pacing a cleaning (`clean.rs`): its reads and writes to the I/O cap
//! (`CleanOptions::io_bytes_per_second`, Kafka's `log.cleaner.io.max.bytes.per.second`), its
//! computing to short slices, so that appends and reads on the same core keep their latency.

/// Longest a cleaning computes before it lets the core's other task queues run. glommio only
/// preempts a task queue when its preempt timer fires (10 ms in the broker), and a cleaning
/// working through batches already read never waits: without this, produce and fetch on the
/// same core would wait for it by up to that long (measured: e2e p99 2 ms -> 13 ms).
const CPU_SLICE: std::time::Duration = std::time::Duration::from_micros(250);

/// Paces a cleaning: its I/O to `CleanOptions::io_bytes_per_second`, its CPU to slices of
/// [`CPU_SLICE`].
pub(super) struct Throttle {
    limit: Option<u64>,
    start: std::time::Instant,
    /// Bytes counted so far.
    pub(super) bytes: u64,
    /// Sleeps taken to keep to the rate.
    pub(super) sleeps: u64,
    slice_start: std::time::Instant,
}

impl Throttle {
    pub(super) fn new(limit: Option<u64>) -> Throttle {
        Throttle {
            limit,
            start: std::time::Instant::now(),
            bytes: 0,
            sleeps: 0,
            slice_start: std::time::Instant::now(),
        }
    }

    /// Counts `n` bytes read or written; yields the task queue at the end of a CPU slice and
    /// sleeps while the cleaning is ahead of its rate.
    pub(super) async fn account(&mut self, n: usize) {
        if self.slice_start.elapsed() >= CPU_SLICE {
            glommio::executor().yield_task_queue_now().await;
            self.slice_start = std::time::Instant::now();
        }
        self.bytes += n as u64;
        let Some(limit) = self.limit.filter(|&l| l > 0) else {
            return;
        };
        let due = std::time::Duration::from_secs_f64(self.bytes as f64 / limit as f64);
        let elapsed = self.start.elapsed();
        if due > elapsed + std::time::Duration::from_millis(1) {
            self.sleeps += 1;
            glommio::timer::sleep(due - elapsed).await;
        }
    }
}
