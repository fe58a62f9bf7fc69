//! Partition lifecycle: applying a metadata snapshot (opening the logs this core now owns,
//! retiring the ones it no longer does), tiering and retention, the group and transaction
//! coordinators' logs, and the orderly close at shutdown.

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info, warn};
use weir_storage::Log;

use super::txn_stores::TxnCoordinator;
use super::*;
use crate::broker::group::offsets::BucketReplica;
use crate::broker::group::{Coordinator, GroupConfig};
use crate::broker::txn::{self, TxnStore};

use weir::metadata::{partition_dir, Metadata};

/// How long after a partition failed to open (its log, or its replica's Raft group) the core
/// tries again, doubling up to `REOPEN_MAX` while it keeps failing.
const REOPEN_FIRST: Duration = Duration::from_secs(1);
const REOPEN_MAX: Duration = Duration::from_secs(60);

impl Shard {
    /// Opens the logs this core now owns, closes and deletes the ones of deleted topics,
    /// updates configs, and installs the snapshot. Returns the logs that failed to open;
    /// they are tried again in the background (`reopen_failed`) until they open or the
    /// metadata no longer places them here. Once this core closes its logs (`close_all`)
    /// nothing is applied and nothing reported failed: the saved metadata is applied at the
    /// next start.
    pub async fn apply_metadata(self: &Rc<Self>, meta: Arc<Metadata>) -> Vec<OpenFailure> {
        let Ok(_turn) = self.apply_lock.acquire_permit(1).await else {
            return Vec::new();
        };
        let failures = self.apply_locked(meta).await;
        if !failures.is_empty() && !self.reopening.replace(true) {
            glommio::spawn_local(self.clone().reopen_failed()).detach();
        }
        failures
    }

    /// Tries the partitions that failed to open again, against the metadata applied last,
    /// until none is left (or the broker stops).
    async fn reopen_failed(self: Rc<Self>) {
        let mut wait = REOPEN_FIRST;
        let mut tries = 0u32;
        loop {
            futures_lite::future::or(glommio::timer::sleep(wait), self.shutdown.wait()).await;
            if self.shutdown.is_fired() {
                return;
            }
            tries += 1;
            let left = match self.apply_lock.acquire_permit(1).await {
                Ok(_turn) => self.apply_locked(self.metadata()).await.len(),
                Err(_) => return,
            };
            if left == 0 {
                info!(
                    core = self.id,
                    tries, "every partition that failed to open is open now"
                );
                self.reopening.set(false);
                return;
            }
            debug!(
                core = self.id,
                left, tries, "partitions still fail to open; trying again"
            );
            wait = (wait * 2).min(REOPEN_MAX);
        }
    }

