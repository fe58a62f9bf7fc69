//! A broker in a cluster (`controller.quorum.voters`): topic, user and ACL administration
//! through the metadata Raft group (core 0), applying its committed records, registering this broker's
//! endpoints, and the node ids clients are told about (the brokers: `leadership`).
//!
//! Standalone (no voters) nothing here changes a thing: `cluster_node` is `None`, node ids
//! are cores (or 0) and the brokers are this process's endpoints, as before.

use std::rc::Rc;
use std::time::Duration;

use tracing::{error, info, warn};
use weir::cluster::{apply, Batch, BrokerInfo, ListenerEndpoints, Outcome, Record, NODE_ID_STRIDE};
use weir::metadata::{Metadata, TopicMeta};

use super::*;
use crate::broker::cluster::Node;
use crate::broker::errors;

/// How long an admin request waits for its change to be committed and applied here.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// The ACLs each DeleteAcls filter deletes (an ACL goes to the first filter that matches it).
pub(super) fn acls_matching(
    meta: &Metadata,
    filters: &[weir::acl::AclFilter],
) -> Vec<Vec<weir::acl::AclBinding>> {
    let mut deleted = vec![Vec::new(); filters.len()];
    for b in &meta.acls {
        if let Some(i) = filters.iter().position(|f| f.matches(b)) {
            deleted[i].push(b.clone());
        }
    }
    deleted
}

/// The Kafka error of a record's outcome.
fn outcome_code(o: &Outcome) -> (i16, Option<String>) {
    match o {
        Outcome::Done | Outcome::Unchanged => (errors::NONE, None),
        Outcome::TopicExists => (errors::TOPIC_ALREADY_EXISTS, None),
        Outcome::UnknownTopic => (errors::UNKNOWN_TOPIC_OR_PARTITION, None),
        Outcome::NotFound => (
            errors::RESOURCE_NOT_FOUND,
            Some("Attempt to delete a user credential that does not exist".into()),
        ),
        Outcome::InvalidPartitions(m) => (errors::INVALID_PARTITIONS, Some(m.clone())),
        Outcome::InvalidReplicationFactor(m) => {
            (errors::INVALID_REPLICATION_FACTOR, Some(m.clone()))
        }
        Outcome::Invalid(m) => (errors::INVALID_REQUEST, Some(m.clone())),
    }
}

fn result(name: &str, partitions: i32) -> TopicResult {
    TopicResult {
        name: name.to_string(),
        error: errors::NONE,
        message: None,
        partitions,
    }
}

impl Shard {
    /// The metadata group's node, on core 0 of a broker in a cluster.
    pub fn cluster_node(&self) -> Option<Rc<Node>> {
        self.cluster.borrow().clone()
    }

    pub fn set_cluster_node(&self, node: Rc<Node>) {
        *self.cluster.borrow_mut() = Some(node);
    }

