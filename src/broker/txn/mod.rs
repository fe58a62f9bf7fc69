//! The transaction log: each transactional id's state (`state.rs`), durably stored in one
//! internal log per bucket (`<data>/__transaction_state/<n>`, Kafka's `__transaction_state`
//! partitions) on the core that owns the bucket. The coordinator that drives transactions
//! (it writes markers through the shards) is `shard::txn`.
//!
//! Every change appends one record (the id's whole state) and is flushed before it is
//! acted on. Start-up replays the log; when it has grown well past the live states, the live
//! states are appended again and the log start moves past the old records, as the group
//! offsets do (`group::offsets`).

pub mod state;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use weir_storage::batch::RecordBatchBuilder;
use weir_storage::{BatchCache, Log};

use crate::broker::group::offsets::{internal_log_config, replay_records};

pub use state::{TxnMeta, TxnState};

/// Number of transaction log buckets (Kafka's `transaction.state.log.num.partitions`,
/// fixed here).
pub const BUCKETS: usize = 16;
const COMPACT_MIN_BYTES: u64 = 4 << 20;

/// The bucket of a transactional id: FNV-1a of the id.
pub fn bucket_of(txn_id: &str) -> usize {
    let mut h: u32 = 0x811c_9dc5;
    for b in txn_id.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h as usize % BUCKETS
}

/// The core whose coordinator owns `txn_id`.
pub fn core_of(txn_id: &str, cores: usize) -> usize {
    bucket_of(txn_id) % cores.max(1)
}

/// The transactional ids of one bucket.
pub struct TxnStore {
    log: Log,
    entries: RefCell<BTreeMap<String, TxnMeta>>,
    bytes_since_compaction: Cell<u64>,
    /// One write at a time (a state change, or a compaction's rewrite): a compaction's
    /// snapshot then never lands after a newer record of the same id.
    writing: glommio::sync::Semaphore,
}

fn dir(data_dir: &Path, bucket: usize) -> PathBuf {
    data_dir
        .join("__transaction_state")
        .join(bucket.to_string())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl TxnStore {
    /// Opens (creating) the transaction log of `bucket` and replays it.
    pub async fn open(
        data_dir: &Path,
        bucket: usize,
        cache: Rc<BatchCache>,
    ) -> Result<TxnStore, weir_storage::Error> {
        let log = Log::open_with_cache(dir(data_dir, bucket), internal_log_config(), cache).await?;
        let mut entries = BTreeMap::new();
        let bytes = replay_records(&log, |key, value| {
            let Some(id) = state::decode_key(key) else {
                return;
            };
            match value.and_then(state::decode_value) {
                Some(m) => entries.insert(id, m),
                None => entries.remove(&id),
            };
        })
        .await?;
        tracing::debug!(
            bucket,
            ids = entries.len(),
            bytes,
            "transaction log replayed"
        );
        Ok(TxnStore {
            log,
            entries: RefCell::new(entries),
            bytes_since_compaction: Cell::new(bytes),
            writing: glommio::sync::Semaphore::new(1),
        })
    }

    pub fn get(&self, txn_id: &str) -> Option<TxnMeta> {
        self.entries.borrow().get(txn_id).cloned()
    }

    /// Every id and its state.
    pub fn all(&self) -> Vec<(String, TxnMeta)> {
        self.entries
            .borrow()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Durably stores `txn_id`'s new state (`None`: the id is forgotten); applied in memory
    /// once flushed.
    pub async fn put(&self, txn_id: &str, m: Option<TxnMeta>) -> Result<(), weir_storage::Error> {
        let value = m.as_ref().map(state::encode_value);
        let batch = RecordBatchBuilder::new(now_ms())
            .record(Some(&state::encode_key(txn_id)), value.as_deref(), &[])
            .build();
        let len = batch.len() as u64;
        let _one = self
            .writing
            .acquire_permit(1)
            .await
            .map_err(|_| weir_storage::Error::Closed)?;
        self.log.append(batch).await?;
        self.log.flush().await?;
        match m {
            Some(m) => self.entries.borrow_mut().insert(txn_id.to_owned(), m),
            None => self.entries.borrow_mut().remove(txn_id),
        };
        self.bytes_since_compaction
            .set(self.bytes_since_compaction.get() + len);
        self.maybe_compact().await
    }

    async fn maybe_compact(&self) -> Result<(), weir_storage::Error> {
        let live: Vec<(String, TxnMeta)> = {
            let since = self.bytes_since_compaction.get();
            let e = self.entries.borrow();
            let live_bytes: u64 = e
                .iter()
                .map(|(k, m)| 64 + k.len() as u64 + 24 * m.partitions.len() as u64)
                .sum();
            if since < COMPACT_MIN_BYTES || since < 4 * live_bytes {
                return Ok(());
            }
            e.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let start = self.log.watermarks().log_end_offset;
        let mut written = 0u64;
        {
            for chunk in live.chunks(200) {
                let mut b = RecordBatchBuilder::new(now_ms());
                for (id, m) in chunk {
                    b = b.record(
                        Some(&state::encode_key(id)),
                        Some(&state::encode_value(m)),
                        &[],
                    );
                }
                let batch = b.build();
                written += batch.len() as u64;
                self.log.append(batch).await?;
            }
            self.log.flush().await?;
            self.log.set_log_start_offset(start).await?;
        }
        self.bytes_since_compaction.set(written);
        Ok(())
    }

    pub async fn close(self) -> Result<(), weir_storage::Error> {
        self.log.close().await
    }
}
