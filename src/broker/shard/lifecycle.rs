//! Partition lifecycle: applying a metadata snapshot (opening the logs this core now owns,
//! retiring the ones it no longer does), tiering and retention, the group coordinator's logs,
//! and the orderly close at shutdown.

use std::cell::{Cell, RefCell};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};
use weir_storage::Log;

use super::*;
use crate::broker::group::{Coordinator, GroupConfig};
use crate::broker::replica::{Replica, ACKS_WAIT};
use weir::metadata::{partition_dir, Metadata};

impl Shard {
    /// Opens the logs this core now owns, closes and deletes the ones of deleted topics,
    /// updates configs, and installs the snapshot. Returns the logs that failed to open.
    pub async fn apply_metadata(self: &Rc<Self>, meta: Arc<Metadata>) -> Vec<OpenFailure> {
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
                    continue;
                }
                match self.open_partition(name, p, &t.id, config.clone()).await {
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
            if let Err(e) = self.open_replica(&name, p, voters).await {
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
    ) -> Result<(), weir_storage::Error> {
        let dir = partition_dir(&self.config.data_dir, topic, partition);
        let log = Log::open_with_cache(&dir, config, self.cache.clone()).await?;
        self.attach_remote(&log, topic, partition).await;
        let waiters: Waiters = Rc::new(RefCell::new(Vec::new()));
        let w = waiters.clone();
        log.on_append(move |_| wake_waiters(&w));
        debug!(core = self.id, topic, partition, "partition opened");
        self.partitions.borrow_mut().insert(
            (topic.to_string(), partition),
            Rc::new(Partition {
                topic_id: topic_id.to_string(),
                log,
                waiters,
                io_errors: Cell::new(0),
                bytes_in: Cell::new(0),
                records_in: Cell::new(0),
                bytes_out: Cell::new(0),
            }),
        );
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
    /// leader uploads and every replica lists what it uploaded (`Shard::tier_replica`).
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
                let now_ms = wall_clock_ms();
                if let Some(g) = self.replica(&topic, p) {
                    self.tier_replica(&g, now_ms).await;
                    glommio::yield_if_needed().await;
                    continue;
                }
                match part.log.tier_tick(now_ms).await {
                    Ok(0) => {}
                    Ok(n) => {
                        debug!(topic = %topic, partition = p, segments = n, "segments uploaded")
                    }
                    Err(e) => {
                        warn!(topic = %topic, partition = p, error = %e, "tiering failed; will retry")
                    }
                }
                if let Err(e) = part.log.enforce_retention(now_ms).await {
                    warn!(topic = %topic, partition = p, error = %e, "retention failed");
                }
                glommio::yield_if_needed().await;
            }
        }
    }

    // ---- Tiered storage on a replicated partition (docs/tiered-storage.md, "Replicated
    // partitions") ----
    // Tiered storage on a replicated partition (docs/tiered-storage.md, "Replicated
    // partitions"): only the leader uploads, and the list of remote segments travels in the
    // partition's Raft log, so every replica holds the same list and a new leader continues
    // where the old one stopped.
    //
    // The leader of term T, once it has applied an entry of its own term (then every entry an
    // earlier leader could still get committed is applied here):
    // 1. deletes the objects no manifest entry lists whose upload id carries an epoch below T
    //    (what an earlier leader's cut-short or never-committed upload left) — once per term;
    // 2. uploads the oldest closed segment that ends past the remote end under an id of epoch T
    //    (`Log::upload_next_segment`), proposes a `replica::remote` entry naming it and waits
    //    until it is committed and listed here (every replica lists it when it applies the entry:
    //    `Replica::list_remote`), then the next. Replicas cut their segments at different offsets:
    //    a new leader's first upload may begin inside the remote tier's last segment (the two
    //    overlap) or before it (the new one replaces the listed ones inside it, whose objects
    //    the leader then collects like orphans);
    // 3. moves the log start past the remote segments the whole log's retention deletes, as a
    //    committed log start move (`replica::log_start`, the DeleteRecords path): every replica
    //    forgets them, then deletes their objects (deleting an object twice is no error).
    //
    // Local retention runs on each replica as before (`Replica::compact`): a segment goes
    // only once the replica's own manifest lists it, i.e. once its upload is committed.
    //
    // Why a deposed leader cannot lose data: its uploads carry its own, older epoch, and an entry
    // it proposes after a newer leader was elected is never committed; the newer leader collects
    // only epochs below its own, after applying everything committed before its term. A deposed
    // leader collecting orphans itself deletes only epochs below its own, which the newer leader
    // never writes, and everything committed with such an epoch it had applied before it
    // collected.

    /// One tiering pass over a replicated partition (`run_tiering`): on its leader, the
    /// orphans, the uploads and the remote retention above; on every replica, local retention
    /// after it.
    pub(super) async fn tier_replica(&self, g: &Rc<Replica>, now_ms: i64) {
        if let Err(e) = self.lead_tiering(g, now_ms).await {
            warn!(topic = %g.topic, partition = g.partition, error = %e, "tiering failed; will retry");
        }
        // An uploaded segment past `local.retention.*` goes at once (the driver does it).
        g.retention_due.set(Some(now_ms));
        self.replica_work.notify();
    }

    async fn lead_tiering(&self, g: &Rc<Replica>, now_ms: i64) -> Result<(), String> {
        let term = g.term();
        if !g.is_leader() || g.failed.get() || g.transferring() || !g.applied_own_term() {
            return Ok(());
        }
        // Upload ids keep the epoch in 32 bits (leader epochs are i32 on the wire anyway).
        let epoch = u32::try_from(term).map_err(|_| format!("term {term} past 32 bits"))?;
        let log = g.log();
        if g.orphans_term.get() != term {
            let n = log
                .collect_remote_orphans(epoch)
                .await
                .map_err(|e| format!("collecting orphans: {e}"))?;
            if n > 0 {
                info!(topic = %g.topic, partition = g.partition, objects = n, term,
                    "deleted remote objects of earlier leaders that no entry lists");
            }
            g.orphans_term.set(term);
        }
        let mut covered = false;
        while g.is_leader() && g.term() == term && !self.shutdown.is_fired() {
            let end = log.latest_tiered_offset().map(|last| last + 1);
            let Some(seg) = log
                .upload_next_segment(epoch)
                .await
                .map_err(|e| format!("uploading: {e}"))?
            else {
                break;
            };
            let context = crate::broker::replica::remote::encode(&seg);
            let code = self.propose_command(g, term, context).await;
            if code != errors::NONE {
                // Uploaded again by the next pass (or the next leader); these objects are
                // orphans a later leader deletes.
                return Err(format!(
                    "the upload of the segment at {} was not committed (error {code})",
                    seg.base_offset
                ));
            }
            // The driver lists it right after the `Ready` that committed it.
            let deadline = Instant::now() + ACKS_WAIT;
            while log
                .latest_tiered_offset()
                .is_none_or(|last| last < seg.next_offset - 1)
            {
                if g.failed.get() || Instant::now() > deadline {
                    return Err(format!(
                        "the committed upload of the segment at {} was not listed",
                        seg.base_offset
                    ));
                }
                glommio::timer::sleep(Duration::from_millis(1)).await;
            }
            debug!(topic = %g.topic, partition = g.partition, base = seg.base_offset,
                next = seg.next_offset, bytes = seg.size, "segment uploaded and committed");
            // This replica cut its segments elsewhere than the leader before it: its segment
            // holding the remote end replaced the listed ones inside it.
            covered |= end.is_some_and(|end| seg.base_offset < end);
        }
        if covered {
            log.collect_remote_orphans(epoch)
                .await
                .map_err(|e| format!("collecting replaced segments: {e}"))?;
        }
        if let Some(cut) = log.remote_retention_point(now_ms) {
            let (code, start) = self.delete_records_replicated(g.clone(), cut as i64).await;
            if code != errors::NONE {
                return Err(format!("remote retention to {cut}: error {code}"));
            }
            debug!(topic = %g.topic, partition = g.partition, start, "remote retention moved the log start");
        }
        Ok(())
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
            for ((topic, p), part) in parts {
                if let Some(g) = self.replica(&topic, p) {
                    // The group's driver does it: the Raft snapshot point moves first.
                    g.retention_due.set(Some(now_ms));
                    self.replica_work.notify();
                    continue;
                }
                match part.log.enforce_retention(now_ms).await {
                    Ok(0) => {}
                    Ok(n) => {
                        info!(topic = %topic, partition = p, segments = n, "retention deleted segments")
                    }
                    Err(e) => warn!(topic = %topic, partition = p, error = %e, "retention failed"),
                }
                glommio::yield_if_needed().await;
            }
        }
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
            .replicas
            .borrow_mut()
            .remove(&(topic.to_string(), partition))
        {
            g.failed.set(true);
            g.fail_waiters(errors::NOT_LEADER_OR_FOLLOWER);
            self.rejoin.borrow().done(&g.rejoin);
        }
    }

    /// Flushes and closes every log of this core (writes the clean-shutdown markers).
    pub async fn close_all(&self) {
        let groups: Vec<(String, i32)> = self.replicas.borrow().keys().cloned().collect();
        for (t, p) in groups {
            self.close_replica(&t, p);
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
        // Failures are logged; those partitions answer with an error until the next start.
        self.apply_metadata(meta).await;
    }
}

pub fn data_dir_ok(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))
}

/// `Shard::remove_stale_dirs`' blocking part: `DATA_DIR/<prefix><digits>` directories.
pub(super) fn remove_stale_dirs(data_dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let is_partition_of_topic = name
            .strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
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
