//! Topic and user administration on core 0 (under the admin lock): create and delete topics,
//! add partitions, alter topic configs, store SASL users' credentials; each change is saved (`Metadata::save`) and then applied
//! on every core (`Req::Apply`) before it is answered.

use std::rc::Rc;
use std::sync::Arc;

use tracing::{info, warn};

use super::*;
use crate::broker::errors::{self};
use weir::cluster::Record;
use weir::metadata::{new_topic_id, Metadata, TopicMeta};

impl Shard {
    // ---- Metadata changes (core 0) ----

    pub(super) async fn admin_create(
        self: &Rc<Self>,
        topics: Vec<NewTopic>,
        validate_only: bool,
    ) -> Vec<TopicResult> {
        if let Some(node) = self.cluster_node() {
            return self.cluster_create(&node, topics, validate_only).await;
        }
        let Ok(_lock) = self.admin_lock.acquire_permit(1).await else {
            return Vec::new();
        };
        let mut meta = (*self.metadata()).clone();
        let mut results = Vec::new();
        let mut changed = false;
        for t in topics {
            let mut r = TopicResult {
                name: t.name.clone(),
                error: errors::NONE,
                message: None,
                partitions: t.partitions,
            };
            let checked = self.check_new_topic(&meta, &t);
            r.partitions = self.partition_count(&t);
            if let Err((code, message)) = checked {
                r.error = code;
                r.message = Some(message);
            } else if let (Ok((count, _, configs)), false) = (checked, validate_only) {
                // A crash between a DeleteTopics (metadata saved) and the owner deleting the
                // log can leave a directory behind: a new topic of that name starts empty.
                self.remove_stale_dirs(&t.name).await;
                let owners = meta.place_new(count as usize);
                meta.topics.insert(
                    t.name.clone(),
                    TopicMeta {
                        id: new_topic_id(),
                        owners,
                        configs,
                        brokers: Vec::new(),
                        replicas: Vec::new(),
                        leader_epochs: Vec::new(),
                        isr: Vec::new(),
                    },
                );
                changed = true;
                info!(topic = %t.name, partitions = count, "topic created");
            }
            results.push(r);
        }
        if changed {
            match self.commit_metadata_reporting(meta).await {
                Err(e) => fail_unsaved(&mut results, &e),
                Ok(failures) => self.undo_failed_creates(&mut results, failures).await,
            }
        }
        results
    }

    /// A created topic some of whose logs could not be opened (a file in the way, EIO, out of
    /// file descriptors) is not half-created: the creation is reported failed, with the cause,
    /// and the topic is removed again, so that a retry starts from nothing.
    pub(super) async fn undo_failed_creates(
        self: &Rc<Self>,
        results: &mut [TopicResult],
        failures: Vec<OpenFailure>,
    ) {
        let mut meta = (*self.metadata()).clone();
        let mut undo = false;
        for r in results.iter_mut().filter(|r| r.error == errors::NONE) {
            let Some(f) = failures.iter().find(|f| f.topic == r.name) else {
                continue;
            };
            warn!(topic = %r.name, partition = f.partition, core = f.core, error = %f.error,
                "topic creation failed: a partition log cannot be opened; removing the topic");
            r.error = errors::KAFKA_STORAGE_ERROR;
            r.message = Some(format!(
                "cannot create the log of partition {}: {}",
                f.partition, f.error
            ));
            undo |= meta.topics.remove(&r.name).is_some();
        }
        if undo {
            if let Err(e) = self.commit_metadata(meta).await {
                warn!(error = %e, "removing a topic whose creation failed");
            }
        }
    }

