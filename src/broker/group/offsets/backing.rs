//! What an offset store writes to: its own log (a standalone broker), or in a cluster its
//! bucket's partition of the replicated `__consumer_offsets`, reached through
//! [`OffsetsReplica`]; and the errors of either.

use std::rc::Rc;

use bytes::Bytes;
use weir_storage::Log;

/// Why a durable offsets write failed: the storage engine (a standalone broker's own log),
/// or, in a cluster, the bucket's Raft group (a Kafka error code: leadership lost, a
/// majority not reached in time).
#[derive(Debug)]
pub enum OffsetsError {
    Storage(weir_storage::Error),
    Replica(i16),
}

impl From<weir_storage::Error> for OffsetsError {
    fn from(e: weir_storage::Error) -> Self {
        OffsetsError::Storage(e)
    }
}

impl std::fmt::Display for OffsetsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OffsetsError::Storage(e) => e.fmt(f),
            OffsetsError::Replica(code) => write!(f, "the offsets partition answered error {code}"),
        }
    }
}

impl OffsetsError {
    /// The error a group request answers. A replicated write maps as Kafka's coordinator
    /// maps its append errors: lost leadership is NOT_COORDINATOR (the client finds the new
    /// coordinator and retries there), no majority in time COORDINATOR_NOT_AVAILABLE.
    pub fn code(&self) -> i16 {
        use crate::broker::errors;
        match self {
            OffsetsError::Storage(_) => errors::KAFKA_STORAGE_ERROR,
            OffsetsError::Replica(errors::NOT_LEADER_OR_FOLLOWER | errors::KAFKA_STORAGE_ERROR) => {
                errors::NOT_COORDINATOR
            }
            OffsetsError::Replica(_) => errors::COORDINATOR_NOT_AVAILABLE,
        }
    }
}

/// In a cluster, the replicated partition of `__consumer_offsets` behind a bucket, as this
/// core's replica of it sees it (implemented by the shard, which runs the Raft groups).
pub trait OffsetsReplica {
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

/// The log an offset store writes: its own, or its bucket's replicated partition.
pub(super) enum Backing {
    Own(Log),
    Replica {
        log: Rc<dyn std::ops::Deref<Target = Log>>,
        io: Rc<dyn OffsetsReplica>,
        bucket: usize,
        term: u64,
    },
}