    /// `apply_metadata`, with this core's turn to apply held.
    async fn apply_locked(self: &Rc<Self>, meta: Arc<Metadata>) -> Vec<OpenFailure> {
        let mut failures = Vec::new();
        // Deleted (or recreated) topics first, so a recreated topic gets a fresh directory.
        let stale: Vec<(String, i32)> = self
            .partitions
            .borrow()
            .iter()
            .filter(|((topic, p), part)| {
                meta.local_replica(topic, *p) != Some(self.id)
                    || meta.topics.get(topic).is_none_or(|t| t.id != part.topic_id)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in stale {
            self.close_replica(&key.0, key.1);
            let part = self.partitions.borrow_mut().remove(&key);
            if let Some(part) = part {
                let gone = meta
                    .topics
                    .get(&key.0)
                    .is_none_or(|t| t.id != part.topic_id);
                wake_waiters(&part.waiters);
                self.retire(part, gone).await;
            }
        }
        let mut new_groups = Vec::new();
        for (name, t) in &meta.topics {
            let mut config = self.config.log_config(&t.configs);
            // A replicated partition's readers stop at the Raft commit (§3.6).
            let replicated = meta.local_broker.is_some() && !t.replicas.is_empty();
            config.committed_reads = replicated;
            // Its batches are Raft entries: compaction keeps each one, emptied if need be.
            config.keep_every_batch = replicated;
            for p in 0..t.owners.len() as i32 {
                // `None` for a partition with no replica on this broker of a cluster.
                if meta.local_replica(name, p) != Some(self.id) {
                    continue;
                }
                if let Some(existing) = self.partition(name, p) {
                    existing.log.set_config(config.clone());
                    // Its replica failed to open before: tried again.
                    if replicated && existing.replica().is_none() {
                        let voters = t.replicas[p as usize].iter().map(|r| r.0).collect();
                        new_groups.push((name.clone(), p, voters));
                    }
                    continue;
                }
                match self
                    .open_partition(name, p, &t.id, config.clone(), replicated)
                    .await
                {
                    Ok(()) if replicated => {
                        let voters = t.replicas[p as usize].iter().map(|r| r.0).collect();
                        new_groups.push((name.clone(), p, voters));
                    }
                    Ok(()) => {}
                    Err(e) => {
                        warn!(topic = %name, partition = p, error = %e, "cannot open partition log");
                        failures.push(OpenFailure {
                            topic: name.clone(),
                            partition: p,
                            core: self.id,
                            error: e.to_string(),
                        });
                    }
                }
            }
        }
        self.install_metadata(meta);
        for (name, p, voters) in new_groups {
            if let Err(e) = self.replica_host.open(&name, p, voters).await {
                warn!(topic = %name, partition = p, error = %e, "cannot start the partition's Raft group");
                failures.push(OpenFailure {
                    topic: name,
                    partition: p,
                    core: self.id,
                    error: e,
                });
            }
        }
        failures
    }

    pub async fn open_partition(
        &self,
        topic: &str,
        partition: i32,
        topic_id: &str,
        config: weir_storage::LogConfig,
        replicated: bool,
    ) -> Result<(), weir_storage::Error> {
        let dir = partition_dir(&self.config.data_dir, topic, partition);
        let log = Log::open_with_cache(&dir, config, self.cache.clone()).await?;
        self.attach_remote(&log, topic, partition).await;
        let waiters: Waiters = Rc::new(RefCell::new(Vec::new()));
        let w = waiters.clone();
        log.on_append(move |_| wake_waiters(&w));
        debug!(core = self.id, topic, partition, "partition opened");
        let part = Partition::new(topic, partition, topic_id, log, replicated, waiters);
        self.partitions
            .borrow_mut()
            .insert((topic.to_string(), partition), Rc::new(part));
        Ok(())
    }

    /// Closes (or deletes, for a deleted topic) a log once no request holds it.
    pub(super) async fn retire(&self, mut part: Rc<Partition>, delete: bool) {
        for _ in 0..600 {
            match Rc::try_unwrap(part) {
                Ok(p) => {
                    let dir = p.log.dir().to_path_buf();
                    let res = if delete {
                        p.log.delete().await
                    } else {
                        p.log.close().await
                    };
                    if let Err(e) = res {
                        warn!(dir = %dir.display(), error = %e, "closing a retired log failed");
                    }
                    return;
                }
                Err(still_shared) => {
                    part = still_shared;
                    glommio::timer::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        warn!(dir = %part.log.dir().display(), "log still in use after 30 s; left open");
    }

    // ---- Tiered storage ----

    /// This core's partitions now, each looked up when its turn comes: a pass holds one
    /// partition at a time, so `retire` of another does not wait for the whole pass (a
    /// tiering pass may upload for minutes).
    fn partitions_now(&self) -> impl Iterator<Item = ((String, i32), Rc<Partition>)> + '_ {
        let keys: Vec<(String, i32)> = self.partitions.borrow().keys().cloned().collect();
        keys.into_iter()
            .filter_map(|(t, p)| self.partition(&t, p).map(|part| ((t, p), part)))
    }

    /// Attaches the S3 store to a log of a topic with `remote.storage.enable=true`. A store that cannot be reached leaves the log without its remote tier
    /// (its retention that of a topic without one) until a later tiering pass attaches it.
    async fn attach_remote(&self, log: &Log, topic: &str, partition: i32) {
        if !log.config().remote_storage || log.tier_stats().is_some() {
            return;
        }
        let (Some(store), Some(client)) = (
            crate::broker::tier::store(&self.config),
            crate::broker::tier::client(&self.config),
        ) else {
            return;
        };
        let prefix = client.partition_prefix(topic, partition);
        match log.attach_remote(store, prefix).await {
            Ok(_) => debug!(topic, partition, "remote tier attached"),
            Err(e) => {
                warn!(topic, partition, error = %e, "cannot attach the remote tier; will retry")
            }
        }
    }

    /// Every `remote.log.manager.task.interval.ms`: uploads the closed segments of this core's
    /// tiered partitions, applies their remote retention, then their local retention (so
    /// an uploaded segment past `local.retention.*` goes at once). A replicated partition's
    /// leader uploads and every replica lists what it uploaded (`Partition::tier`, `Replica::tier`).
    pub async fn run_tiering(self: Rc<Self>) {
        if self.config.remote_storage().is_none() {
            return;
        }
        let every = Duration::from_millis(self.config.remote_task_interval_ms);
        loop {
            futures_lite::future::or(glommio::timer::sleep(every), self.shutdown.wait()).await;
            if self.shutdown.is_fired() {
                return;
            }
            let parts = self.partitions_now();
            for ((topic, p), part) in parts {
                if !part.log.config().remote_storage {
                    continue;
                }
                self.attach_remote(&part.log, &topic, p).await;
                part.tier(&self.replica_host, wall_clock_ms()).await;
                glommio::yield_if_needed().await;
            }
        }
    }

    // ---- Retention and shutdown ----

    pub async fn run_retention(self: Rc<Self>) {
        let every = Duration::from_millis(self.config.retention_check_interval_ms);
        loop {
            futures_lite::future::or(glommio::timer::sleep(every), self.shutdown.wait()).await;
            if self.shutdown.is_fired() {
                return;
            }
            let now_ms = wall_clock_ms();
            let parts = self.partitions_now();
            for (_, part) in parts {
                part.retention(&self.replica_host, now_ms).await;
                glommio::yield_if_needed().await;
            }
        }
    }

    /// Opens the transaction logs of the buckets this core owns (standalone; in a cluster
    /// the buckets are the `__transaction_state` partitions, loaded when this core leads
    /// them) and starts the tick.
    pub async fn open_txns(self: &Rc<Self>) -> Result<(), String> {
        let mut stores = std::collections::HashMap::new();
        let replica: Option<Rc<dyn BucketReplica>> = if self.config.voters.is_empty() {
            for bucket in (0..txn::BUCKETS).filter(|b| b % self.cores == self.id) {
                let s = TxnStore::open(&self.config.data_dir, bucket, self.cache.clone())
                    .await
                    .map_err(|e| format!("opening transaction log {bucket}: {e}"))?;
                stores.insert(bucket, Rc::new(s));
            }
            None
        } else {
            Some(Rc::new(super::internal_topics::BucketReplicas {
                shard: Rc::downgrade(self),
                topic: txn::TXN_TOPIC,
            }))
        };
        let c = Rc::new(TxnCoordinator::new(Rc::downgrade(self), stores, replica));
        *self.txns.borrow_mut() = Some(c);
        let weak = Rc::downgrade(self);
        glommio::spawn_local(async move {
            loop {
                // Sleep first: right after start-up the other cores may still be opening
                // the logs the first tick's markers go to.
                glommio::timer::sleep(Duration::from_millis(1000)).await;
                let Some(shard) = weak.upgrade() else { break };
                if shard.shutdown.is_fired() {
                    break;
                }
                let Some(c) = shard.txns.borrow().clone() else {
                    break;
                };
                c.tick(&shard).await;
            }
        })
        .detach();
        Ok(())
    }

    pub(super) fn take_txns(&self) -> Option<Rc<TxnCoordinator>> {
        self.txns.borrow_mut().take()
    }

    /// Opens this core's group coordinator (its offsets logs) and drives its session and
    /// rebalance timers.
    pub async fn open_group_coordinator(self: &Rc<Self>) -> Result<(), String> {
        let c = Coordinator::open(
            &self.config.data_dir,
            self.id,
            self.cores,
            self.cache.clone(),
            GroupConfig::default(),
            crate::broker::group::consumer::ConsumerConfig {
                session_timeout: Duration::from_millis(self.config.consumer_session_timeout_ms),
                heartbeat_interval: Duration::from_millis(
                    self.config.consumer_heartbeat_interval_ms,
                ),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| format!("opening the group offsets: {e}"))?;
        if !self.config.voters.is_empty() {
            // In a cluster the buckets are the partitions of `__consumer_offsets`.
            c.set_replica(Rc::new(super::internal_topics::BucketReplicas {
                shard: Rc::downgrade(self),
                topic: crate::broker::group::offsets::OFFSETS_TOPIC,
            }));
        }
        let c = Rc::new(c);
        *self.groups.borrow_mut() = Some(c.clone());
        let weak = Rc::downgrade(&c);
        glommio::spawn_local(async move {
            while let Some(c) = weak.upgrade() {
                c.tick();
                drop(c);
                glommio::timer::sleep(Duration::from_millis(100)).await;
            }
        })
        .detach();
        Ok(())
    }

    /// Stops a replica (its partition is retired or the broker shuts down): its waiting
    /// produces get NOT_LEADER_OR_FOLLOWER.
    pub(super) fn close_replica(&self, topic: &str, partition: i32) {
        if let Some(g) = self
            .partition(topic, partition)
            .and_then(|p| p.take_replica())
        {
            self.replica_host.close(&g);
        }
    }

    /// Flushes and closes every log of this core (writes the clean-shutdown markers). A
    /// metadata change being applied here (and on core 0, an admin change being made)
    /// finishes first, waited for up to `CLOSE_WAIT` (one waiting on a core that already
    /// exited would never finish); none is applied after (`apply_lock` and `admin_lock` are
    /// closed: a standalone admin request then gets an error, a committed cluster record is
    /// applied at the next start).
    pub async fn close_all(&self) {
        const CLOSE_WAIT: Duration = Duration::from_secs(5);
        for (lock, what) in [(&self.admin_lock, "admin"), (&self.apply_lock, "metadata")] {
            let turn =
                futures_lite::future::or(async { Some(lock.acquire_permit(1).await) }, async {
                    glommio::timer::sleep(CLOSE_WAIT).await;
                    None
                })
                .await;
            if turn.is_none() {
                warn!(
                    core = self.id,
                    what, "a change still under way at shutdown: closing the logs anyway"
                );
            }
            lock.close();
            drop(turn);
        }
        for g in self.replicas_now() {
            self.close_replica(&g.topic, g.partition);
        }
        if let Some(t) = self.take_txns() {
            match Rc::try_unwrap(t) {
                Ok(t) => t.close().await,
                Err(_) => warn!(
                    core = self.id,
                    "transaction coordinator still in use at shutdown"
                ),
            }
        }
        let groups = self.groups.borrow_mut().take();
        if let Some(c) = groups {
            match Rc::try_unwrap(c) {
                Ok(c) => c.close().await,
                Err(_) => warn!(core = self.id, "group coordinator still in use at shutdown"),
            }
        }
        let parts: Vec<Rc<Partition>> = self
            .partitions
            .borrow_mut()
            .drain()
            .map(|(_, v)| v)
            .collect();
        let mut closed = 0;
        for part in parts {
            wake_waiters(&part.waiters);
            let dir = part.log.dir().to_path_buf();
            match Rc::try_unwrap(part) {
                Ok(p) => match p.log.close().await {
                    Ok(()) => closed += 1,
                    Err(e) => warn!(dir = %dir.display(), error = %e, "close failed"),
                },
                Err(p) => {
                    if let Err(e) = p.log.flush().await {
                        warn!(dir = %dir.display(), error = %e, "flush at shutdown failed");
                    }
                    warn!(dir = %dir.display(), "log still in use at shutdown: flushed, not closed");
                }
            }
        }
        info!(core = self.id, logs = closed, "logs closed");
    }

    /// Opens the logs this core owns at start.
    pub async fn open_owned(self: &Rc<Self>) {
        let meta = self.metadata();
        // Failures are logged; those partitions answer with an error until they open
        // (`reopen_failed`).
        self.apply_metadata(meta).await;
    }
}

pub fn data_dir_ok(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))
}

/// `Shard::remove_stale_dirs`' blocking part: the `DATA_DIR/<topic>-<p>` directories with
/// `p >= from`.
pub(super) fn remove_stale_dirs(data_dir: &Path, topic: &str, from: usize) {
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return;
    };
    let prefix = format!("{topic}-");
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let is_partition_of_topic = name.strip_prefix(&prefix).is_some_and(|n| {
            !n.is_empty()
                && n.bytes().all(|b| b.is_ascii_digit())
                && n.parse::<usize>().map_or(true, |p| p >= from)
        });
        if is_partition_of_topic && e.path().is_dir() {
            warn!(dir = %e.path().display(), "removing a stale log of a deleted topic");
            if let Err(err) = std::fs::remove_dir_all(e.path()) {
                warn!(dir = %e.path().display(), error = %err, "cannot remove stale log");
            }
        }
    }
}

/// Milliseconds since the Unix epoch (0 if the clock is before it): the "now" retention and
/// the cleaner compare record timestamps with.
pub(super) fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