    /// CreatePartitions: grows topics to `count` partitions. The new partitions are placed on
    /// the least loaded cores (or, with `listeners.per.core`, on the node an assignment names),
    /// saved in the metadata, and opened by their owners before the answer. Kafka's errors:
    /// an unknown topic, a count that does not grow, a bad assignment.
    pub(super) async fn admin_create_partitions(
        self: &Rc<Self>,
        topics: Vec<NewPartitions>,
        validate_only: bool,
    ) -> Vec<TopicResult> {
        if let Some(node) = self.cluster_node() {
            return self
                .cluster_create_partitions(&node, topics, validate_only)
                .await;
        }
        let Ok(_lock) = self.admin_lock.acquire_permit(1).await else {
            return Vec::new();
        };
        let mut meta = (*self.metadata()).clone();
        let per_core = !self.core_endpoints.borrow().is_empty();
        let mut results = Vec::new();
        let mut grown: Vec<(String, usize, usize)> = Vec::new(); // (topic, old, new)
        for (i, t) in topics.iter().enumerate() {
            let mut r = TopicResult {
                name: t.name.clone(),
                error: errors::NONE,
                message: None,
                partitions: t.count,
            };
            let current = meta.topics.get(&t.name).map(|m| m.owners.len());
            let fail = |r: &mut TopicResult, code: i16, msg: String| {
                r.error = code;
                r.message = Some(msg);
            };
            if topics[..i].iter().any(|o| o.name == t.name) {
                fail(
                    &mut r,
                    errors::INVALID_REQUEST,
                    format!("topic '{}' is named twice", t.name),
                );
            } else if let Some(current) = current {
                let new = t.count.max(0) as usize;
                if t.count <= 0 || new <= current {
                    fail(
                        &mut r,
                        errors::INVALID_PARTITIONS,
                        format!(
                            "topic '{}' has {current} partitions; the new count {} must be higher",
                            t.name, t.count
                        ),
                    );
                } else if new > 100_000 {
                    fail(
                        &mut r,
                        errors::INVALID_PARTITIONS,
                        format!("invalid partition count {new}"),
                    );
                } else if let Err((code, why)) = self.check_partition_room(&meta, new - current) {
                    fail(&mut r, code, why);
                } else {
                    let mut owners = meta.place_new(new - current);
                    if let Some(a) = &t.assignments {
                        if a.len() != new - current {
                            fail(
                                &mut r,
                                errors::INVALID_REPLICA_ASSIGNMENT,
                                format!(
                                    "{} assignments for {} new partitions",
                                    a.len(),
                                    new - current
                                ),
                            );
                        }
                        for (j, brokers) in a.iter().enumerate().take(owners.len()) {
                            let node = match brokers.as_slice() {
                                [n] => *n,
                                _ => {
                                    fail(
                                        &mut r,
                                        errors::INVALID_REPLICA_ASSIGNMENT,
                                        format!(
                                            "partition {}: {} replicas; a single broker has 1",
                                            current + j,
                                            brokers.len()
                                        ),
                                    );
                                    break;
                                }
                            };
                            let nodes = if per_core { self.cores } else { 1 };
                            if node < 0 || node as usize >= nodes {
                                fail(
                                    &mut r,
                                    errors::INVALID_REPLICA_ASSIGNMENT,
                                    format!("partition {}: unknown broker {node}", current + j),
                                );
                                break;
                            }
                            if per_core {
                                owners[j] = node as usize;
                            }
                        }
                    }
                    if r.error == errors::NONE && !validate_only {
                        if let Some(m) = meta.topics.get_mut(&t.name) {
                            m.owners.extend(owners);
                        }
                        grown.push((t.name.clone(), current, new));
                        info!(topic = %t.name, from = current, to = new, "partitions added");
                    }
                }
            } else {
                fail(
                    &mut r,
                    errors::UNKNOWN_TOPIC_OR_PARTITION,
                    format!("unknown topic '{}'", t.name),
                );
            }
            results.push(r);
        }
        if grown.is_empty() {
            return results;
        }
        // A directory left at a new partition's name (a crash in an earlier life of the
        // topic) must not become the new partition's data.
        let (dir, stale) = (
            self.config.data_dir.clone(),
            grown
                .iter()
                .flat_map(|(t, old, new)| (*old..*new).map(move |p| format!("{t}-{p}")))
                .collect::<Vec<_>>(),
        );
        weir_storage::io::off_reactor(move || {
            for name in stale {
                let path = dir.join(name);
                if path.is_dir() {
                    warn!(dir = %path.display(), "removing a stale log in the way of a new partition");
                    let _ = std::fs::remove_dir_all(&path);
                }
            }
        })
        .await;
        match self.commit_metadata_reporting(meta).await {
            Err(e) => fail_unsaved(&mut results, &e),
            Ok(failures) if !failures.is_empty() => {
                // Not half-grown: the topic goes back to its old partitions.
                let mut meta = (*self.metadata()).clone();
                for r in results.iter_mut().filter(|r| r.error == errors::NONE) {
                    let Some(f) = failures.iter().find(|f| f.topic == r.name) else {
                        continue;
                    };
                    warn!(topic = %r.name, partition = f.partition, error = %f.error,
                        "adding partitions failed: a log cannot be opened; undoing");
                    r.error = errors::KAFKA_STORAGE_ERROR;
                    r.message = Some(format!(
                        "cannot create the log of partition {}: {}",
                        f.partition, f.error
                    ));
                    if let (Some(m), Some((_, old, _))) = (
                        meta.topics.get_mut(&r.name),
                        grown.iter().find(|g| g.0 == r.name),
                    ) {
                        m.owners.truncate(*old);
                    }
                }
                if let Err(e) = self.commit_metadata(meta).await {
                    warn!(error = %e, "undoing partitions whose creation failed");
                }
            }
            Ok(_) => {}
        }
        results
    }

