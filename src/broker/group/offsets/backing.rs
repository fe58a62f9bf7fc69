//! What an internal bucket store writes to — an offsets bucket (`group::offsets`) or a
//! transaction-log bucket (`broker::txn`): its own log (a standalone broker), or in a cluster
//! its bucket's partition of a replicated internal topic (`__consumer_offsets`,
//! `__transaction_state`), reached through [`BucketReplica`]; and the errors of either.

use std::rc::Rc;

use bytes::Bytes;
use weir_storage::Log;

/// Why a durable write to an internal bucket failed: the storage engine (a standalone
/// broker's own log), or, in a cluster, the bucket's Raft group (a Kafka error code:
/// leadership lost, a majority not reached in time).
#[derive(Debug)]
pub enum BucketError {
    Storage(weir_storage::Error),
    Replica(i16),
}

impl From<weir_storage::Error> for BucketError {
    fn from(e: weir_storage::Error) -> Self {
        BucketError::Storage(e)
    }
}

impl std::fmt::Display for BucketError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BucketError::Storage(e) => e.fmt(f),
            BucketError::Replica(code) => {
                write!(f, "the internal topic's partition answered error {code}")
            }
        }
    }
}

impl BucketError {
    /// The error a coordinator request answers. A replicated write maps as Kafka's
    /// coordinators map their append errors: lost leadership is NOT_COORDINATOR (the client
    /// finds the new coordinator and retries there), no majority in time
    /// COORDINATOR_NOT_AVAILABLE; a local storage error is `storage` (each coordinator has
    /// its own answer for that).
    pub fn code_or(&self, storage: i16) -> i16 {
        use crate::broker::errors;
        match self {
            BucketError::Storage(_) => storage,
            BucketError::Replica(errors::NOT_LEADER_OR_FOLLOWER | errors::KAFKA_STORAGE_ERROR) => {
                errors::NOT_COORDINATOR
            }
            BucketError::Replica(_) => errors::COORDINATOR_NOT_AVAILABLE,
        }
    }

    /// The error a group request answers (KAFKA_STORAGE_ERROR for a local storage error).
    pub fn code(&self) -> i16 {
        self.code_or(crate::broker::errors::KAFKA_STORAGE_ERROR)
    }
}

/// In a cluster, the replicated partitions of one internal topic behind its buckets, as this
/// core's replicas of them see them (implemented by the shard, which runs the Raft groups).
pub trait BucketReplica {
    /// The Raft term at which this core leads `bucket`'s partition and can serve it: it is
    /// the leader and an entry of its term is committed (so every earlier entry is, and is
    /// readable). `None`: not the leader, or not yet.
    fn serving_term(&self, bucket: usize) -> Option<u64>;
    /// Whether this core is the leader of `bucket`'s partition (ready to serve or not).
    fn leads(&self, bucket: usize) -> bool;
    /// The partition's log, for replaying it, once its committed reads reach all it holds
    /// (`None`: no longer the leader, or not in time).
    #[allow(clippy::type_complexity)]
    fn log(
        &self,
        bucket: usize,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Option<Rc<dyn std::ops::Deref<Target = Log>>>>>,
    >;
    /// How much a store of this topic grows between compactions at least (the broker's
    /// `internal.topics.compaction.min.bytes`).
    fn compaction_min_bytes(&self) -> u64 {
        COMPACTION_MIN_BYTES
    }
    /// Proposes `batch` at `term` and resolves once it is committed (acks=all), or with the
    /// Kafka error of the failure.
    fn append(
        &self,
        bucket: usize,
        term: u64,
        batch: Bytes,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), i16>>>>;
}

/// The log a bucket store writes: its own, or its bucket's replicated partition at the term
/// the store was loaded for.
pub enum Backing {
    Own(Log),
    Replica {
        log: Rc<dyn std::ops::Deref<Target = Log>>,
        io: Rc<dyn BucketReplica>,
        bucket: usize,
        term: u64,
    },
}

impl Backing {
    /// The replicated partition of `bucket` for its leader at `term`, once its committed
    /// reads reach all it holds (so replaying it reads every committed record).
    pub async fn replicated(
        io: Rc<dyn BucketReplica>,
        bucket: usize,
        term: u64,
    ) -> Result<Backing, BucketError> {
        let log = io.log(bucket).await.ok_or(BucketError::Replica(
            crate::broker::errors::NOT_LEADER_OR_FOLLOWER,
        ))?;
        Ok(Backing::Replica {
            log,
            io,
            bucket,
            term,
        })
    }

