//! A follower behind its leader's log start catches up by installing a Raft snapshot
//! (docs/replication.md, "Installing a snapshot"): the leader's snapshot is its compaction
//! point (`ReplicaStorage::snapshot`), whose data names the offset its log continues at; the
//! follower restarts its log empty there (`Log::truncate_fully_and_start_at`), as a Kafka
//! follower does with `truncateFullyAndStartAt`, and the leader's entries follow.
//!
//! Crash ordering on the follower: `snapshot_install` names the point durably first; then the
//! log restarts, the side log is emptied, `raft_state` saved with the point (commit = its
//! index), and the file removed (durably: a redo after entries were appended past the point
//! would delete them). A group that opens with the file present does the same again first
//! (`Replica::open`), so every crash point ends in the installed state. A tiered
//! partition then takes the producer state and leader epochs of the remote segment ending at
//! the point, in a task of its own (`restore_from_remote`; not after a redo: its producers
//! start unknown).

use std::path::{Path, PathBuf};
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

use raft::prelude::{Message, MessageType, Snapshot};
use raft::SnapshotStatus;
use tracing::{info, warn};
use weir_storage::Log;

use super::side::SideLog;
use super::snapshot;
use super::state::{RaftState, SnapshotPoint};
use super::{Host, OwnsLog, Replica};

impl Replica {
    /// A `Ready`'s snapshot, on a follower: installed before the `Ready`'s entries are
    /// written, and before it is reported persisted (`advance`), after which raft-rs reads
    /// its log as the storage now has it — empty after the point.
    pub(super) async fn install_snapshot(
        &self,
        snap: &Snapshot,
        now: Instant,
    ) -> Result<(), String> {
        let meta = snap.get_metadata();
        let (offset, remote_manifest) = snapshot::decode_data(&snap.data)?;
        let point = SnapshotPoint {
            index: meta.index,
            term: meta.term,
            offset,
        };
        let wm = self.log().watermarks();
        info!(topic = %self.topic, partition = self.partition, index = point.index, term = point.term,
            offset = point.offset, log_start = wm.log_start_offset, log_end = wm.log_end_offset,
            "installing a Raft snapshot: behind the leader's log start, the log restarts there");
        if let Some(m) = remote_manifest {
            // The leader's remote segments, saved before anything else changes: they and
            // the uploads after the point (its next entries) are all the remote tier this
            // replica will know. Saved early is harmless: every segment listed is committed.
            self.log()
                .install_remote_manifest(m)
                .await
                .map_err(|e| format!("installing the leader's remote segment list: {e}"))?;
            self.store.set_remote_manifest(self.log().remote_manifest());
        }
        let dir = self.dir.clone();
        weir_storage::io::off_reactor(move || snapshot::save_install_sync(&dir, point)).await?;
        let side = self.side.borrow_mut().take().ok_or("side log in use")?;
        let state = self.saved.borrow().clone();
        let (side, state) = install_on_disk(self.log(), &self.dir, side, state, point).await?;
        *self.side.borrow_mut() = Some(side);
        *self.saved.borrow_mut() = state;
        self.saved_at.set(now);
        self.store.apply_snapshot(point);
        self.next_offset.set(None);
        if remote_manifest.is_some() {
            restore_from_remote(Rc::downgrade(&self.part), self.dir.clone(), point.offset);
        }
        Ok(())
    }

    /// Sends a group's messages, noting the replicas any of them sends a snapshot to.
    pub(super) fn send_noting_snapshots(
        &self,
        host: &dyn Host,
        msgs: Vec<Message>,
        to: &mut Vec<u64>,
    ) {
        to.extend(
            msgs.iter()
                .filter(|m| m.get_msg_type() == MessageType::MsgSnapshot)
                .map(|m| m.to),
        );
        host.send(self, msgs);
    }

    /// On a leader, after a `Ready` whose messages carried snapshots: each counts as received
    /// at once (it is a few bytes of metadata, and the follower needs nothing else), so the
    /// follower is probed from the point on. A lost message costs one probe: the follower
    /// rejects it, and the leader finds the entries compacted and sends the snapshot again.
    /// (Left in raft-rs's snapshot state instead, the follower would wait for a report
    /// forever if the message was lost.)
    pub(super) fn report_snapshots(&self, host: &dyn Host, to: Vec<u64>) {
        for id in to {
            info!(topic = %self.topic, partition = self.partition, follower = id,
                point = ?self.store.snapshot_point(), "sent a Raft snapshot to a follower behind the log start");
            self.raw
                .borrow_mut()
                .report_snapshot(id, SnapshotStatus::Finish);
            host.wake_driver();
        }
    }
}

