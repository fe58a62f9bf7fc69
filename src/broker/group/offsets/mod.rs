//! Durable committed offsets: one internal log per bucket (`<data>/__consumer_offsets/<n>`),
//! on the core that owns the bucket, written with the storage engine. In a cluster the
//! buckets are instead the partitions of the replicated internal topic `__consumer_offsets`
//! ([`BucketReplica`]): a commit is proposed to the partition's Raft group and answered once
//! a majority has it, and the bucket's leader replays the partition when it takes over.
//!
//! Each commit appends one record batch (one record per partition) and is flushed before
//! it is acknowledged. Record layout (all integers big-endian):
//!
//! ```text
//! key:   kind u8 (1 = offset) | group len u16 | group | topic len u16 | topic | partition i32
//! value: version u8 (1) | offset i64 | leader_epoch i32 | commit_ms i64 | metadata len u16 | metadata
//!        (no value = tombstone: the offset was deleted)
//! ```
//!
//! Group membership (kind 4, `group_state.rs`), consumer-protocol group states (kind 5,
//! `consumer_state.rs`) and transactional offsets (kinds 2 and 3, `txn.rs`) are records of
//! the same log.
//!
//! Start-up replays the log from its start offset. When the log has grown well past the live
//! data, every live offset is appended again as a snapshot and the log start moves to the
//! snapshot (whole segments below it are deleted), so start-up time follows the number of
//! live offsets, not the number of commits ever made.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use weir_storage::batch::{decode_records, RecordBatchBuilder};
use weir_storage::{BatchCache, Log, LogConfig};

mod backing;
mod compact;
mod consumer_state;
mod group_state;
mod kafka_format;
mod txn;

pub use backing::{cut_below, Backing, BucketError, BucketReplica, COMPACTION_MIN_BYTES};
pub use group_state::{StoredGroup, StoredMember};
pub use kafka_format::kafka_view;

use consumer_state::KIND_CONSUMER_GROUP;
use group_state::KIND_GROUP;

use txn::{Pending, KIND_TXN_END, KIND_TXN_OFFSET};

/// Number of offset buckets (Kafka's `offsets.topic.num.partitions`, fixed here).
pub const BUCKETS: usize = 16;
/// The internal topic whose partitions are the buckets in a cluster (Kafka's name).
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

const KIND_OFFSET: u8 = 1;
const VALUE_VERSION: u8 = 1;

/// The bucket of a group: FNV-1a of its id.
pub fn bucket_of(group: &str) -> usize {
    let mut h: u32 = 0x811c_9dc5;
    for b in group.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h as usize % BUCKETS
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_ms: i64,
}

pub(crate) type Key = (String, String, i32);

/// The offsets of the groups in one bucket.
pub struct OffsetStore {
    backing: Backing,
    pub(crate) entries: RefCell<BTreeMap<Key, Committed>>,
    /// The stored membership of the groups that have one (`group_state.rs`).
    pub(crate) group_states: RefCell<BTreeMap<String, StoredGroup>>,
    /// The stored state of the consumer-protocol groups (`consumer_state.rs`), opaque here.
    pub(crate) consumer_states: RefCell<BTreeMap<String, Bytes>>,
    /// Offsets of open transactions (`offsets/txn.rs`).
    pub(crate) pending: RefCell<Pending>,
    bytes_since_compaction: Cell<u64>,
    compacting: Cell<bool>,
    /// Commits and deletes whose records are (being) appended but not yet applied to
    /// `entries` (they wait for their flush). A compaction snapshots `entries` and moves the
    /// log start past every record appended so far, so it may only run while this is zero:
    /// otherwise it would drop such a record from the log while the snapshot lacks it, and an
    /// acknowledged commit would be gone after a restart.
    unapplied: Cell<usize>,
    /// Log size that makes a compaction worth it (`COMPACTION_MIN_BYTES`; smaller in tests).
    compact_min_bytes: u64,
}

fn encode_key(group: &str, topic: &str, partition: i32) -> Bytes {
    let mut k = BytesMut::with_capacity(9 + group.len() + topic.len());
    k.put_u8(KIND_OFFSET);
    k.put_u16(group.len() as u16);
    k.put_slice(group.as_bytes());
    k.put_u16(topic.len() as u16);
    k.put_slice(topic.as_bytes());
    k.put_i32(partition);
    k.freeze()
}

pub(crate) fn encode_value(c: &Committed) -> Bytes {
    let mut v = BytesMut::with_capacity(23 + c.metadata.len());
    v.put_u8(VALUE_VERSION);
    v.put_i64(c.offset);
    v.put_i32(c.leader_epoch);
    v.put_i64(c.commit_ms);
    let md = &c.metadata.as_bytes()[..c.metadata.len().min(u16::MAX as usize)];
    v.put_u16(md.len() as u16);
    v.put_slice(md);
    v.freeze()
}