    pub fn log(&self) -> &Log {
        match self {
            Backing::Own(log) => log,
            Backing::Replica { log, .. } => log,
        }
    }

    /// How much the store grows between compactions at least: `own` (the store's own
    /// threshold) standalone, the topic's setting in a cluster.
    pub fn compaction_min_bytes(&self, own: u64) -> u64 {
        match self {
            Backing::Own(_) => own,
            Backing::Replica { io, .. } => io.compaction_min_bytes(),
        }
    }

    /// The Raft term the store was loaded for (`None` for a standalone broker's own log).
    pub fn term(&self) -> Option<u64> {
        match self {
            Backing::Own(_) => None,
            Backing::Replica { term, .. } => Some(*term),
        }
    }

    /// Appends `batch` durably: flushed to this broker's own log, or committed by a majority
    /// of the bucket's replicas — only at the term the store was loaded for.
    pub async fn append_durably(&self, batch: Bytes) -> Result<(), BucketError> {
        match self {
            Backing::Own(log) => {
                log.append(batch).await?;
                log.flush().await?;
            }
            Backing::Replica {
                io, bucket, term, ..
            } => io
                .append(*bucket, *term, batch)
                .await
                .map_err(BucketError::Replica)?,
        }
        Ok(())
    }

    /// Rewrites the live records (`batches`, `records` records in all) at the end of the log
    /// and drops everything before them: a bucket store's compaction. Standalone, the batches
    /// are appended in one go, flushed, and the log start moves to the first of them. In a
    /// cluster every replica must drop the same prefix, so the batches are proposed in one go
    /// followed by a cut record naming how far back the rewrite starts ([`cut_below`]); each
    /// replica moves its log start there once it applies the cut (`Replica::cut`). One
    /// append for all of it: no other write can land between the batches (a commit landing
    /// between two of them would be overwritten by an older value of the rewrite at replay).
    pub async fn rewrite(&self, batches: Vec<Bytes>, records: u64) -> Result<(), BucketError> {
        let mut all = bytes::BytesMut::with_capacity(batches.iter().map(|b| b.len()).sum());
        for b in &batches {
            all.extend_from_slice(b);
        }
        match self {
            Backing::Own(log) => {
                let start = log.append(all.freeze()).await?.base_offset;
                log.flush().await?;
                log.set_log_start_offset(start).await?;
            }
            Backing::Replica {
                io, bucket, term, ..
            } => {
                all.extend_from_slice(&cut_batch(records));
                io.append(*bucket, *term, all.freeze())
                    .await
                    .map_err(BucketError::Replica)?;
            }
        }
        Ok(())
    }
}

/// A bucket store's default compaction threshold (`internal.topics.compaction.min.bytes`).
pub const COMPACTION_MIN_BYTES: u64 = 4 << 20;

/// The key of a cut record: kind 0xff, which no bucket store's records use (their replays
/// skip it as an unknown kind).
const CUT_KEY: &[u8] = b"\xffweir.cut";

/// A batch holding one cut record: the log may start `back` offsets before it.
fn cut_batch(back: u64) -> Bytes {
    weir_storage::batch::RecordBatchBuilder::new(super::now_ms())
        .record(Some(CUT_KEY), Some(&back.to_be_bytes()), &[])
        .build()
}

/// The offset a committed batch of an internal topic's partition lets its replicas cut
/// their log below (the first offset of a rewrite it ends), if it is a cut record's batch.
pub fn cut_below(batch: &[u8]) -> Option<u64> {
    weir_storage::batch::decode_records(batch)?
        .into_iter()
        .filter(|r| r.key.as_deref() == Some(CUT_KEY))
        .find_map(|r| {
            let back = u64::from_be_bytes(r.value.as_deref()?.try_into().ok()?);
            (r.offset as u64).checked_sub(back)
        })
}
