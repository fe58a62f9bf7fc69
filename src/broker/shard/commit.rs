//! Core 0 applies metadata records (`cluster::Record`) and commits the result: saved
//! (`Metadata::save`), then applied by every core (`Req::Apply`) before anyone is answered.
//! The records come from the metadata Raft group in a cluster (`apply_cluster`, every broker
//! the same way) and straight from an admin request on a standalone broker
//! (`apply_standalone`); both apply them with `cluster::apply`, under the admin lock.

use std::rc::Rc;
use std::sync::Arc;

use tracing::{error, info, warn};
use weir::cluster::{apply, Batch, Outcome, Record};
use weir::metadata::Metadata;

use super::*;

impl Shard {
    /// Core 0, in a cluster: applies committed metadata batches (the same way on every
    /// broker), saves the result with its Raft index, and applies it on every core. One
    /// outcome per record.
    pub async fn apply_cluster(
        self: &Rc<Self>,
        batches: Vec<(u64, Batch)>,
        last: u64,
    ) -> Vec<Vec<Outcome>> {
        // Serialized with any other writer of core 0's metadata; closed once this core
        // closes its logs (`close_all`).
        let lock = self.admin_lock.acquire_permit(1).await;
        let before = self.metadata();
        let mut meta = (*before).clone();
        let outcomes: Vec<Vec<Outcome>> = batches
            .iter()
            .map(|(index, b)| apply_logged(&mut meta, &b.records, *index))
            .collect();
        if lock.is_err() || self.shutdown.is_fired() {
            // The cores are closing their logs: not applied here now (nor a deleted topic's
            // directory removed). The entries are committed; the next start applies them
            // (the file keeps the older index).
            info!(
                index = last,
                "shutting down: committed metadata left to apply at the next start"
            );
            return outcomes;
        }
        self.remove_stale_dirs(&before, &meta).await;
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

    /// Core 0, standalone: places the records' new partitions on this broker's cores
    /// (`Record::plan_standalone`), applies them, and commits the result. New partitions past
    /// `max.partitions` are refused here, under the lock (`Outcome::PolicyViolation`: the
    /// requests' own checks ran on a snapshot, and two requests can race). A change that
    /// cannot be saved, or a created topic or partition whose log cannot be opened, is undone
    /// and answered `Outcome::StorageError` with the cause (not half-created: a retry starts
    /// from nothing). An error: shutting down.
    pub(super) async fn apply_standalone(
        self: &Rc<Self>,
        mut records: Vec<Record>,
    ) -> Result<Vec<Outcome>, String> {
        let Ok(_lock) = self.admin_lock.acquire_permit(1).await else {
            return Err("shutting down".into());
        };
        let before = self.metadata();
        let mut meta = (*before).clone();
        let mut outcomes = Vec::with_capacity(records.len());
        for r in &mut records {
            if let Err((_, why)) = self.room_for(&meta, r) {
                info!(record = ?r, "metadata record refused: {why}");
                outcomes.push(Outcome::PolicyViolation(why));
                continue;
            }
            r.plan_standalone(&meta);
            outcomes.extend(apply_logged(&mut meta, std::slice::from_ref(r), 0));
        }
        if !outcomes.contains(&Outcome::Done) {
            return Ok(outcomes);
        }
        self.remove_stale_dirs(&before, &meta).await;
        let failures = match self.commit_metadata_reporting(meta).await {
            Ok(failures) => failures,
            Err(e) => {
                for o in outcomes.iter_mut().filter(|o| **o == Outcome::Done) {
                    *o = Outcome::StorageError(e.clone());
                }
                return Ok(outcomes);
            }
        };
        if failures.is_empty() {
            return Ok(outcomes);
        }
        // Each topic created or grown with a log that cannot be opened goes back to what it
        // was before.
        let mut meta = (*self.metadata()).clone();
        let mut undone = false;
        for (r, o) in records.iter().zip(outcomes.iter_mut()) {
            let topic = match r {
                Record::CreateTopic { name, .. } if *o == Outcome::Done => name,
                Record::CreatePartitions { topic, .. } if *o == Outcome::Done => topic,
                _ => continue,
            };
            let Some(f) = failures.iter().find(|f| f.topic == *topic) else {
                continue;
            };
            warn!(topic = %topic, partition = f.partition, core = f.core, error = %f.error,
                "a partition log cannot be opened: undoing the topic's creation or growth");
            *o = Outcome::StorageError(format!(
                "cannot create the log of partition {}: {}",
                f.partition, f.error
            ));
            match before.topics.get(topic) {
                Some(t) => meta.topics.insert(topic.clone(), t.clone()),
                None => meta.topics.remove(topic),
            };
            undone = true;
        }
        // (A partition of an older topic that cannot be opened is reported too: nothing of
        // this change to undo for it.)
        if !undone {
            return Ok(outcomes);
        }
        if let Err(e) = self.commit_metadata(meta).await {
            warn!(error = %e, "undoing a change whose logs cannot be opened");
        }
        Ok(outcomes)
    }

    /// `max.partitions` for the partitions record `r` adds to `meta` (standalone: one
    /// replica each).
    fn room_for(&self, meta: &Metadata, r: &Record) -> Result<(), (i16, String)> {
        let adding = match r {
            Record::CreateTopic { count, .. } => *count,
            Record::CreatePartitions { topic, count, .. } => {
                count.saturating_sub(meta.topics.get(topic).map_or(0, |t| t.owners.len()))
            }
            _ => return Ok(()),
        };
        super::checks::check_partition_room(&self.config, meta, 0, adding)
    }

    /// Removes the directories a change is about to give to new partitions (left by an
    /// earlier topic of that name, deleted before a crash let its owner remove them): they
    /// must not become the new partitions' data. On the blocking pool: they can be large.
    async fn remove_stale_dirs(&self, before: &Metadata, after: &Metadata) {
        let new: Vec<(String, usize)> = after
            .topics
            .iter()
            .filter_map(|(name, t)| match before.topics.get(name) {
                None => Some((name.clone(), 0)),
                Some(old) if old.id == t.id && old.owners.len() < t.owners.len() => {
                    Some((name.clone(), old.owners.len()))
                }
                Some(_) => None,
            })
            .collect();
        if new.is_empty() {
            return;
        }
        let dir = self.config.data_dir.clone();
        weir_storage::io::off_reactor(move || {
            for (topic, from) in new {
                super::lifecycle::remove_stale_dirs(&dir, &topic, from);
            }
        })
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
                // Boxed: `ask` → `handle` → `admin_*` → here is a recursive async cycle.
                if let Some(f) = Box::pin(self.ask(core, ApplyCall(meta.clone()))).await {
                    failures.extend(f);
                }
            }
        }
        Ok(failures)
    }
}

/// Applies `records` (of metadata entry `index`; 0 standalone) to `meta`, logging each (a
/// SCRAM credential's `Debug` shows its iteration count only).
fn apply_logged(meta: &mut Metadata, records: &[Record], index: u64) -> Vec<Outcome> {
    records
        .iter()
        .map(|r| {
            let o = apply(meta, r);
            match (&o, r) {
                (Outcome::Done, Record::CreateTopic { name, count, .. }) => {
                    info!(topic = %name, partitions = count, index, "topic created")
                }
                (Outcome::Done, Record::DeleteTopic { name }) => {
                    info!(topic = %name, index, "topic deleted")
                }
                (Outcome::Done, Record::CreatePartitions { topic, count, .. }) => {
                    info!(topic = %topic, to = count, index, "partitions added")
                }
                (Outcome::Done | Outcome::Unchanged, _) => {
                    info!(index, record = ?r, "metadata record applied")
                }
                _ => info!(index, record = ?r, outcome = ?o, "metadata record refused"),
            }
            o
        })
        .collect()
}
