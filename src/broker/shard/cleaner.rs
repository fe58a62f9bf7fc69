//! The log cleaner of one core (`cleanup.policy=compact`): every `log.cleaner.backoff.ms` it
//! asks each of the core's compacted logs how dirty it is (`Log::dirty_info`) and cleans the
//! dirtiest one that is due (`Log::clean`; compressed batches are compacted too, through the
//! engine's bounded codecs). It runs in its own task queue with a small share of the core, so
//! produce and fetch on the same core keep their latency while a cleaning runs.

use std::rc::Rc;
use std::time::Duration;

use glommio::{Latency, Shares};
use tracing::{info, warn};
use weir_storage::log::CleanOptions;

use super::Shard;

impl Shard {
    /// The core's cleaner loop (see the module docs); returns at shutdown.
    pub async fn run_cleaner(self: Rc<Self>) {
        if !self.config.cleaner_enable {
            return;
        }
        let every = Duration::from_millis(self.config.cleaner_backoff_ms);
        loop {
            futures_lite::future::or(glommio::timer::sleep(every), self.shutdown.wait()).await;
            if self.shutdown.is_fired() {
                return;
            }
            let now_ms = super::lifecycle::wall_clock_ms();
            let dirtiest = self
                .partitions
                .borrow()
                .iter()
                // A replicated partition is compacted like any other, each replica on its own
                // (docs/replication.md, "Compacting replicated partitions"), but the internal
                // topics' partitions are compacted by their stores (`Backing::rewrite`).
                .filter(|(k, _)| {
                    k.0 != crate::broker::group::offsets::OFFSETS_TOPIC
                        && k.0 != crate::broker::txn::TXN_TOPIC
                })
                .map(|(k, p)| (k.clone(), p.clone(), p.log.dirty_info(now_ms)))
                .filter(|(_, _, d)| d.due)
                .max_by(|a, b| a.2.ratio.total_cmp(&b.2.ratio));
            let Some(((topic, p), part, dirty)) = dirtiest else {
                continue;
            };
            let options = CleanOptions {
                io_bytes_per_second: self.config.cleaner_io_max_bytes_per_second,
            };
            match part.log.clean(now_ms, &options).await {
                Ok(s) => info!(
                    topic = %topic,
                    partition = p,
                    dirty_ratio = dirty.ratio,
                    segments = s.segments_before,
                    into = s.segments_after,
                    bytes_before = s.bytes_before,
                    bytes_after = s.bytes_after,
                    records_removed = s.records_removed,
                    tombstones_removed = s.tombstones_removed,
                    "log cleaned"
                ),
                Err(e) => warn!(topic = %topic, partition = p, error = %e, "cleaning failed"),
            }
        }
    }
}

/// Starts the core's cleaner in a task queue of its own with a small share of the core.
pub fn spawn_cleaner(shard: Rc<Shard>) {
    let tq = glommio::executor().create_task_queue(
        Shares::Static(100),
        Latency::NotImportant,
        "log-cleaner",
    );
    match glommio::spawn_local_into(shard.run_cleaner(), tq) {
        Ok(t) => {
            t.detach();
        }
        Err(e) => warn!(error = %e, "could not start the log cleaner"),
    }
}