/// A tiered partition's follower that installed a snapshot at `offset`: the producers' state
/// and the leader epochs as of there, from the remote segment that ends there (what the
/// leader knew when it rolled past it), taken in a task of their own — the core's Raft
/// driver never waits on the store — and retried while the store fails (1 s, 2 s, ... 32 s).
/// The batches applied meanwhile are replayed over the state (`Log::restore_from_remote`).
/// Without them the replica goes on as Kafka's does without a producer snapshot: its
/// producers unknown, its epochs those of the entries after the point.
fn restore_from_remote(part: Weak<dyn OwnsLog>, dir: PathBuf, offset: u64) {
    glommio::spawn_local(async move {
        let mut wait = Duration::from_secs(1);
        loop {
            let Some(p) = part.upgrade() else { return };
            let r = p.log().restore_from_remote(offset).await;
            drop(p);
            match r {
                Ok(Some(restored)) => {
                    info!(dir = %dir.display(), offset, producers = ?restored.producers,
                        leader_epochs = restored.leader_epochs,
                        "restored the producer state and leader epochs the remote tier holds at the snapshot point");
                    return;
                }
                Ok(None) => {
                    info!(dir = %dir.display(), offset,
                        "no remote segment ends at the snapshot point: producers start unknown");
                    return;
                }
                Err(e) if wait <= Duration::from_secs(32) && !matches!(e, weir_storage::Error::InvalidArgument(_)) => {
                    warn!(dir = %dir.display(), offset, error = %e, retry_in = ?wait,
                        "reading the producer state and leader epochs from the remote tier failed");
                    glommio::timer::sleep(wait).await;
                    wait *= 2;
                }
                Err(e) => {
                    warn!(dir = %dir.display(), offset, error = %e,
                        "could not restore the producer state and leader epochs from the remote tier; producers start unknown");
                    return;
                }
            }
        }
    })
    .detach();
}

/// At a group's open: an install a crash interrupted (`snapshot_install` names `install`)
/// is done again first, before the Raft log is read back.
pub(super) async fn redo_install(
    log: &Log,
    dir: &Path,
    side: SideLog,
    state: RaftState,
    install: Option<SnapshotPoint>,
) -> Result<(SideLog, RaftState), String> {
    let Some(point) = install else {
        return Ok((side, state));
    };
    warn!(dir = %dir.display(), ?point, "finishing a snapshot install a crash interrupted");
    install_on_disk(log, dir, side, state, point).await
}

