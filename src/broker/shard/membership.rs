//! This broker as a member of a cluster (`controller.quorum.voters`): its metadata group's
//! node (core 0) and the records other cores submit through it, its registration of its
//! endpoints, and what clients are told of the cluster: the node ids, the brokers with their
//! endpoints and racks (Metadata, DescribeCluster) and KIP-951 leader hints. Admin changes go
//! through `admin` (the same way standalone).
//!
//! Standalone (no voters) nothing here changes a thing: `controller` is `None`, node ids
//! are cores (or 0) and the brokers are this process's endpoints.

use std::rc::Rc;

use tracing::{info, warn};
use weir::cluster::{BrokerInfo, ListenerEndpoints, Record, NODE_ID_STRIDE};
use weir::metadata::{Metadata, TopicMeta};

use super::admin::ADMIN_TIMEOUT;
use super::*;
use crate::broker::controller::Node;
use crate::broker::peer::Peers;

impl Shard {
    /// The metadata group's node, on core 0 of a broker in a cluster.
    pub fn controller(&self) -> Option<Rc<Node>> {
        self.controller.borrow().clone()
    }

    pub fn set_controller(&self, node: Rc<Node>) {
        *self.controller.borrow_mut() = Some(node);
    }

    /// The other brokers, on core 0 of a broker in a cluster.
    pub fn peers(&self) -> Option<Rc<Peers>> {
        self.peers.borrow().clone()
    }

    pub fn set_peers(&self, peers: Rc<Peers>) {
        *self.peers.borrow_mut() = Some(peers);
    }

