//! This broker as a member of a cluster (`controller.quorum.voters`): its metadata group's
//! node (core 0), its registration of its endpoints, and the node ids clients are told about
//! (the brokers: `leadership`). Admin changes go through `admin` (the same way standalone).
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
}