pub(crate) fn get_str(buf: &mut &[u8]) -> Option<String> {
    if buf.remaining() < 2 {
        return None;
    }
    let n = buf.get_u16() as usize;
    if buf.remaining() < n {
        return None;
    }
    let s = String::from_utf8(buf[..n].to_vec()).ok()?;
    buf.advance(n);
    Some(s)
}

fn decode_key(mut k: &[u8]) -> Option<Key> {
    if k.remaining() < 1 || k.get_u8() != KIND_OFFSET {
        return None;
    }
    let group = get_str(&mut k)?;
    let topic = get_str(&mut k)?;
    if k.remaining() != 4 {
        return None;
    }
    Some((group, topic, k.get_i32()))
}

pub(crate) fn decode_value(mut v: &[u8]) -> Option<Committed> {
    if v.remaining() < 23 || v.get_u8() != VALUE_VERSION {
        return None;
    }
    let offset = v.get_i64();
    let leader_epoch = v.get_i32();
    let commit_ms = v.get_i64();
    let metadata = get_str(&mut v)?;
    Some(Committed {
        offset,
        leader_epoch,
        metadata,
        commit_ms,
    })
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The settings of an internal log (the offsets logs here, the transaction logs of
/// `broker::txn`): no retention (they compact themselves), small buffers.
pub(crate) fn internal_log_config() -> LogConfig {
    LogConfig {
        segment_bytes: 16 << 20,
        segment_ms: None,
        retention_ms: None,
        retention_bytes: None,
        write_chunk_bytes: 64 << 10,
        writes_in_flight: 4,
        preallocate_bytes: 1 << 20,
        read_chunk_bytes: 256 << 10,
        read_ahead_bytes: 1 << 20,
        ..LogConfig::default()
    }
}

/// Reads an internal log from its start to its high watermark and hands each record's key
/// (empty for none) and value to `apply`, in offset order. Returns the bytes read.
pub(crate) async fn replay_records(
    log: &Log,
    mut apply: impl FnMut(&[u8], Option<&[u8]>),
) -> Result<u64, weir_storage::Error> {
    let wm = log.watermarks();
    let mut offset = wm.log_start_offset;
    let mut bytes = 0u64;
    while offset < wm.high_watermark {
        let r = log.read(offset, 1 << 20).await?;
        if r.is_empty() {
            break;
        }
        for (h, batch) in r.batches() {
            bytes += batch.len() as u64;
            for rec in decode_records(batch).unwrap_or_default() {
                if (rec.offset as u64) >= offset {
                    apply(rec.key.as_deref().unwrap_or_default(), rec.value.as_deref());
                }
            }
            offset = h.last_offset() as u64 + 1;
        }
        glommio::yield_if_needed().await;
    }
    Ok(bytes)
}

impl OffsetStore {
    fn dir(data_dir: &Path, bucket: usize) -> std::path::PathBuf {
        data_dir.join("__consumer_offsets").join(bucket.to_string())
    }

    /// Whether the offsets log of `bucket` exists (holds or held offsets).
    pub fn exists(data_dir: &Path, bucket: usize) -> bool {
        Self::dir(data_dir, bucket).exists()
    }

    /// Opens (creating) the offsets log of `bucket` under `data_dir` and replays it.
    pub async fn open(
        data_dir: &Path,
        bucket: usize,
        cache: Rc<BatchCache>,
    ) -> Result<OffsetStore, weir_storage::Error> {
        let dir = Self::dir(data_dir, bucket);
        let log = Log::open_with_cache(&dir, internal_log_config(), cache).await?;
        let store = OffsetStore::new(Backing::Own(log));
        store.replay().await?;
        Ok(store)
    }

    /// The store of `bucket` in a cluster, for the leader of its partition at `term`: the
    /// partition replayed up to its committed offset.
    pub async fn open_replicated(
        io: Rc<dyn BucketReplica>,
        bucket: usize,
        term: u64,
    ) -> Result<OffsetStore, BucketError> {
        let store = OffsetStore::new(Backing::replicated(io, bucket, term).await?);
        store.replay().await?;
        Ok(store)
    }

    fn new(backing: Backing) -> OffsetStore {
        OffsetStore {
            backing,
            entries: RefCell::new(BTreeMap::new()),
            group_states: RefCell::new(BTreeMap::new()),
            consumer_states: RefCell::new(BTreeMap::new()),
            pending: RefCell::new(Pending::new()),
            bytes_since_compaction: Cell::new(0),
            compacting: Cell::new(false),
            unapplied: Cell::new(0),
            compact_min_bytes: COMPACTION_MIN_BYTES,
        }
    }

    /// The log the store writes (its own, or its replicated partition's).
    pub fn log(&self) -> &Log {
        self.backing.log()
    }

    /// The Raft term this store was loaded for (`None` for a standalone broker's own log).
    pub fn term(&self) -> Option<u64> {
        self.backing.term()
    }

    /// Appends `batch` durably: flushed to this broker's own log, or committed by a majority
    /// of the bucket's replicas.
    async fn append_durably(&self, batch: Bytes) -> Result<(), BucketError> {
        self.backing.append_durably(batch).await
    }

    async fn replay(&self) -> Result<(), weir_storage::Error> {
        let mut entries = BTreeMap::new();
        let mut states = BTreeMap::new();
        let mut consumer_states = BTreeMap::new();
        let mut pending = Pending::new();
        let bytes = replay_records(self.log(), |raw_key, value| {
            if matches!(raw_key.first(), Some(&KIND_TXN_OFFSET | &KIND_TXN_END)) {
                txn::replay(raw_key, value, &mut pending, &mut entries);
                return;
            }
            if raw_key.first() == Some(&KIND_CONSUMER_GROUP) {
                if let Some(group) = consumer_state::decode_key(raw_key) {
                    match value {
                        Some(v) => consumer_states.insert(group, Bytes::copy_from_slice(v)),
                        None => consumer_states.remove(&group),
                    };
                }
                return;
            }
            if raw_key.first() == Some(&KIND_GROUP) {
                if let Some(group) = group_state::decode_key(raw_key) {
                    match value.and_then(group_state::decode_value) {
                        Some(s) => states.insert(group, s),
                        None => states.remove(&group),
                    };
                }
                return;
            }
            let Some(key) = decode_key(raw_key) else {
                return;
            };
            match value.and_then(decode_value) {
                Some(c) => entries.insert(key, c),
                None => entries.remove(&key),
            };
        })
        .await?;
        tracing::debug!(dir = %self.log().dir().display(), entries = entries.len(), groups = states.len(), bytes, "offsets replayed");
        *self.entries.borrow_mut() = entries;
        *self.group_states.borrow_mut() = states;
        *self.consumer_states.borrow_mut() = consumer_states;
        *self.pending.borrow_mut() = pending;
        self.bytes_since_compaction.set(bytes);
        Ok(())
    }

    /// Durably stores the given offsets of `group` (answers once flushed).
    pub async fn commit(
        &self,
        group: &str,
        offsets: Vec<(String, i32, Committed)>,
    ) -> Result<(), BucketError> {
        if offsets.is_empty() {
            return Ok(());
        }
        let mut b = RecordBatchBuilder::new(now_ms());
        for (topic, partition, c) in &offsets {
            b = b.record(
                Some(&encode_key(group, topic, *partition)),
                Some(&encode_value(c)),
                &[],
            );
        }
        let batch = b.build();
        let len = batch.len() as u64;
        {
            let _unapplied = Unapplied::new(&self.unapplied);
            self.append_durably(batch).await?;
            let mut e = self.entries.borrow_mut();
            for (topic, partition, c) in offsets {
                e.insert((group.to_owned(), topic, partition), c);
            }
        }
        self.bytes_since_compaction
            .set(self.bytes_since_compaction.get() + len);
        self.maybe_compact().await
    }

    /// Appends `batch`, flushes, then applies it in memory with `apply` (counted as
    /// unapplied meanwhile, so no compaction runs across it).
    pub(crate) async fn append_applied(
        &self,
        batch: Bytes,
        apply: impl FnOnce(&Self),
    ) -> Result<(), BucketError> {
        let len = batch.len() as u64;
        {
            let _unapplied = Unapplied::new(&self.unapplied);
            self.append_durably(batch).await?;
            apply(self);
        }
        self.bytes_since_compaction
            .set(self.bytes_since_compaction.get() + len);
        self.maybe_compact().await
    }

    /// Deletes every offset of `group` (or only those of `topic`), durably; deleting a whole
    /// group also removes its stored membership.
    pub async fn delete(
        &self,
        group: Option<&str>,
        topic: Option<&str>,
    ) -> Result<usize, BucketError> {
        let keys: Vec<Key> = self
            .entries
            .borrow()
            .keys()
            .filter(|(g, t, _)| group.is_none_or(|x| x == g) && topic.is_none_or(|x| x == t))
            .cloned()
            .collect();
        let state = group.filter(|g| topic.is_none() && self.has_group_state(g));
        self.tombstone(keys, state).await
    }

    /// Deletes the offsets of `group` for the given (topic, partition)s, durably (OffsetDelete);
    /// partitions without an offset are skipped. Returns how many were deleted.
    pub async fn delete_partitions(
        &self,
        group: &str,
        parts: &[(String, i32)],
    ) -> Result<usize, BucketError> {
        let keys: Vec<Key> = {
            let e = self.entries.borrow();
            parts
                .iter()
                .map(|(t, p)| (group.to_owned(), t.clone(), *p))
                .filter(|k| e.contains_key(k))
                .collect()
        };
        self.tombstone(keys, None).await
    }

    /// Appends a tombstone for each key and for `group_state`'s stored membership (one
    /// batch), flushes, then forgets them in memory.
    async fn tombstone(
        &self,
        mut keys: Vec<Key>,
        group_state: Option<&str>,
    ) -> Result<usize, BucketError> {
        keys.sort();
        keys.dedup();
        if keys.is_empty() && group_state.is_none() {
            return Ok(0);
        }
        let mut b = RecordBatchBuilder::new(now_ms());
        for (g, t, p) in &keys {
            b = b.record(Some(&encode_key(g, t, *p)), None, &[]);
        }
        if let Some(g) = group_state {
            b = b.record(Some(&group_state::encode_key(g)), None, &[]);
        }
        let _unapplied = Unapplied::new(&self.unapplied);
        self.append_durably(b.build()).await?;
        let mut e = self.entries.borrow_mut();
        for k in &keys {
            e.remove(k);
        }
        if let Some(g) = group_state {
            self.group_states.borrow_mut().remove(g);
        }
        Ok(keys.len())
    }

    pub fn get(&self, group: &str, topic: &str, partition: i32) -> Option<Committed> {
        self.entries
            .borrow()
            .get(&(group.to_owned(), topic.to_owned(), partition))
            .cloned()
    }

    /// Every committed offset of `group`: (topic, partition, committed).
    pub fn all(&self, group: &str) -> Vec<(String, i32, Committed)> {
        self.entries
            .borrow()
            .iter()
            .filter(|((g, _, _), _)| g == group)
            .map(|((_, t, p), c)| (t.clone(), *p, c.clone()))
            .collect()
    }

    /// Whether `group` has committed offsets here.
    pub fn has_group(&self, group: &str) -> bool {
        let from = (group.to_owned(), String::new(), i32::MIN);
        self.entries
            .borrow()
            .range(from..)
            .next()
            .is_some_and(|((g, _, _), _)| g == group)
    }

    /// Groups that have committed offsets here.
    pub fn groups(&self) -> Vec<String> {
        let mut gs: Vec<String> = self
            .entries
            .borrow()
            .keys()
            .map(|(g, _, _)| g.clone())
            .collect();
        gs.dedup();
        gs
    }

    /// Segments and bytes of the offsets log.
    #[cfg(test)]
    pub fn log_size(&self) -> (usize, u64) {
        self.log().size()
    }

    /// Closes a standalone broker's own log (a replicated bucket's log is the partition's:
    /// the shard closes it).
    pub async fn close(self) -> Result<(), weir_storage::Error> {
        match self.backing {
            Backing::Own(log) => log.close().await,
            Backing::Replica { .. } => Ok(()),
        }
    }
}

/// Counts one commit or delete as appended-but-not-applied for as long as it lives (also
/// when the append or flush fails and the future returns early).
struct Unapplied<'a>(&'a Cell<usize>);

impl<'a> Unapplied<'a> {
    fn new(c: &'a Cell<usize>) -> Self {
        c.set(c.get() + 1);
        Unapplied(c)
    }
}

impl Drop for Unapplied<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// Runs `f` on a glommio executor with a fresh directory under target/ (on the real
/// filesystem: direct I/O does not work on tmpfs), the direct-I/O probe primed: for tests of
/// the logs kept here and of the coordinator above them.
#[cfg(test)]
pub(crate) fn run_on_disk<F, Fut>(f: F)
where
    F: FnOnce(std::path::PathBuf) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    // Under target/, on the real filesystem (direct I/O does not work on tmpfs).
    let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-tmp");
    std::fs::create_dir_all(&base).expect("test tmp dir");
    let dir = tempfile::tempdir_in(base).expect("tempdir");
    let path = dir.path().to_owned();
    glommio::LocalExecutorBuilder::default()
        .io_memory(1 << 20)
        .spawn(move || async move {
            weir_storage::io::prime_dma_probe(&path)
                .await
                .expect("prime");
            f(path).await
        })
        .expect("spawn")
        .join()
        .expect("join");
    drop(dir);
}

#[cfg(test)]
pub(crate) mod fake_replica;
#[cfg(test)]
mod tests;
