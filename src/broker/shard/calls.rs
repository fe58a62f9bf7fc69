//! Typed calls to a core: one type per request, naming its answer's type. `Shard::ask` sends
//! a call as its `Req` over the mesh (or runs it in place) and takes the answer out of the
//! `Resp`; the one place where "the core answered something else" (it was stopping) is told
//! apart is `CoreCall::reply`, giving `None`, instead of a `_ =>` arm at every call site.

use std::sync::Arc;

use weir::metadata::Metadata;

use super::*;
use crate::broker::group::service::{GroupReq, GroupResp};
use crate::broker::peer::call::{PeerAnswer, PeerCall, QuorumStatus};

/// A request to one core whose answer has one type.
pub trait CoreCall {
    type Reply;
    fn into_req(self) -> Req;
    fn reply(r: Resp) -> Option<Self::Reply>;
}

/// Declares a `CoreCall`: `Name(arg) => ReqVariant`, `Name => ReqVariant` (no argument) or
/// `Name { field: type, ... } => ReqVariant` (the variant's fields), answered
/// `RespVariant(type)` or `Done` (the reply `()`).
macro_rules! core_call {
    (@reply $resp:ident($reply:ty)) => {
        type Reply = $reply;
        fn reply(r: Resp) -> Option<$reply> {
            match r {
                Resp::$resp(v) => Some(v),
                _ => None,
            }
        }
    };
    (@reply Done) => {
        type Reply = ();
        fn reply(r: Resp) -> Option<()> {
            matches!(r, Resp::Done).then_some(())
        }
    };
    ($(#[$doc:meta])* $name:ident($arg:ty) => $req:ident, $($resp:tt)+) => {
        $(#[$doc])*
        pub struct $name(pub $arg);

        impl CoreCall for $name {
            core_call!(@reply $($resp)+);
            fn into_req(self) -> Req {
                Req::$req(self.0)
            }
        }
    };
    ($(#[$doc:meta])* $name:ident => $req:ident, $($resp:tt)+) => {
        $(#[$doc])*
        pub struct $name;

        impl CoreCall for $name {
            core_call!(@reply $($resp)+);
            fn into_req(self) -> Req {
                Req::$req
            }
        }
    };
    ($(#[$doc:meta])* $name:ident { $($field:ident: $ty:ty),+ $(,)? } => $req:ident, $($resp:tt)+) => {
        $(#[$doc])*
        pub struct $name {
            $(pub $field: $ty),+
        }

        impl CoreCall for $name {
            core_call!(@reply $($resp)+);
            fn into_req(self) -> Req {
                Req::$req { $($field: self.$field),+ }
            }
        }
    };
}

// ---- To a partition's owner ----

core_call!(
    /// Produce.
    ProduceCall { acks: i16, parts: Vec<ProducePart> } => Produce, Produce(Vec<ProduceResult>)
);
core_call!(
    /// Fetch: answered at once, or parked until `min_bytes` or `max_wait_ms`.
    FetchCall {
        key: FetchKey,
        min_bytes: i32,
        max_wait_ms: i32,
        max_bytes: i32,
        parts: Vec<FetchPart>,
    } => Fetch, Fetch(Vec<FetchResult>)
);
core_call!(
    /// The requesting core has enough data from other cores: answer the parked fetch now.
    FetchWakeCall(FetchKey) => FetchWake, Done
);
core_call!(
    /// ListOffsets.
    ListOffsetsCall(Vec<ListPart>) => ListOffsets, ListOffsets(Vec<ListResult>)
);
core_call!(
    /// OffsetForLeaderEpoch.
    EpochEndsCall(Vec<EpochPart>) => EpochEnds, EpochEnds(Vec<EpochEnd>)
);
core_call!(
    /// DeleteRecords: (error, new low watermark) per partition.
    DeleteRecordsCall(Vec<DeletePart>) => DeleteRecords, LowWatermarks(Vec<(i16, i64)>)
);
core_call!(
    /// The active idempotent producers of each (topic, partition).
    DescribeProducersCall(Vec<(String, i32)>) => DescribeProducers,
        Producers(Vec<Result<Vec<ProducerInfo>, i16>>)
);
core_call!(
    /// Transaction markers to append (and flush): an error code per partition.
    MarkersCall {
        producer_id: i64,
        epoch: i16,
        commit: bool,
        parts: Vec<(String, i32)>,
    } => Markers, Codes(Vec<i16>)
);
core_call!(
    /// ElectLeaders (PREFERRED) for these partitions: an error code per partition.
    ElectCall(Vec<(String, i32)>) => Elect, Codes(Vec<i16>)
);
core_call!(
    /// The leader (broker id, 0 for none) the partition's Raft group knows of.
    ReplicaLeaderCall { topic: String, partition: i32 } => ReplicaLeader, Leader(u64)
);

// ---- To the core of a group or a transactional id ----

core_call!(
    /// A group request, to the core owning the group (`Coordinator::core_of`).
    GroupCall(GroupReq) => Group, Group(GroupResp)
);
core_call!(
    /// A transaction request, to the core of its transactional id.
    TxnCall(TxnReq) => Txn, Txn(TxnResp)
);

// ---- To core 0: administration and the cluster ----

core_call!(
    /// CreateTopics.
    CreateTopicsCall { topics: Vec<NewTopic>, validate_only: bool } => CreateTopics,
        Topics(Vec<TopicResult>)
);
core_call!(
    /// DeleteTopics.
    DeleteTopicsCall(Vec<String>) => DeleteTopics, Topics(Vec<TopicResult>)
);
core_call!(
    /// CreatePartitions.
    CreatePartitionsCall { topics: Vec<NewPartitions>, validate_only: bool } => CreatePartitions,
        Topics(Vec<TopicResult>)
);
core_call!(
    /// Per-topic config overrides.
    AlterConfigsCall { changes: Vec<ConfigChange>, validate_only: bool } => AlterConfigs,
        Topics(Vec<TopicResult>)
);
core_call!(
    /// SASL users' credentials: (user, error code, message) per change.
    AlterUsersCall(Vec<UserChange>) => AlterUsers, Users(Vec<(String, i16, Option<String>)>)
);
core_call!(
    /// Store these ACLs (checked in form): saved and applied, or why not.
    CreateAclsCall(Vec<weir::acl::AclBinding>) => CreateAcls, Stored(Result<(), String>)
);
core_call!(
    /// Delete the ACLs each filter matches: the ACLs each filter deleted, or why none was.
    DeleteAclsCall(Vec<weir::acl::AclFilter>) => DeleteAcls,
        AclsDeleted(Result<Vec<Vec<weir::acl::AclBinding>>, String>)
);
core_call!(
    /// Metadata records to submit to the metadata group (a partition leader's report).
    SubmitCall(Vec<weir::cluster::Record>) => Submit, Stored(Result<(), String>)
);
core_call!(
    /// The metadata quorum (`Shard::quorum_status`).
    QuorumCall => Quorum, Quorum(Result<QuorumStatus, (i16, String)>)
);
core_call!(
    /// A call to broker `to` (`None`: no answer in time).
    PeerCallCall { to: u64, call: PeerCall } => PeerCall, PeerAnswer(Option<PeerAnswer>)
);
core_call!(
    /// Partition Raft messages to send to these brokers.
    RaftOutCall(Vec<(u64, weir::protocol::peer::PartitionMessage)>) => RaftOut, Done
);

// ---- From core 0 to every core ----

core_call!(
    /// A new metadata snapshot, answered once this core's logs match it: the partitions it
    /// could not open.
    ApplyCall(Arc<Metadata>) => Apply, Applied(Vec<OpenFailure>)
);
core_call!(
    /// Partition Raft messages from peers, to the replicas' core.
    RaftInCall(Vec<weir::protocol::peer::PartitionMessage>) => RaftIn, Done
);
core_call!(
    /// A peer broker went down or came back: the sleeping partition groups with a replica on
    /// it wake (`hibernate`).
    WakeReplicasOfCall { peer: u64, up: bool } => WakeReplicasOf, Done
);
core_call!(
    /// A peer's core link for this core, its hello read by core 0 (`peer::links`).
    PeerLinkCall { fd: std::os::fd::OwnedFd, addr: Option<std::net::SocketAddr> } => PeerLink, Done
);

// ---- Any core's own figures ----

core_call!(
    /// This core's figures for the metrics endpoint.
    MetricsCall => Metrics, Metrics(Box<crate::broker::metrics::CoreSnapshot>)
);
core_call!(
    /// This core's partitions and their sizes (DescribeLogDirs).
    PartitionSizesCall => PartitionSizes, PartitionSizes(Vec<(String, i32, u64)>)
);

/// Why a call got no answer: the core was stopping.
pub const STOPPING: &str = "the broker is stopping: a core did not answer";
