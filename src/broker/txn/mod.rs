//! The transaction log: each transactional id's state (`state.rs`), durably stored in one
//! internal log per bucket. On a standalone broker that is `<data>/__transaction_state/<n>`
//! on the core that owns the bucket; in a cluster it is partition `n` of the replicated
//! internal topic `__transaction_state` (Kafka's), reached through a [`BucketReplica`] as the
//! group offsets are (`group::offsets`), and the store is loaded by the core leading that
//! partition, for the Raft term it leads at. The coordinator that drives transactions (it
//! writes markers through the shards) is `shard::txn`.
//!
//! Every change appends one record (the id's whole state) and is durable before it is
//! acted on: flushed to the own log, or committed by a majority of the partition's replicas.
//! Start-up (a new leader) replays the log; when an own log has grown well past the live
//! states, the live states are appended again and the log start moves past the old records,
//! as the group offsets do (a replicated partition is not compacted yet).

pub mod state;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use weir_storage::batch::RecordBatchBuilder;
use weir_storage::{BatchCache, Log};

use crate::broker::group::offsets::{
    internal_log_config, replay_records, Backing, BucketError, BucketReplica, COMPACTION_MIN_BYTES,
};

pub use state::{TxnMeta, TxnState};

/// Number of transaction log buckets (Kafka's `transaction.state.log.num.partitions`,
/// fixed here).
pub const BUCKETS: usize = 16;
/// The internal topic whose partitions are the buckets in a cluster (Kafka's name).
pub const TXN_TOPIC: &str = "__transaction_state";

/// The bucket of a transactional id: FNV-1a of the id.
pub fn bucket_of(txn_id: &str) -> usize {
    let mut h: u32 = 0x811c_9dc5;
    for b in txn_id.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h as usize % BUCKETS
}

/// The core whose coordinator owns `txn_id` on a standalone broker (in a cluster:
/// `Shard::txn_core`).
pub fn core_of(txn_id: &str, cores: usize) -> usize {
    bucket_of(txn_id) % cores.max(1)
}

/// The transactional ids of one bucket.
pub struct TxnStore {
    backing: Backing,
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
        Self::load(Backing::Own(log), bucket).await
    }

    /// The store of `bucket` in a cluster, for the leader of its `__transaction_state`
    /// partition at `term`: the partition replayed up to its committed offset.
    pub async fn open_replicated(
        io: Rc<dyn BucketReplica>,
        bucket: usize,
        term: u64,
    ) -> Result<TxnStore, BucketError> {
        let backing = Backing::replicated(io, bucket, term).await?;
        Ok(Self::load(backing, bucket).await?)
    }

    async fn load(backing: Backing, bucket: usize) -> Result<TxnStore, weir_storage::Error> {
        let mut entries = BTreeMap::new();
        let bytes = replay_records(backing.log(), |key, value| {
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
            term = backing.term(),
            ids = entries.len(),
            bytes,
            "transaction log replayed"
        );
        Ok(TxnStore {
            backing,
            entries: RefCell::new(entries),
            bytes_since_compaction: Cell::new(bytes),
            writing: glommio::sync::Semaphore::new(1),
        })
    }

    /// The Raft term this store was loaded for (`None` for a standalone broker's own log).
    pub fn term(&self) -> Option<u64> {
        self.backing.term()
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
    /// once flushed (own log) or committed (replicated partition, at the store's term only).
    pub async fn put(&self, txn_id: &str, m: Option<TxnMeta>) -> Result<(), BucketError> {
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
        self.backing.append_durably(batch).await?;
        match m {
            Some(m) => self.entries.borrow_mut().insert(txn_id.to_owned(), m),
            None => self.entries.borrow_mut().remove(txn_id),
        };
        self.bytes_since_compaction
            .set(self.bytes_since_compaction.get() + len);
        self.maybe_compact().await
    }

    /// Rewrites the live states and drops what is below them, once the log holds much more
    /// than the live data (`Backing::rewrite`: in a cluster every replica of the bucket's
    /// partition cuts its log where the rewrite starts). The caller holds `writing`.
    async fn maybe_compact(&self) -> Result<(), BucketError> {
        let live: Vec<(String, TxnMeta)> = {
            let since = self.bytes_since_compaction.get();
            let e = self.entries.borrow();
            let live_bytes: u64 = e
                .iter()
                .map(|(k, m)| 64 + k.len() as u64 + 24 * m.partitions.len() as u64)
                .sum();
            if since < self.backing.compaction_min_bytes(COMPACTION_MIN_BYTES)
                || since < 4 * live_bytes
            {
                return Ok(());
            }
            e.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let batches: Vec<bytes::Bytes> = live
            .chunks(200)
            .map(|chunk| {
                let mut b = RecordBatchBuilder::new(now_ms());
                for (id, m) in chunk {
                    b = b.record(
                        Some(&state::encode_key(id)),
                        Some(&state::encode_value(m)),
                        &[],
                    );
                }
                b.build()
            })
            .collect();
        let written: u64 = batches.iter().map(|b| b.len() as u64).sum();
        self.backing.rewrite(batches, live.len() as u64).await?;
        self.bytes_since_compaction.set(written);
        Ok(())
    }

    pub async fn close(self) -> Result<(), weir_storage::Error> {
        match self.backing {
            Backing::Own(log) => log.close().await,
            // The partition is closed with the other partitions of its core.
            Backing::Replica { .. } => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
