//! Topic, user and ACL administration on core 0: each request is checked against the current
//! metadata (`checks`), turned into `cluster::Record`s and submitted — to the metadata Raft
//! group in a cluster, to this broker's own metadata on a standalone one (`apply`) — and
//! answered with each record's outcome. Both go through the same `Record::apply`, so a topic is
//! created, grown, reconfigured or deleted by the same code whether the broker is alone or
//! not; only where new partitions go (`Record::plan` / `plan_standalone`) and what an answer
//! waits for differ.

use std::rc::Rc;
use std::time::Duration;

use tracing::{info, warn};
use weir::cluster::{Outcome, Placement, Record, STANDALONE};
use weir::metadata::Metadata;

use super::checks;
use super::*;
use crate::broker::errors;

/// How long an admin request waits for its change to be committed and applied here.
pub(super) const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// The ACLs each DeleteAcls filter deletes (an ACL goes to the first filter that matches it).
fn acls_matching(
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
        Outcome::StorageError(m) => (errors::KAFKA_STORAGE_ERROR, Some(m.clone())),
        Outcome::PolicyViolation(m) => (errors::POLICY_VIOLATION, Some(m.clone())),
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
    /// Submits records and waits until they are applied here: through the metadata group in
    /// a cluster (an error: not committed and applied within `ADMIN_TIMEOUT`), or straight
    /// to this broker's metadata (an error: shutting down).
    async fn submit(self: &Rc<Self>, records: Vec<Record>) -> Result<Vec<Outcome>, String> {
        match self.controller() {
            Some(node) => node.submit(records, ADMIN_TIMEOUT).await,
            // A broker of a cluster whose metadata node is not started yet (its first moments)
            // changes nothing outside the metadata group.
            None if self.metadata().local_broker.is_some() => {
                Err("the metadata group has not started yet".into())
            }
            None => self.apply_standalone(records).await,
        }
    }

    /// Submits the records of `results[slots[i]]` as one change and fills in each one's
    /// outcome (REQUEST_TIMED_OUT for all if it was not applied).
    async fn submit_for(
        self: &Rc<Self>,
        records: Vec<Record>,
        slots: Vec<usize>,
        results: &mut [TopicResult],
    ) {
        if records.is_empty() {
            return;
        }
        match self.submit(records).await {
            Ok(outcomes) => {
                for (slot, o) in slots.into_iter().zip(outcomes) {
                    let r = &mut results[slot];
                    let (code, message) = outcome_code(&o);
                    r.error = code;
                    if message.is_some() {
                        r.message = message;
                    } else if o == Outcome::TopicExists {
                        // Named twice in the request, or created meanwhile by another.
                        r.message = Some(format!("topic '{}' already exists", r.name));
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

    pub(super) async fn admin_create(
        self: &Rc<Self>,
        topics: Vec<NewTopic>,
        validate_only: bool,
    ) -> Vec<TopicResult> {
        let meta = self.metadata();
        let cluster = meta.local_broker.is_some();
        let (mut results, mut records, mut slots) = (Vec::new(), Vec::new(), Vec::new());
        // The partition replicas of the topics taken so far (`max.partitions`).
        let mut earlier = 0;
        for t in topics {
            let mut r = result(&t.name, checks::partition_count(&self.config, &t));
            match checks::check_new_topic(&self.config, &meta, earlier, &t) {
                Err((code, message)) => {
                    r.error = code;
                    r.message = Some(message);
                }
                Ok((count, rf, configs)) => {
                    earlier += count as usize * rf;
                    // An explicit assignment is placed here in a cluster; otherwise the
                    // metadata leader (or this broker, standalone) places the partitions.
                    let placed = match &t.assignments {
                        Some(a) if cluster => weir::cluster::place_assigned(&meta, a),
                        _ => Ok(Vec::new()),
                    };
                    match placed {
                        Err(e) => {
                            r.error = errors::INVALID_REPLICA_ASSIGNMENT;
                            r.message = Some(e);
                        }
                        Ok(_) if validate_only => {}
                        Ok(placed) => {
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
        self.submit_for(records, slots, &mut results).await;
        results
    }

    pub(super) async fn admin_delete(self: &Rc<Self>, names: Vec<String>) -> Vec<TopicResult> {
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
        self.submit_for(records, slots, &mut results).await;
        results
    }

    /// Changes topics' config overrides: validated like CreateTopics' configs, then applied
    /// to the metadata and by every core to its open logs.
    pub(super) async fn admin_alter_configs(
        self: &Rc<Self>,
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
                Some(t) => match checks::altered_configs(&self.config, t, &c) {
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
        self.submit_for(records, slots, &mut results).await;
        results
    }

    /// CreatePartitions: grows topics to `count` partitions. The new partitions are placed
    /// like a new topic's (or where an explicit assignment says), saved in the metadata, and
    /// opened by their owners before the answer. Kafka's errors: an unknown topic, a count
    /// that does not grow, a bad assignment.
    pub(super) async fn admin_create_partitions(
        self: &Rc<Self>,
        topics: Vec<NewPartitions>,
        validate_only: bool,
    ) -> Vec<TopicResult> {
        let meta = self.metadata();
        let (mut results, mut records, mut slots) = (Vec::new(), Vec::new(), Vec::new());
        let mut earlier = 0; // partition replicas added by the topics taken so far
        for (i, t) in topics.iter().enumerate() {
            let mut r = result(&t.name, t.count);
            let current = meta.topics.get(&t.name).map(|m| m.owners.len());
            // The partition replicas this growth adds (none for a count that does not grow).
            let adding = meta.topics.get(&t.name).map_or(0, |m| {
                (t.count.max(0) as usize).saturating_sub(m.owners.len())
                    * Metadata::replication_factor(m)
            });
            let fail = |code: i16, msg: String| (code, Some(msg));
            let (code, message) = if topics[..i].iter().any(|o| o.name == t.name) {
                fail(
                    errors::INVALID_REQUEST,
                    format!("topic '{}' is named twice", t.name),
                )
            } else if let Some(current) = current {
                if t.count <= 0 || t.count as usize <= current {
                    fail(
                        errors::INVALID_PARTITIONS,
                        format!(
                            "topic '{}' has {current} partitions; the new count {} must be higher",
                            t.name, t.count
                        ),
                    )
                } else if t.count as usize > Metadata::MAX_PARTITIONS {
                    fail(
                        errors::INVALID_PARTITIONS,
                        format!("invalid partition count {}", t.count),
                    )
                } else if let Err((code, why)) =
                    checks::check_partition_room(&self.config, &meta, earlier, adding)
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
            let placed = match (&t.assignments, current) {
                (Some(a), Some(current)) if code == errors::NONE => {
                    self.place_assignment(&meta, &t.name, a, t.count as usize - current)
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
            if code == errors::NONE {
                earlier += adding;
            }
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
        self.submit_for(records, slots, &mut results).await;
        results
    }

    /// An explicit assignment of `new` partitions of `topic`: one list of node ids per new
    /// partition, of the topic's replica count. In a cluster the node ids name registered
    /// brokers' cores; on a standalone broker a single node, a core with `listeners.per.core`
    /// (else node 0, and the broker spreads the partitions over its cores itself: `Ok(vec![])`).
    fn place_assignment(
        &self,
        meta: &Metadata,
        topic: &str,
        a: &[Vec<i32>],
        new: usize,
    ) -> Result<Vec<Vec<Placement>>, String> {
        if a.len() != new {
            return Err(format!("{} assignments for {new} new partitions", a.len()));
        }
        if meta.local_broker.is_some() {
            let rf = meta
                .topics
                .get(topic)
                .map_or(1, Metadata::replication_factor);
            if a.first().is_some_and(|l| l.len() != rf) {
                return Err(format!("the topic has {rf} replicas per partition"));
            }
            return weir::cluster::place_assigned(meta, a);
        }
        let current = meta.topics.get(topic).map_or(0, |t| t.owners.len());
        let per_core = !self.core_endpoints.borrow().is_empty();
        let nodes = if per_core { self.cores } else { 1 };
        let mut placed = Vec::with_capacity(new);
        for (j, brokers) in a.iter().enumerate() {
            let node = match brokers.as_slice() {
                [n] => *n,
                _ => {
                    return Err(format!(
                        "partition {}: {} replicas; a single broker has 1",
                        current + j,
                        brokers.len()
                    ))
                }
            };
            if node < 0 || node as usize >= nodes {
                return Err(format!("partition {}: unknown broker {node}", current + j));
            }
            placed.push(vec![Placement {
                broker: STANDALONE,
                core: node as usize,
            }]);
        }
        Ok(if per_core { placed } else { Vec::new() })
    }

    /// AlterUserScramCredentials: one `AlterUser` record per change (checked in form by the
    /// connection's core), answered with each one's outcome.
    pub(super) async fn admin_alter_users(
        self: &Rc<Self>,
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
        match self.submit(records).await {
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

    /// Adds ACLs (already checked in form): kept sorted and without duplicates.
    pub(super) async fn admin_create_acls(
        self: &Rc<Self>,
        acls: Vec<weir::acl::AclBinding>,
    ) -> Result<(), String> {
        self.acl_change(Record::CreateAcls { acls }).await
    }

    /// Deletes the ACLs each filter matches (an ACL goes to the first filter that matches it).
    pub(super) async fn admin_delete_acls(
        self: &Rc<Self>,
        filters: Vec<weir::acl::AclFilter>,
    ) -> Result<Vec<Vec<weir::acl::AclBinding>>, String> {
        let deleted = acls_matching(&self.metadata(), &filters);
        let acls = deleted.iter().flatten().cloned().collect();
        self.acl_change(Record::DeleteAcls { acls }).await?;
        Ok(deleted)
    }

    async fn acl_change(self: &Rc<Self>, record: Record) -> Result<(), String> {
        if matches!(&record, Record::DeleteAcls { acls } if acls.is_empty()) {
            return Ok(());
        }
        match self.submit(vec![record]).await?.pop() {
            Some(Outcome::StorageError(e)) => Err(e),
            _ => Ok(()),
        }
    }
}
