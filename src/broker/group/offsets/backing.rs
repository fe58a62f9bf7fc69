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
}
