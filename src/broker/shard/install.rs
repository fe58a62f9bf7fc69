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
//! (`Shard::open_group`), so every crash point ends in the installed state.

use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

use raft::prelude::{Message, MessageType, Snapshot};
use raft::SnapshotStatus;
use tracing::{info, warn};
use weir_storage::Log;

use super::replication::Group;
use super::*;
use crate::broker::replica::side::SideLog;
use crate::broker::replica::snapshot;
use crate::broker::replica::state::{RaftState, SnapshotPoint};

impl Shard {
    /// A `Ready`'s snapshot, on a follower: installed before the `Ready`'s entries are
    /// written, and before it is reported persisted (`advance`), after which raft-rs reads
    /// its log as the storage now has it — empty after the point.
    pub(super) async fn install_snapshot(&self, g: &Group, snap: &Snapshot) -> Result<(), String> {
        let meta = snap.get_metadata();
        let point = SnapshotPoint {
            index: meta.index,
            term: meta.term,
            offset: snapshot::decode_data(&snap.data)?,
        };
        let wm = g.part.log.watermarks();
        info!(topic = %g.topic, partition = g.partition, index = point.index, term = point.term,
            offset = point.offset, log_start = wm.log_start_offset, log_end = wm.log_end_offset,
            "installing a Raft snapshot: behind the leader's log start, the log restarts there");
        let dir = g.dir.clone();
        weir_storage::io::off_reactor(move || snapshot::save_install_sync(&dir, point)).await?;
        let side = g.side.borrow_mut().take().ok_or("side log in use")?;
        let state = g.saved.borrow().clone();
        let (side, state) = install_on_disk(&g.part.log, &g.dir, side, state, point).await?;
        *g.side.borrow_mut() = Some(side);
        *g.saved.borrow_mut() = state;
        g.saved_at.set(Instant::now());
        g.store.apply_snapshot(point);
        g.next_offset.set(None);
        Ok(())
    }

    /// At a group's open: an install a crash interrupted (`snapshot_install` names `install`)
    /// is done again first, before the Raft log is read back.
    pub(super) async fn redo_install(
        &self,
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

    /// Sends a group's messages, noting the replicas any of them sends a snapshot to.
    pub(super) fn send_noting_snapshots(
        self: &Rc<Self>,
        g: &Group,
        msgs: Vec<Message>,
        to: &mut Vec<u64>,
    ) {
        to.extend(
            msgs.iter()
                .filter(|m| m.get_msg_type() == MessageType::MsgSnapshot)
                .map(|m| m.to),
        );
        self.send_raft(g, msgs);
    }

    /// On a leader, after a `Ready` whose messages carried snapshots: each counts as received
    /// at once (it is a few bytes of metadata, and the follower needs nothing else), so the
    /// follower is probed from the point on. A lost message costs one probe: the follower
    /// rejects it, and the leader finds the entries compacted and sends the snapshot again.
    /// (Left in raft-rs's snapshot state instead, the follower would wait for a report
    /// forever if the message was lost.)
    pub(super) fn report_snapshots(&self, g: &Group, to: Vec<u64>) {
        for id in to {
            info!(topic = %g.topic, partition = g.partition, follower = id,
                point = ?g.store.snapshot_point(), "sent a Raft snapshot to a follower behind the log start");
            g.raw
                .borrow_mut()
                .report_snapshot(id, SnapshotStatus::Finish);
            self.replica_work.notify();
        }
    }
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