    /// Waits (a broker just started in a cluster) until its metadata caught up with the
    /// metadata leader's, so an answer from the metadata (Metadata, DescribeTopicPartitions,
    /// DescribeCluster, FindCoordinator) never names the leaders this broker saw before it
    /// went down (`controller::catch_up`). The node gives up the wait itself
    /// after `controller::CATCH_UP_WAIT`; the bound here only guards against a node that never
    /// started.
    pub async fn wait_metadata_current(&self) {
        use std::sync::atomic::Ordering::Acquire;
        // Long after start-up the flag is set: one load, no clone of its `Arc`.
        if self.metadata_current.borrow().load(Acquire) {
            return;
        }
        let flag = self.metadata_current.borrow().clone();
        let started = std::time::Instant::now();
        while !flag.load(Acquire)
            && started.elapsed() < crate::broker::controller::CATCH_UP_WAIT * 2
        {
            glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// This broker's endpoints, as registered in the cluster metadata.
    pub(super) fn broker_info(&self) -> BrokerInfo {
        let advertised = self.advertised.borrow();
        let cores = self.core_endpoints.borrow();
        BrokerInfo {
            cores: self.cores,
            listeners: advertised
                .iter()
                .enumerate()
                .map(|(li, (host, port))| ListenerEndpoints {
                    host: host.clone(),
                    port: *port,
                    cores: cores.get(li).cloned().unwrap_or_default(),
                })
                .collect(),
            rack: self.config.rack.clone(),
        }
    }

    /// Core 0, once every core has bound its listeners: registers this broker's endpoints
    /// (again after a restart, when the ports may differ), retrying until it is committed.
    pub async fn register_broker(self: Rc<Self>, node: Rc<Node>) {
        let info = self.broker_info();
        loop {
            if self.metadata().brokers.get(&node.id) == Some(&info) {
                info!(broker = node.id, "broker registered");
                return;
            }
            let record = Record::RegisterBroker {
                id: node.id,
                info: info.clone(),
            };
            if let Err(e) = node.submit(vec![record], ADMIN_TIMEOUT).await {
                warn!(error = %e, "registering this broker; trying again");
            }
            if self.shutdown.is_fired() {
                return;
            }
        }
    }

    /// The Kafka node id of core `core` of broker `broker` (`None`: standalone).
    pub(super) fn node_id(&self, broker: Option<u64>, core: usize, per_core: bool) -> i32 {
        match broker {
            None if per_core => core as i32,
            None => 0,
            Some(b) if per_core => b as i32 * NODE_ID_STRIDE + core as i32,
            Some(b) => b as i32,
        }
    }

    /// The node id that leads a partition owned by `core` of this broker (and coordinates a
    /// group living there): the core itself with `listeners.per.core`, else the one node 0;
    /// in a cluster, `broker * 1024 + core`, or the broker id.
    pub fn node_of(&self, core: usize) -> i32 {
        let per_core = !self.core_endpoints.borrow().is_empty();
        self.node_id(self.metadata().local_broker, core, per_core)
    }

    /// The node id of core `core` of broker `b` as clients see it: on this broker
    /// `node_of`, on another per core if that broker registered per-core endpoints.
    pub(super) fn node_at(&self, meta: &Metadata, b: u64, core: usize) -> i32 {
        if meta.local_broker.is_none_or(|here| here == b) {
            return self.node_of(core);
        }
        let per_core = meta
            .brokers
            .get(&b)
            .map_or(self.config.listeners_per_core, |i| {
                i.listeners.first().is_some_and(|l| !l.cores.is_empty())
            });
        self.node_id(Some(b), core, per_core)
    }

    /// The node id that leads partition `p` of `t`: on this broker `node_of`, on another
    /// the node of its core there (per core if that broker registered per-core endpoints).
    pub fn leader_node(&self, meta: &Metadata, t: &TopicMeta, p: usize) -> i32 {
        let core = t.owners.get(p).copied().unwrap_or(0);
        match (meta.local_broker, t.brokers.get(p)) {
            (Some(_), Some(&b)) => self.node_at(meta, b, core),
            _ => self.node_of(core),
        }
    }

    /// The node ids of the in-sync replicas of partition `p` of `t` (Metadata's `isr_nodes`):
    /// as its leader last reported them, else the leader alone.
    pub fn isr_nodes(&self, meta: &Metadata, t: &TopicMeta, p: usize) -> Vec<i32> {
        let (Some(isr), Some(replicas)) = (t.isr.get(p), t.replicas.get(p)) else {
            return vec![self.leader_node(meta, t, p)];
        };
        if isr.is_empty() {
            return vec![self.leader_node(meta, t, p)];
        }
        replicas
            .iter()
            .filter(|(b, _)| isr.contains(b))
            .map(|&(b, c)| self.node_at(meta, b, c))
            .collect()
    }

    /// The node ids of every replica of partition `p` of `t`, the preferred leader first
    /// (Metadata's `replica_nodes`; just the leader at replication factor 1).
    pub fn replica_nodes(&self, meta: &Metadata, t: &TopicMeta, p: usize) -> Vec<i32> {
        if t.replicas.get(p).is_none_or(|r| r.is_empty()) {
            return vec![self.leader_node(meta, t, p)];
        }
        t.replicas[p]
            .iter()
            .map(|&(b, c)| self.node_at(meta, b, c))
            .collect()
    }

    /// The controller id put in Metadata: in a cluster this broker's first node (it
    /// forwards admin requests to the metadata leader), else 0.
    pub fn controller_node(&self) -> i32 {
        self.metadata().local_broker.map_or(0, |_| self.node_of(0))
    }
    /// KIP-951: the leader a NOT_LEADER_OR_FOLLOWER (or FENCED_LEADER_EPOCH) answer about
    /// partition `p` of `topic` names, as (node id, leader epoch), so that the client goes
    /// there without a metadata round trip. `raft`: what this broker's replica's Raft group
    /// knows (leader broker, term), which runs ahead of the metadata for a moment after a
    /// leader change — a leadership just handed over names the new leader before its record
    /// is applied. `None` when the leader known is this broker itself (nothing to hint) or
    /// none is known.
    pub fn leader_hint(
        &self,
        meta: &Metadata,
        topic: &str,
        p: i32,
        raft: Option<(u64, u64)>,
    ) -> Option<(i32, i32)> {
        let t = meta.topics.get(topic)?;
        let pu = usize::try_from(p).ok()?;
        let here = meta.local_broker?;
        let epoch = Metadata::leader_epoch(t, pu);
        if let Some((b, term)) = raft.filter(|&(b, term)| b != 0 && b != here && term >= epoch) {
            let core = t.replicas.get(pu)?.iter().find(|(r, _)| *r == b)?.1;
            return Some((self.node_at(meta, b, core), i32::try_from(term).ok()?));
        }
        match t.brokers.get(pu) {
            Some(&b) if b != here && epoch > 0 => {
                Some((self.leader_node(meta, t, pu), i32::try_from(epoch).ok()?))
            }
            _ => None,
        }
    }

    /// The brokers a client that came in on `listener` is told about, as (node id, host,
    /// port): one per core with `listeners.per.core`, else one per broker (standalone: the
    /// one node 0). In a cluster, every registered broker (and this one, registered or not).
    pub fn brokers(&self, listener: usize) -> Vec<(i32, String, i32)> {
        self.brokers_with_racks(listener)
            .into_iter()
            .map(|(id, h, p, _)| (id, h, p))
            .collect()
    }

    /// `brokers`, each with its broker's `broker.rack` (Metadata, DescribeCluster).
    pub fn brokers_with_racks(&self, listener: usize) -> Vec<(i32, String, i32, Option<String>)> {
        let meta = self.metadata();
        let Some(here) = meta.local_broker else {
            let rack = &self.config.rack;
            return match self.core_endpoints.borrow().get(listener) {
                Some(e) => e
                    .iter()
                    .enumerate()
                    .map(|(c, (h, p))| (c as i32, h.clone(), *p, rack.clone()))
                    .collect(),
                None => {
                    let (h, p) = self
                        .advertised
                        .borrow()
                        .get(listener)
                        .cloned()
                        .unwrap_or_default();
                    vec![(0, h, p, rack.clone())]
                }
            };
        };
        let mut all = meta.brokers.clone();
        all.insert(here, self.broker_info());
        let mut out = Vec::new();
        for (b, info) in all {
            let Some(l) = info.listeners.get(listener).or(info.listeners.first()) else {
                continue;
            };
            if l.cores.is_empty() {
                let id = self.node_id(Some(b), 0, false);
                out.push((id, l.host.clone(), l.port, info.rack.clone()));
            } else {
                for (c, (h, p)) in l.cores.iter().enumerate() {
                    let id = self.node_id(Some(b), c, true);
                    out.push((id, h.clone(), *p, info.rack.clone()));
                }
            }
        }
        out
    }

    /// KIP-951's `NodeEndpoints`: (node id, host, port) on `listener` of the nodes named.
    pub fn endpoints_of(
        &self,
        listener: usize,
        nodes: &std::collections::BTreeSet<i32>,
    ) -> Vec<(i32, String, i32)> {
        self.brokers(listener)
            .into_iter()
            .filter(|(id, _, _)| nodes.contains(id))
            .collect()
    }

    /// Core 0: submits metadata records another core asked for (a partition leader).
    pub(super) async fn submit_for_core(
        self: &Rc<Self>,
        records: Vec<Record>,
    ) -> Result<(), String> {
        let node = self
            .controller()
            .ok_or("the metadata group is not running yet")?;
        node.submit(records, Duration::from_secs(10))
            .await
            .map(|_| ())
    }
}