    pub(super) async fn admin_delete(self: &Rc<Self>, names: Vec<String>) -> Vec<TopicResult> {
        if let Some(node) = self.cluster_node() {
            return self.cluster_delete(&node, names).await;
        }
        let Ok(_lock) = self.admin_lock.acquire_permit(1).await else {
            return Vec::new();
        };
        let mut meta = (*self.metadata()).clone();
        let mut results = Vec::new();
        let mut changed = false;
        for name in names {
            let mut r = TopicResult {
                name: name.clone(),
                error: errors::NONE,
                message: None,
                partitions: 0,
            };
            if meta.topics.remove(&name).is_some() {
                changed = true;
                info!(topic = %name, "topic deleted");
            } else {
                r.error = errors::UNKNOWN_TOPIC_OR_PARTITION;
            }
            results.push(r);
        }
        if changed {
            if let Err(e) = self.commit_metadata(meta).await {
                fail_unsaved(&mut results, &e);
            }
        }
        results
    }

    /// Changes topics' config overrides: validated like CreateTopics' configs, saved in the
    /// metadata, and applied to the open logs by every core (`apply_metadata`).
    pub(super) async fn admin_alter_configs(
        self: &Rc<Self>,
        changes: Vec<ConfigChange>,
        validate_only: bool,
    ) -> Vec<TopicResult> {
        if let Some(node) = self.cluster_node() {
            return self
                .cluster_alter_configs(&node, changes, validate_only)
                .await;
        }
        let Ok(_lock) = self.admin_lock.acquire_permit(1).await else {
            return Vec::new();
        };
        let mut meta = (*self.metadata()).clone();
        let mut results = Vec::new();
        let mut changed = false;
        for c in changes {
            let mut r = TopicResult {
                name: c.topic.clone(),
                error: errors::NONE,
                message: None,
                partitions: 0,
            };
            let Some(t) = meta.topics.get_mut(&c.topic) else {
                r.error = errors::UNKNOWN_TOPIC_OR_PARTITION;
                r.message = Some(format!("unknown topic '{}'", c.topic));
                results.push(r);
                continue;
            };
            let configs = match self.altered_configs(t, &c) {
                Ok(configs) => configs,
                Err(e) => {
                    r.error = errors::INVALID_CONFIG;
                    r.message = Some(e);
                    results.push(r);
                    continue;
                }
            };
            if !validate_only && configs != t.configs {
                info!(topic = %c.topic, ?configs, "topic configs changed");
                t.configs = configs;
                changed = true;
            }
            results.push(r);
        }
        if changed {
            if let Err(e) = self.commit_metadata(meta).await {
                fail_unsaved(&mut results, &e);
            }
        }
        results
    }

    /// Stores or deletes SASL users' SCRAM credentials (checked in form by the connection's
    /// core): saved in the metadata and applied by every core before the answer.
    pub(super) async fn admin_alter_users(
        self: &Rc<Self>,
        changes: Vec<UserChange>,
    ) -> Vec<(String, i16, Option<String>)> {
        if let Some(node) = self.cluster_node() {
            return self.cluster_alter_users(&node, changes).await;
        }
        let Ok(_lock) = self.admin_lock.acquire_permit(1).await else {
            return Vec::new();
        };
        let mut meta = (*self.metadata()).clone();
        let mut results = Vec::new();
        for c in changes {
            let mech = c.mechanism.name().to_string();
            match c.credential {
                Some(cred) => {
                    info!(user = %c.user, mechanism = %mech, "SCRAM credential stored");
                    meta.users
                        .entry(c.user.clone())
                        .or_default()
                        .insert(mech, cred);
                    results.push((c.user, errors::NONE, None));
                }
                None => {
                    let creds = meta.users.get_mut(&c.user);
                    if creds.and_then(|m| m.remove(&mech)).is_none() {
                        results.push((
                            c.user,
                            errors::RESOURCE_NOT_FOUND,
                            Some("Attempt to delete a user credential that does not exist".into()),
                        ));
                        continue;
                    }
                    if meta.users.get(&c.user).is_some_and(|m| m.is_empty()) {
                        meta.users.remove(&c.user);
                    }
                    info!(user = %c.user, mechanism = %mech, "SCRAM credential deleted");
                    results.push((c.user, errors::NONE, None));
                }
            }
        }
        if results.iter().any(|r| r.1 == errors::NONE) {
            if let Err(e) = self.commit_metadata(meta).await {
                for r in results.iter_mut().filter(|r| r.1 == errors::NONE) {
                    r.1 = errors::KAFKA_STORAGE_ERROR;
                    r.2 = Some(e.clone());
                }
            }
        }
        results
    }

