//! Transactions across brokers (docs/replication.md, "Transactions in a cluster"): a
//! transaction coordinator writes the markers of a transaction on partitions led by other
//! brokers, and ends its offsets on group coordinators of other brokers; a partition leader
//! checks a transactional produce with a coordinator on another broker. Each is a
//! [`PeerCall`] from this broker's core 0 to the other's (`peer::Peers::call`), served
//! there by [`Shard::serve_peer_call`] on the core that owns the work.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use super::msg::{TxnReq, TxnResp};
use super::{
    CoreCall, ElectCall, GroupCall, MarkersCall, PeerCallCall, QuorumCall, ReplicaLeaderCall,
    Shard, TxnCall, STOPPING,
};
use crate::broker::errors;
use crate::broker::group::offsets::{bucket_of, OFFSETS_TOPIC};
use crate::broker::group::service::{GroupReq, GroupResp};
use crate::broker::peer::call::{PeerAnswer, PeerCall, QuorumStatus};
use crate::broker::sync::join_all;
use crate::broker::txn::{self, TXN_TOPIC};

/// Partitions, each with its place in the request that named it.
type Indexed = Vec<(usize, (String, i32))>;

/// How long a call waits for the other broker's answer. A marker on a live leader commits in
/// milliseconds; no answer in time is most likely a dead broker still named as leader until
/// the partition elects another, and the caller's retry (the client's EndTxn retry, the
/// coordinator's tick) asks the leader of then.
const CALL_WAIT: Duration = Duration::from_secs(3);

/// Where a piece of a transaction's work is done: on one of this broker's cores, or on
/// another broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Place {
    Core(usize),
    Broker(u64),
}

impl Shard {
    /// Sends `call` to broker `to` (through core 0, which holds the peer connections).
    /// `None`: no answer in time, or no connection to it.
    pub async fn peer_call(self: &Rc<Self>, to: u64, call: PeerCall) -> Option<PeerAnswer> {
        if self.id != 0 {
            return self.ask(0, PeerCallCall { to, call }).await.flatten();
        }
        self.peers()?.call(to, call, CALL_WAIT).await
    }

    /// The metadata quorum as its leader sees it, asked of the leader when that is another
    /// broker. `Err`: standalone (no quorum), or no leader answered.
    pub async fn quorum_status(self: &Rc<Self>) -> Result<QuorumStatus, (i16, String)> {
        if self.id != 0 {
            return (self.ask(0, QuorumCall).await)
                .unwrap_or_else(|| Err((errors::UNKNOWN_SERVER_ERROR, STOPPING.into())));
        }
        let Some(node) = self.controller() else {
            return Err((
                errors::INVALID_REQUEST,
                "a standalone weir broker has no metadata quorum (only a cluster, started with \
                 --peers, has one)"
                    .into(),
            ));
        };
        if let Some(q) = node.quorum_status() {
            return Ok(q);
        }
        let leader = node.leader();
        let unavailable = |why: String| (errors::NOT_LEADER_OR_FOLLOWER, why);
        if leader == 0 {
            return Err(unavailable("the metadata group has no leader now".into()));
        }
        let answer = match self.peers() {
            Some(peers) => peers.call(leader, PeerCall::Quorum, CALL_WAIT).await,
            None => None,
        };
        match answer {
            Some(PeerAnswer::Quorum(q)) => Ok(q),
            _ => Err(unavailable(format!(
                "broker {leader} (the metadata leader) did not answer"
            ))),
        }
    }

    /// On core 0: serves a peer's call on the core that owns its work.
    pub async fn serve_peer_call(self: &Rc<Self>, call: PeerCall) -> PeerAnswer {
        match call {
            PeerCall::Quorum => match self.controller().and_then(|n| n.quorum_status()) {
                Some(q) => PeerAnswer::Quorum(q),
                None => PeerAnswer::Code(errors::NOT_LEADER_OR_FOLLOWER),
            },
            PeerCall::Verify {
                txn_id,
                producer_id,
                epoch,
                parts,
            } => {
                let core = self.txn_core(&txn_id);
                let req = TxnReq::Verify {
                    txn_id,
                    producer_id,
                    epoch,
                    parts,
                };
                PeerAnswer::Code(match self.ask(core, TxnCall(req)).await {
                    Some(TxnResp::Code(c)) => c,
                    _ => errors::COORDINATOR_NOT_AVAILABLE,
                })
            }
            PeerCall::Markers {
                producer_id,
                epoch,
                commit,
                parts,
            } => PeerAnswer::Codes(self.markers_here(producer_id, epoch, commit, parts).await),
            PeerCall::Elect { parts } => PeerAnswer::Codes(self.elect_here(parts).await),
            PeerCall::GroupTxnEnd {
                group,
                producer_id,
                commit,
            } => {
                let core = self.group_core(&group);
                let req = GroupCall(GroupReq::TxnEnd {
                    group,
                    producer_id,
                    commit,
                });
                PeerAnswer::Code(match self.ask(core, req).await {
                    Some(GroupResp::Code(c)) => c,
                    _ => errors::COORDINATOR_NOT_AVAILABLE,
                })
            }
        }
    }

    /// Markers for partitions this broker is asked to write: each on the core holding its
    /// replica (or its owner at replication factor 1). One code per partition, in order.
    async fn markers_here(
        self: &Rc<Self>,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        parts: Vec<(String, i32)>,
    ) -> Vec<i16> {
        self.on_replica_cores(parts, |parts| MarkersCall {
            producer_id,
            epoch,
            commit,
            parts,
        })
        .await
    }

