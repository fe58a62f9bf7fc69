//! Requests one broker makes of another for a transaction (Kafka's inter-broker
//! `WriteTxnMarkers`, and the checks a partition leader and a group coordinator need from a
//! transaction coordinator on another broker). They travel as peer frames (`net`, kinds 5
//! and 6) between the brokers' cores 0; the receiving core 0 hands each to the core that
//! serves it (`Shard::serve_peer_call`) and sends the answer back.

use serde::{Deserialize, Serialize};

/// A request for another broker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PeerCall {
    /// To the coordinator of `txn_id`: are these partitions in its open transaction, with
    /// this producer id and epoch (a transactional produce's check, KIP-890)?
    /// Answered `Code`.
    Verify {
        txn_id: String,
        producer_id: i64,
        epoch: i16,
        parts: Vec<(String, i32)>,
    },
    /// To the leader of these partitions: append a commit or abort marker on each, through
    /// its Raft group (answered once committed). Answered `Codes`, one per partition.
    Markers {
        producer_id: i64,
        epoch: i16,
        commit: bool,
        parts: Vec<(String, i32)>,
    },
    /// To the coordinator of `group`: apply (commit) or drop (abort) the offsets the
    /// producer's transaction sent. Answered `Code`.
    GroupTxnEnd {
        group: String,
        producer_id: i64,
        commit: bool,
    },
    /// To the leader of these partitions: hand each one's leadership to its preferred
    /// replica (ElectLeaders, PREFERRED). Answered `Codes`, one per partition.
    Elect { parts: Vec<(String, i32)> },
    /// To the metadata group's leader: the state of its quorum (DescribeQuorum). Answered
    /// `Quorum`, or `Code` NOT_LEADER_OR_FOLLOWER when the callee is no longer the leader.
    Quorum,
}

/// The metadata Raft group as its leader sees it (Kafka's DescribeQuorum answer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuorumStatus {
    pub leader: u64,
    pub term: u64,
    /// The commit index: what Kafka calls the quorum's high watermark.
    pub high_watermark: u64,
    /// (voter id, last index known to be on it) for every voter, the leader included.
    pub voters: Vec<(u64, u64)>,
}

/// The answer to a [`PeerCall`]: a Kafka error code, or one per partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PeerAnswer {
    Code(i16),
    Codes(Vec<i16>),
    Quorum(QuorumStatus),
}

/// A call as it travels: the caller's broker and its request id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallFrame {
    pub from: u64,
    pub req: u64,
    pub call: PeerCall,
}

/// An answer as it travels back, by request id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnswerFrame {
    pub req: u64,
    pub answer: PeerAnswer,
}