    /// Adds ACLs (already checked in form): kept sorted and without duplicates, saved in the
    /// metadata and applied by every core before the answer.
    pub(super) async fn admin_create_acls(
        self: &Rc<Self>,
        acls: Vec<weir::acl::AclBinding>,
    ) -> Result<(), String> {
        if let Some(node) = self.cluster_node() {
            return self.cluster_acls(&node, Record::CreateAcls { acls }).await;
        }
        let Ok(_lock) = self.admin_lock.acquire_permit(1).await else {
            return Err("shutting down".into());
        };
        let mut meta = (*self.metadata()).clone();
        let before = meta.acls.len();
        meta.acls.extend(acls);
        meta.acls.sort();
        meta.acls.dedup();
        if meta.acls.len() == before {
            return Ok(()); // all of them were there already
        }
        info!(
            added = meta.acls.len() - before,
            total = meta.acls.len(),
            "ACLs created"
        );
        self.commit_metadata(meta).await
    }

    /// Deletes the ACLs each filter matches (an ACL goes to the first filter that matches it).
    pub(super) async fn admin_delete_acls(
        self: &Rc<Self>,
        filters: Vec<weir::acl::AclFilter>,
    ) -> Result<Vec<Vec<weir::acl::AclBinding>>, String> {
        if let Some(node) = self.cluster_node() {
            let deleted = super::cluster_admin::acls_matching(&self.metadata(), &filters);
            let acls = deleted.iter().flatten().cloned().collect();
            self.cluster_acls(&node, Record::DeleteAcls { acls })
                .await?;
            return Ok(deleted);
        }
        let Ok(_lock) = self.admin_lock.acquire_permit(1).await else {
            return Err("shutting down".into());
        };
        let mut meta = (*self.metadata()).clone();
        let mut deleted = vec![Vec::new(); filters.len()];
        meta.acls
            .retain(|b| match filters.iter().position(|f| f.matches(b)) {
                Some(i) => {
                    deleted[i].push(b.clone());
                    false
                }
                None => true,
            });
        let n: usize = deleted.iter().map(Vec::len).sum();
        if n > 0 {
            info!(deleted = n, total = meta.acls.len(), "ACLs deleted");
            self.commit_metadata(meta).await?;
        }
        Ok(deleted)
    }

    /// Removes `topic-N` directories of a topic that is not in the metadata (on the blocking
    /// pool: a deleted topic's logs can be large).
    pub(super) async fn remove_stale_dirs(&self, topic: &str) {
        let (prefix, dir) = (format!("{topic}-"), self.config.data_dir.clone());
        weir_storage::io::off_reactor(move || super::lifecycle::remove_stale_dirs(&dir, &prefix))
            .await
    }

    /// Writes the new metadata durably, then makes every core apply it (this one first).
    pub(super) async fn commit_metadata(self: &Rc<Self>, meta: Metadata) -> Result<(), String> {
        self.commit_metadata_reporting(meta).await.map(|_| ())
    }

    /// `commit_metadata`, returning the partition logs that could not be opened.
    pub(super) async fn commit_metadata_reporting(
        self: &Rc<Self>,
        mut meta: Metadata,
    ) -> Result<Vec<OpenFailure>, String> {
        meta.epoch += 1;
        // Buffered write + two fsyncs: on the blocking pool, so that core 0's partitions keep
        // being served meanwhile.
        let meta = Arc::new(meta);
        let (saved, dir) = (meta.clone(), self.config.data_dir.clone());
        weir_storage::io::off_reactor(move || saved.save(&dir)).await?;
        let mut failures = self.apply_metadata(meta.clone()).await;
        for core in 0..self.cores {
            if core != self.id {
                // Boxed: `call` → `handle` → `admin_*` → here is a recursive async cycle.
                if let Resp::Applied(f) = Box::pin(self.call(core, Req::Apply(meta.clone()))).await
                {
                    failures.extend(f);
                }
            }
        }
        Ok(failures)
    }
}