    /// ElectLeaders (PREFERRED) for partitions this broker leads, each on the core holding its
    /// replica (`ReplicaHost::elect`). One code per partition, in order.
    pub(crate) async fn elect_here(self: &Rc<Self>, parts: Vec<(String, i32)>) -> Vec<i16> {
        self.on_replica_cores(parts, ElectCall).await
    }

    /// Sends each core holding this broker's replica of some of `parts` (or its owner at
    /// replication factor 1) the request `req` makes of them, at once, and gathers one code
    /// per partition, in order.
    async fn on_replica_cores<C: CoreCall<Reply = Vec<i16>> + 'static>(
        self: &Rc<Self>,
        parts: Vec<(String, i32)>,
        req: impl Fn(Vec<(String, i32)>) -> C,
    ) -> Vec<i16> {
        let meta = self.metadata();
        let mut codes = vec![errors::NONE; parts.len()];
        let mut by_core: BTreeMap<usize, Indexed> = BTreeMap::new();
        for (i, (t, p)) in parts.into_iter().enumerate() {
            match meta.local_replica(&t, p).or_else(|| meta.owner(&t, p)) {
                Some(core) => by_core.entry(core).or_default().push((i, (t, p))),
                None if meta.topics.contains_key(&t) => codes[i] = errors::NOT_LEADER_OR_FOLLOWER,
                None => codes[i] = errors::UNKNOWN_TOPIC_OR_PARTITION,
            }
        }
        let calls = by_core.into_iter().map(|(core, parts)| {
            let shard = self.clone();
            let (at, parts): (Vec<usize>, Vec<(String, i32)>) = parts.into_iter().unzip();
            let n = parts.len();
            let req = req(parts);
            async move {
                let got = match shard.ask(core, req).await {
                    Some(c) if c.len() == n => c,
                    _ => vec![errors::COORDINATOR_NOT_AVAILABLE; n],
                };
                at.into_iter().zip(got).collect::<Vec<_>>()
            }
        });
        for (i, c) in join_all(calls.collect()).await.into_iter().flatten() {
            codes[i] = c;
        }
        codes
    }

    /// The broker leading `topic`-`partition`: its Raft group's leader if this broker holds
    /// a replica (it hears of a new leader at once), else the metadata's. `None` while no
    /// leader is known.
    pub(crate) async fn leader_broker(self: &Rc<Self>, topic: &str, partition: i32) -> Option<u64> {
        let meta = self.metadata();
        let t = meta.topics.get(topic)?;
        let p = usize::try_from(partition).ok()?;
        let replicated = t.replicas.get(p).is_some_and(|r| !r.is_empty());
        if replicated {
            if let Some(core) = meta.local_replica(topic, partition) {
                let ask = ReplicaLeaderCall {
                    topic: topic.to_string(),
                    partition,
                };
                if let Some(b) = self.ask(core, ask).await {
                    return (b != 0).then_some(b);
                }
            }
        }
        t.brokers.get(p).copied()
    }

    /// Where the markers of `topic`-`partition` are written: standalone, its owner core; in a
    /// cluster, the core holding this broker's replica if this broker leads it, else the
    /// leading broker. `None`: the topic is gone (no marker is needed), or no leader is known.
    pub(super) async fn marker_place(
        self: &Rc<Self>,
        topic: &str,
        partition: i32,
    ) -> Option<Result<Place, ()>> {
        let meta = self.metadata();
        let Some(here) = meta.local_broker else {
            return meta.owner(topic, partition).map(|c| Ok(Place::Core(c)));
        };
        let t = meta.topics.get(topic)?;
        if usize::try_from(partition).map_or(true, |p| p >= t.owners.len()) {
            return None;
        }
        Some(match self.leader_broker(topic, partition).await {
            Some(b) if b == here => meta
                .local_replica(topic, partition)
                .or_else(|| meta.owner(topic, partition))
                .map(Place::Core)
                .ok_or(()),
            Some(b) => Ok(Place::Broker(b)),
            None => Err(()),
        })
    }

    /// Where a group's transactional offsets are ended: in a cluster with
    /// `__consumer_offsets`, the leader of the group's partition (this broker's replica core,
    /// or another broker); otherwise the group's core here.
    pub(super) async fn group_place(self: &Rc<Self>, group: &str) -> Option<Place> {
        let meta = self.metadata();
        let local = Place::Core(self.group_core(group));
        let (Some(here), true) = (meta.local_broker, meta.topics.contains_key(OFFSETS_TOPIC))
        else {
            return Some(local);
        };
        match self
            .leader_broker(OFFSETS_TOPIC, bucket_of(group) as i32)
            .await?
        {
            b if b == here => Some(local),
            b => Some(Place::Broker(b)),
        }
    }

    /// In a cluster, the broker coordinating `txn_id`: the leader of its
    /// `__transaction_state` partition (as this broker's replica of it knows, else the
    /// metadata). `None` standalone, or while no leader is known.
    pub async fn txn_coordinator_broker(self: &Rc<Self>, txn_id: &str) -> Option<u64> {
        self.metadata().local_broker?;
        self.leader_broker(TXN_TOPIC, txn::bucket_of(txn_id) as i32)
            .await
    }
}