/// The install once `snapshot_install` names `point` durably (and its redo when a group opens
/// with the file present): the log restarts empty at the point's offset, the side log is
/// emptied, `raft_state` saved with the point as snapshot and commit, and the file removed.
/// Returns the side log and the state saved.
pub(super) async fn install_on_disk(
    log: &Log,
    dir: &Path,
    side: SideLog,
    mut state: RaftState,
    point: SnapshotPoint,
) -> Result<(SideLog, RaftState), String> {
    log.truncate_fully_and_start_at(point.offset)
        .await
        .map_err(|e| format!("restarting the log at {}: {e}", point.offset))?;
    state.snapshot = point;
    state.commit = state.commit.max(point.index);
    state.term = state.term.max(point.term);
    let dir = dir.to_path_buf();
    weir_storage::io::off_reactor(move || {
        let mut side = side;
        side.truncate_sync(0)
            .map_err(|e| format!("emptying the side log: {e}"))?;
        state.save_sync(&dir)?;
        snapshot::remove_install_sync(&dir)?;
        Ok((side, state))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::group::offsets::run_on_disk;
    use crate::broker::replica::side::SideEntry;
    use crate::broker::replica::storage::ReplicaStorage;
    use bytes::Bytes;
    use weir_storage::batch::{assign_offset, RecordBatchBuilder};
    use weir_storage::LogConfig;

    fn config() -> LogConfig {
        LogConfig {
            committed_reads: true,
            ..LogConfig::default()
        }
    }

    /// A stored batch of 2 records at `base`, stamped with `epoch`.
    fn batch(base: u64, epoch: i32) -> Bytes {
        let mut b = RecordBatchBuilder::new(1_000);
        for i in 0..2 {
            b = b.record(None, Some(format!("record {base}-{i}").as_bytes()), &[]);
        }
        let mut bytes = b.build().to_vec();
        assign_offset(&mut bytes, base as i64, epoch);
        Bytes::from(bytes)
    }

    /// A follower killed at each point of an install (after `snapshot_install` was written:
    /// before it nothing changed) and reopened as a group opens: the redo ends in the one
    /// installed state — the log empty at the point's offset and taking the leader's next
    /// entry there, the side log empty, `raft_state` naming the point with commit = its index
    /// (term and vote kept), and no `snapshot_install` left.
    #[test]
    fn an_install_redone_after_a_crash_at_any_step_ends_in_the_installed_state() {
        let point = SnapshotPoint {
            index: 40,
            term: 3,
            offset: 500,
        };
        for crashed_after in 1..=3 {
            run_on_disk(move |dir| async move {
                // The follower before the install: 5 batches of term 1, the leader's empty
                // entry in the side log, committed to index 3.
                let log = Log::open(&dir, config()).await.expect("open");
                log.append_assigned(batch(0, 1)).await.expect("append");
                for i in 1..5 {
                    log.append_assigned(batch(2 * i, 1)).await.expect("append");
                }
                let mut side = SideLog::open_sync(&dir).expect("side");
                side.append_sync(SideEntry {
                    index: 1,
                    term: 1,
                    before_offset: 0,
                    context: Vec::new(),
                })
                .expect("side entry");
                let before = RaftState {
                    term: 5,
                    vote: 2,
                    commit: 3,
                    voters: vec![1, 2, 3],
                    ..Default::default()
                };
                before.save_sync(&dir).expect("state");
                // The install's steps up to the crash.
                snapshot::save_install_sync(&dir, point).expect("step 1");
                if crashed_after >= 2 {
                    log.truncate_fully_and_start_at(point.offset)
                        .await
                        .expect("step 2");
                }
                if crashed_after >= 3 {
                    side.truncate_sync(0).expect("step 3");
                    let mut s = before.clone();
                    s.snapshot = point;
                    s.commit = point.index;
                    s.save_sync(&dir).expect("step 3");
                }
                drop((log, side)); // kill -9: nothing closed

                // Reopened as `ReplicaHost::open` does.
                let log = Log::open(&dir, config()).await.expect("reopen");
                let side = SideLog::open_sync(&dir).expect("side");
                let state = RaftState::load_sync(&dir).expect("state").expect("saved");
                let install = snapshot::load_install_sync(&dir).expect("install file");
                assert_eq!(install, Some(point), "crashed after step {crashed_after}");
                let (side, state) = install_on_disk(&log, &dir, side, state, point)
                    .await
                    .expect("redo");
                let wm = log.watermarks();
                assert_eq!(
                    (wm.log_start_offset, wm.log_end_offset, wm.high_watermark),
                    (500, 500, 500),
                    "crashed after step {crashed_after}"
                );
                assert!(side.entries.is_empty());
                let expected = RaftState {
                    snapshot: point,
                    commit: point.index,
                    ..before
                };
                assert_eq!(state, expected);
                assert_eq!(RaftState::load_sync(&dir).expect("state"), Some(expected));
                assert_eq!(snapshot::load_install_sync(&dir).expect("file"), None);
                assert!(SideLog::open_sync(&dir).expect("side").entries.is_empty());
                let info = log
                    .append_assigned(batch(500, 4))
                    .await
                    .expect("the leader's next entry");
                assert_eq!(info.base_offset, 500);
            });
        }
    }

    /// The Raft log of a leader (broker 1, term 2 after `become_leader`) whose entries 1-4 are
    /// compacted (snapshot point: index 4, offset 6) and which holds 5 and its own empty 6.
    fn compacted_leader() -> (raft::RawNode<ReplicaStorage>, ReplicaStorage) {
        let mut entries = vec![raft::prelude::Entry {
            index: 1,
            term: 1,
            ..Default::default()
        }];
        for i in 2..=5u64 {
            entries.push(raft::prelude::Entry {
                index: i,
                term: 1,
                data: batch(2 * (i - 2), 1),
                ..Default::default()
            });
        }
        let store = ReplicaStorage::new(
            raft::prelude::HardState {
                term: 1,
                vote: 1,
                commit: 5,
                ..Default::default()
            },
            raft::prelude::ConfState::from((vec![1, 2, 3], vec![])),
            SnapshotPoint::default(),
            entries,
            5,
            1 << 20,
        )
        .expect("storage");
        let point = store.compaction_point(6).expect("a point");
        store.compact(point).expect("compact");
        let config = raft::Config {
            id: 1,
            election_tick: 10,
            heartbeat_tick: 2,
            applied: 5,
            ..Default::default()
        };
        let mut raw =
            raft::RawNode::new(&config, store.clone(), &crate::broker::raft::raft_logger())
                .expect("raw node");
        raw.raft.become_candidate();
        raw.raft.become_leader();
        drain(&mut raw, &store);
        (raw, store)
    }

    /// Handles the leader's `Ready`s as the driver does (entries into the storage); returns
    /// the messages it sent.
    fn drain(
        raw: &mut raft::RawNode<ReplicaStorage>,
        store: &ReplicaStorage,
    ) -> Vec<raft::prelude::Message> {
        let mut out = Vec::new();
        while raw.has_ready() {
            let mut rd = raw.ready();
            out.extend(rd.take_messages());
            store.append(&rd.take_entries()).expect("append");
            if let Some(hs) = rd.hs() {
                store.set_hard_state(hs.clone());
            }
            out.extend(rd.take_persisted_messages());
            let mut light = raw.advance(rd);
            out.extend(light.take_messages());
            raw.advance_apply();
        }
        out
    }

    fn from_2(kind: MessageType, index: u64, reject: bool) -> raft::prelude::Message {
        let mut m = raft::prelude::Message::default();
        m.set_msg_type(kind);
        m.from = 2;
        m.to = 1;
        m.term = 2;
        m.index = index;
        m.reject = reject;
        m.reject_hint = 2; // follower 2 holds entries up to index 2 only
        m
    }

    fn snapshots_to_2(msgs: &[raft::prelude::Message]) -> usize {
        msgs.iter()
            .filter(|m| m.to == 2 && m.get_msg_type() == MessageType::MsgSnapshot)
            .count()
    }

    /// Why the leader reports a snapshot received as soon as it is sent
    /// (`Shard::report_snapshots`): raft-rs keeps a follower it sent a snapshot to paused
    /// until an append response or a report arrives, so a lost `MsgSnapshot` stalls it for
    /// good; reported `Finish`, the next heartbeat response resumes probing, the follower's
    /// rejection finds the entries compacted, and the snapshot goes out again.
    #[test]
    fn a_lost_snapshot_is_sent_again_once_reported() {
        for report in [false, true] {
            let (mut raw, store) = compacted_leader();
            // Follower 2 rejects the append at index 5: it needs entries from 3, compacted.
            raw.step(from_2(MessageType::MsgAppendResponse, 5, true))
                .expect("step");
            let sent = drain(&mut raw, &store);
            assert_eq!(snapshots_to_2(&sent), 1, "a snapshot instead of entries");
            let snap = sent
                .iter()
                .find(|m| m.get_msg_type() == MessageType::MsgSnapshot)
                .expect("snapshot");
            assert_eq!(
                snapshot::decode_data(&snap.get_snapshot().data).unwrap(),
                (6, None)
            );
            // The message is lost.
            if report {
                raw.report_snapshot(2, SnapshotStatus::Finish);
            }
            raw.step(from_2(MessageType::MsgHeartbeatResponse, 0, false))
                .expect("step");
            let sent = drain(&mut raw, &store);
            let probes: Vec<u64> = sent
                .iter()
                .filter(|m| m.to == 2 && m.get_msg_type() == MessageType::MsgAppend)
                .map(|m| m.index)
                .collect();
            if !report {
                assert!(probes.is_empty(), "unreported, the follower stays paused");
                continue;
            }
            assert_eq!(probes, vec![4], "probed from the point on");
            raw.step(from_2(MessageType::MsgAppendResponse, 4, true))
                .expect("step");
            let sent = drain(&mut raw, &store);
            assert_eq!(snapshots_to_2(&sent), 1, "the snapshot is sent again");
        }
    }
}