    /// Waits (a broker just started in a cluster) until its metadata caught up with the
    /// metadata leader's, so an answer from the metadata (Metadata, DescribeTopicPartitions,
    /// DescribeCluster, FindCoordinator) never names the leaders this broker saw before it
    /// went down (`cluster::catch_up`). The node gives up the wait itself
    /// after `cluster::CATCH_UP_WAIT`; the bound here only guards against a node that never
    /// started.
    pub async fn wait_metadata_current(&self) {
        use std::sync::atomic::Ordering::Acquire;
        // Long after start-up the flag is set: one load, no clone of its `Arc`.
        if self.metadata_current.borrow().load(Acquire) {
            return;
        }
        let flag = self.metadata_current.borrow().clone();
        let started = std::time::Instant::now();
        while !flag.load(Acquire) && started.elapsed() < crate::broker::cluster::CATCH_UP_WAIT * 2 {
            glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Submits the records of `results[slots[i]]` as one metadata entry and fills in each
    /// one's outcome (REQUEST_TIMED_OUT for all if it was not applied in time).
    async fn submit_records(
        &self,
        node: &Rc<Node>,
        records: Vec<Record>,
        slots: Vec<usize>,
        results: &mut [TopicResult],
    ) {
        if records.is_empty() {
            return;
        }
        match node.submit(records, ADMIN_TIMEOUT).await {
            Ok(outcomes) => {
                for (slot, o) in slots.into_iter().zip(outcomes) {
                    let (code, message) = outcome_code(&o);
                    results[slot].error = code;
                    if message.is_some() {
                        results[slot].message = message;
                    }
                }
            }
            Err(e) => {
                warn!(error = %e, "metadata change not applied");
                for slot in slots {
                    results[slot].error = errors::REQUEST_TIMED_OUT;
                    results[slot].message = Some(e.clone());
                }
            }
        }
    }

    pub(super) async fn cluster_create(
        &self,
        node: &Rc<Node>,
        topics: Vec<NewTopic>,
        validate_only: bool,
    ) -> Vec<TopicResult> {
        let meta = self.metadata();
        let (mut results, mut records, mut slots) = (Vec::new(), Vec::new(), Vec::new());
        for t in topics {
            let mut r = result(&t.name, self.partition_count(&t));
            match self.check_new_topic(&meta, &t) {
                Err((code, message)) => {
                    r.error = code;
                    r.message = Some(message);
                }
                Ok((count, rf, configs)) => {
                    // An explicit assignment is placed here; otherwise the metadata leader
                    // places the partitions (`Record::plan`).
                    let placed = match &t.assignments {
                        Some(a) => weir::cluster::place_assigned(&meta, a).map(Some),
                        None => Ok(None),
                    };
                    match placed {
                        Err(e) => {
                            r.error = errors::INVALID_REPLICA_ASSIGNMENT;
                            r.message = Some(e);
                        }
                        Ok(_) if validate_only => {}
                        Ok(placed) => {
                            let placed = placed.unwrap_or_default();
                            slots.push(results.len());
                            records.push(Record::CreateTopic {
                                name: t.name.clone(),
                                count: count as usize,
                                id: String::new(),
                                partitions: placed.iter().map(|r| r[0]).collect(),
                                configs,
                                replication_factor: rf,
                                replicas: if rf > 1 { placed } else { Vec::new() },
                            });
                        }
                    }
                }
            }
            results.push(r);
        }
        self.submit_records(node, records, slots, &mut results)
            .await;
        results
    }

    pub(super) async fn cluster_delete(
        &self,
        node: &Rc<Node>,
        names: Vec<String>,
    ) -> Vec<TopicResult> {
        let meta = self.metadata();
        let (mut results, mut records, mut slots) = (Vec::new(), Vec::new(), Vec::new());
        for name in names {
            let mut r = result(&name, 0);
            if meta.topics.contains_key(&name) {
                slots.push(results.len());
                records.push(Record::DeleteTopic { name });
            } else {
                r.error = errors::UNKNOWN_TOPIC_OR_PARTITION;
            }
            results.push(r);
        }
        self.submit_records(node, records, slots, &mut results)
            .await;
        results
    }

    pub(super) async fn cluster_alter_configs(
        &self,
        node: &Rc<Node>,
        changes: Vec<ConfigChange>,
        validate_only: bool,
    ) -> Vec<TopicResult> {
        let meta = self.metadata();
        let (mut results, mut records, mut slots) = (Vec::new(), Vec::new(), Vec::new());
        for c in changes {
            let mut r = result(&c.topic, 0);
            match meta.topics.get(&c.topic) {
                None => {
                    r.error = errors::UNKNOWN_TOPIC_OR_PARTITION;
                    r.message = Some(format!("unknown topic '{}'", c.topic));
                }
                Some(t) => match self.altered_configs(t, &c) {
                    Err(e) => {
                        r.error = errors::INVALID_CONFIG;
                        r.message = Some(e);
                    }
                    Ok(configs) if !validate_only && configs != t.configs => {
                        info!(topic = %c.topic, ?configs, "topic configs change proposed");
                        slots.push(results.len());
                        records.push(Record::AlterConfigs {
                            topic: c.topic.clone(),
                            replace_all: c.replace_all,
                            ops: c
                                .ops
                                .iter()
                                .map(|(k, v)| (k.clone(), v.as_ref().map(|v| v.trim().to_string())))
                                .collect(),
                        });
                    }
                    Ok(_) => {}
                },
            }
            results.push(r);
        }
        self.submit_records(node, records, slots, &mut results)
            .await;
        results
    }

    pub(super) async fn cluster_create_partitions(
        &self,
        node: &Rc<Node>,
        topics: Vec<NewPartitions>,
        validate_only: bool,
    ) -> Vec<TopicResult> {
        let meta = self.metadata();
        let (mut results, mut records, mut slots) = (Vec::new(), Vec::new(), Vec::new());
        for (i, t) in topics.iter().enumerate() {
            let mut r = result(&t.name, t.count);
            let current = meta.topics.get(&t.name).map(|m| m.owners.len());
            let fail = |code: i16, msg: String| (code, Some(msg));
            let (code, message) = if topics[..i].iter().any(|o| o.name == t.name) {
                fail(
                    errors::INVALID_REQUEST,
                    format!("topic '{}' is named twice", t.name),
                )
            } else if let Some(current) = current {
                let rf = meta.topics[&t.name]
                    .replicas
                    .first()
                    .map_or(1, |r| r.len().max(1));
                if t.count <= 0 || t.count as usize <= current || t.count > 100_000 {
                    fail(
                        errors::INVALID_PARTITIONS,
                        format!(
                            "topic '{}' has {current} partitions; the new count {} must be higher",
                            t.name, t.count
                        ),
                    )
                } else if let Err((code, why)) =
                    self.check_partition_room(&meta, (t.count as usize - current) * rf)
                {
                    fail(code, why)
                } else {
                    (errors::NONE, None)
                }
            } else {
                fail(
                    errors::UNKNOWN_TOPIC_OR_PARTITION,
                    format!("unknown topic '{}'", t.name),
                )
            };
            // An explicit assignment of the new partitions, placed here (otherwise by the
            // metadata leader): one list per new partition, of the topic's replica count.
            let placed = match (&t.assignments, current) {
                (Some(a), Some(current)) if code == errors::NONE => {
                    let rf = meta
                        .topics
                        .get(&t.name)
                        .map_or(1, Metadata::replication_factor);
                    if a.len() != t.count as usize - current {
                        Err(format!(
                            "{} assignments for {} new partitions",
                            a.len(),
                            t.count as usize - current
                        ))
                    } else if a.first().is_some_and(|l| l.len() != rf) {
                        Err(format!("the topic has {rf} replicas per partition"))
                    } else {
                        weir::cluster::place_assigned(&meta, a)
                    }
                }
                _ => Ok(Vec::new()),
            };
            let (code, message, placed) = match placed {
                Err(e) if code == errors::NONE => {
                    (errors::INVALID_REPLICA_ASSIGNMENT, Some(e), Vec::new())
                }
                Err(_) => (code, message, Vec::new()),
                Ok(placed) => (code, message, placed),
            };
            r.error = code;
            r.message = message;
            if code == errors::NONE && !validate_only {
                let rf = placed.first().map_or(0, Vec::len);
                slots.push(results.len());
                records.push(Record::CreatePartitions {
                    topic: t.name.clone(),
                    count: t.count as usize,
                    added: placed.iter().map(|r| r[0]).collect(),
                    added_replicas: if rf > 1 { placed } else { Vec::new() },
                });
            }
            results.push(r);
        }
        self.submit_records(node, records, slots, &mut results)
            .await;
        results
    }

    /// AlterUserScramCredentials in a cluster: one `AlterUser` record per change (checked in
    /// form by the connection's core), answered with each one's outcome.
    pub(super) async fn cluster_alter_users(
        &self,
        node: &Rc<Node>,
        changes: Vec<UserChange>,
    ) -> Vec<(String, i16, Option<String>)> {
        let users: Vec<String> = changes.iter().map(|c| c.user.clone()).collect();
        let records = changes
            .into_iter()
            .map(|c| Record::AlterUser {
                user: c.user,
                mechanism: c.mechanism.name().to_string(),
                credential: c.credential,
            })
            .collect();
        match node.submit(records, ADMIN_TIMEOUT).await {
            Ok(outcomes) => users
                .into_iter()
                .zip(outcomes)
                .map(|(u, o)| {
                    let (code, message) = outcome_code(&o);
                    (u, code, message)
                })
                .collect(),
            Err(e) => users
                .into_iter()
                .map(|u| (u, errors::REQUEST_TIMED_OUT, Some(e.clone())))
                .collect(),
        }
    }

    /// CreateAcls / DeleteAcls in a cluster: one record, committed and applied here.
    pub(super) async fn cluster_acls(&self, node: &Rc<Node>, record: Record) -> Result<(), String> {
        if matches!(&record, Record::DeleteAcls { acls } if acls.is_empty()) {
            return Ok(());
        }
        node.submit(vec![record], ADMIN_TIMEOUT).await.map(|_| ())
    }

    /// Core 0, in a cluster: applies committed metadata batches (the same way on every
    /// broker), saves the result with its Raft index, and applies it on every core. One
    /// outcome per record.
    pub async fn apply_cluster(
        self: &Rc<Self>,
        batches: Vec<(u64, Batch)>,
        last: u64,
    ) -> Vec<Vec<Outcome>> {
        // Serialized with any other writer of core 0's metadata (the single-broker admin
        // paths take the same lock). At shutdown the semaphore is closed: apply anyway.
        let _lock = self.admin_lock.acquire_permit(1).await;
        let before = self.metadata();
        let mut meta = (*before).clone();
        let mut outcomes = Vec::with_capacity(batches.len());
        let mut created = Vec::new();
        for (index, b) in &batches {
            let mut these = Vec::with_capacity(b.records.len());
            for r in &b.records {
                let o = apply(&mut meta, r);
                match (&o, r) {
                    (Outcome::Done, Record::CreateTopic { name, .. }) => {
                        info!(topic = %name, index, "topic created");
                        created.push(name.clone());
                    }
                    (Outcome::Done | Outcome::Unchanged, _) => {
                        info!(index, record = ?r, "metadata record applied")
                    }
                    _ => info!(index, record = ?r, outcome = ?o, "metadata record refused"),
                }
                these.push(o);
            }
            outcomes.push(these);
        }
        // A directory left behind by an earlier topic of that name must not become its data.
        for name in created.iter().filter(|n| !before.topics.contains_key(*n)) {
            self.remove_stale_dirs(name).await;
        }
        if self.shutdown.is_fired() {
            // The cores are closing their logs: not applied here now. The entries are
            // committed; the next start applies them (the file keeps the older index).
            info!(
                index = last,
                "shutting down: committed metadata left to apply at the next start"
            );
            return outcomes;
        }
        meta.applied_index = last;
        match self.commit_metadata_reporting(meta).await {
            Ok(failures) => {
                for f in failures {
                    warn!(topic = %f.topic, partition = f.partition, core = f.core, error = %f.error,
                        "a partition log of the cluster metadata cannot be opened here");
                }
            }
            Err(e) => {
                // Raft would consider these entries applied: going on would diverge.
                error!(error = %e, "cannot save the applied metadata: stopping the broker");
                eprintln!("weir: cannot save the applied metadata: {e}");
                std::process::exit(1);
            }
        }
        outcomes
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
