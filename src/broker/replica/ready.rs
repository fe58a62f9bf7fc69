//! A replica's Raft work between ticks: the messages that arrived stepped and the queued
//! proposals proposed (`step_and_propose`), then its `Ready` handled (`handle_ready`): the
//! entries written — batches appended to the segment files (`Log::append_assigned`), Raft-only
//! entries to the side log, a conflicting suffix cut from both first (docs/replication.md
//! §3.2, §3.5; the ordering that makes each crash safe is in §3.5) — and
//! fdatasync'ed before any message that depends on them leaves; term and vote saved before the
//! messages that depend on them; the committed entries applied.

use std::rc::Rc;

use raft::prelude::{Entry, MessageType};
use raft::StateRole;
use tracing::{debug, info, warn};

use super::side::{SideEntry, SideLog};
use super::{rebuild, reintroduced, Bug, Host, Proposal, Replica, COMMIT_SAVE_EVERY};
use crate::broker::errors;

impl Replica {
    /// One round of the replica's work between ticks, as its driver runs it: step what arrived,
    /// propose what was queued, read back what a lagging follower needs, handle the `Ready`,
    /// then list committed uploads, apply retention and committed cuts. An error means the
    /// replica's files cannot be written or disagree with what it was sent.
    pub(crate) async fn round(self: &Rc<Self>, host: &dyn Host) -> Result<(), String> {
        self.step_and_propose(host);
        self.serve_fetches().await?;
        if self.raw.borrow().has_ready() {
            self.handle_ready(host).await?;
        }
        // Uploads are listed before retention runs: local retention deletes only below the
        // remote end, and the snapshot point moves past an upload's entry only once it is.
        let mut upkept = false;
        if !self.remote_due.borrow().is_empty() {
            self.list_remote().await?;
            upkept = true;
        }
        if let Some(now_ms) = self.retention_due.take() {
            self.compact(now_ms).await?;
            upkept = true;
        }
        if let Some(offset) = self.cut_due.take() {
            self.cut(offset).await?;
            upkept = true;
        }
        if upkept {
            // A leader waiting for its committed command to be carried out looks again.
            self.handled.notify();
        }
        Ok(())
    }

    /// Steps the messages that arrived and proposes the batches and commands queued.
    pub(crate) fn step_and_propose(&self, host: &dyn Host) {
        let msgs = std::mem::take(&mut *self.inbox.borrow_mut());
        for mut m in msgs {
            if self.declines(host, &mut m) {
                continue;
            }
            let quiet = !Replica::wakes_on(&m);
            let (from, term) = (m.from, m.term);
            let marked = m.get_msg_type() == MessageType::MsgHeartbeat && quiet;
            if !quiet {
                self.wake();
            }
            let stepped = self.raw.borrow_mut().step(m);
            match stepped {
                Err(e) => {
                    debug!(topic = %self.topic, partition = self.partition, error = %e, "stepping a Raft message")
                }
                Ok(()) if marked && host.hibernate() => self.after_quiet_heartbeat(from, term),
                Ok(()) => {}
            }
        }
        self.check_rejoined(host);
        let props = std::mem::take(&mut *self.proposals.borrow_mut());
        if !props.is_empty() {
            self.wake();
        }
        for Proposal {
            context,
            data,
            term,
            slot,
        } in props
        {
            let mut raw = self.raw.borrow_mut();
            if raw.raft.state != StateRole::Leader || raw.raft.term != term {
                slot.set(Err(errors::NOT_LEADER_OR_FOLLOWER));
                self.next_offset.set(None);
                self.dropped_at.set(Some(host.now()));
                continue;
            }
            match raw.propose(context, data) {
                Ok(()) => slot.set(Ok(raw.raft.raft_log.last_index())),
                Err(e) => {
                    debug!(topic = %self.topic, partition = self.partition, error = %e, "proposal dropped");
                    slot.set(Err(errors::NOT_LEADER_OR_FOLLOWER));
                    self.next_offset.set(None);
                    self.dropped_at.set(Some(host.now()));
                }
            }
        }
    }

    /// Handles the group's `Ready`: messages out, a snapshot installed, entries written and
    /// flushed before anything that depends on them leaves, term and vote saved, committed
    /// entries applied.
    pub(crate) async fn handle_ready(self: &Rc<Self>, host: &dyn Host) -> Result<(), String> {
        let mut rd = self.raw.borrow_mut().ready();
        if let Some(ss) = rd.ss() {
            let (leader, role) = (ss.leader_id, ss.raft_state);
            if leader != self.leader.get() || role != StateRole::Leader {
                // Any change of leader: proposals and offsets of the old term are void.
                self.next_offset.set(None);
                if role != StateRole::Leader {
                    self.fail_waiters(errors::NOT_LEADER_OR_FOLLOWER);
                }
            }
            if leader != self.leader.get() {
                info!(topic = %self.topic, partition = self.partition, leader, term = self.term(),
                    "partition leader changed");
                if role == StateRole::Leader {
                    host.became_leader(self);
                }
            }
            self.leader.set(leader);
        }
        let mut snapshots_sent = Vec::new();
        self.send_noting_snapshots(host, rd.take_messages(), &mut snapshots_sent);
        if !rd.snapshot().is_empty() {
            self.install_snapshot(rd.snapshot(), host.now()).await?;
        }
        let mut committed = rd.take_committed_entries();
        self.persist_entries(rd.take_entries()).await?;
        let sync = rd.must_sync() || !rd.persisted_messages().is_empty();
        if sync && !reintroduced(Bug::AckBeforeFlush) {
            // Entries written above are fdatasync'ed before any follower acknowledges them
            // (replica.flush=sync, the design's default) and before a saved commit covers
            // them.
            self.log()
                .flush()
                .await
                .map_err(|e| format!("flush: {e}"))?;
        }
        if let Some(hs) = rd.hs().cloned() {
            let must_save = {
                let s = self.saved.borrow();
                hs.term != s.term || hs.vote != s.vote
            };
            if must_save {
                let mut next = self.saved.borrow().clone();
                next.term = hs.term;
                next.vote = hs.vote;
                next.commit = hs.commit.max(next.snapshot.index);
                next.save(&self.dir).await?;
                *self.saved.borrow_mut() = next;
            }
            self.store.set_hard_state(hs);
        }
        self.send_noting_snapshots(host, rd.take_persisted_messages(), &mut snapshots_sent);
        let mut light = self.raw.borrow_mut().advance(rd);
        self.send_noting_snapshots(host, light.take_messages(), &mut snapshots_sent);
        committed.extend(light.take_committed_entries());
        self.raw.borrow_mut().advance_apply();
        self.report_snapshots(host, snapshots_sent);
        self.note_cuts(&committed);
        self.after_ready(host, committed.last().map(|e| e.index));
        self.handled.notify();
        // The commit is saved now and then: a restart then keeps only the entries after it
        // in memory (everything after the saved commit must stay cached until applied).
        let commit = self.raw.borrow().raft.raft_log.committed;
        let now = host.now();
        if commit > self.saved.borrow().commit
            && now.saturating_duration_since(self.saved_at.get()) >= COMMIT_SAVE_EVERY
        {
            let mut next = self.saved.borrow().clone();
            next.commit = commit;
            next.save(&self.dir).await?;
            *self.saved.borrow_mut() = next;
            self.saved_at.set(now);
        }
        Ok(())
    }

    /// After a `Ready`: the committed offset moves to the end of the last committed entry;
    /// produces whose entry is written (acks=1) or committed (acks=-1) are answered; a
    /// leader reports itself and its in-sync replicas to the metadata group.
    fn after_ready(self: &Rc<Self>, host: &dyn Host, committed: Option<u64>) {
        let commit = self.raw.borrow().raft.raft_log.committed;
        if committed.is_some() || commit > self.store.snapshot_point().index {
            let end = self.store.end_of(commit);
            let end = end.min(self.log().watermarks().log_end_offset);
            if let Err(e) = self.log().set_committed(end) {
                warn!(topic = %self.topic, partition = self.partition, error = %e, "set_committed");
            }
        }
        self.store
            .set_applied(self.raw.borrow().raft.raft_log.applied);
        self.settle_waiters();
        host.report(self);
    }

    /// Writes a `Ready`'s entries: cuts a conflicting suffix first (`truncate_to` and the
    /// side log), then appends each entry — batches with `append_assigned`, empty entries
    /// to the side log — and records where each ends.
    pub(super) async fn persist_entries(&self, entries: Vec<Entry>) -> Result<(), String> {
        let Some(first) = entries.first().map(|e| e.index) else {
            return Ok(());
        };
        if first <= self.store.last() && !reintroduced(Bug::NoSuffixCut) {
            let offset = self.store.start_of(first);
            info!(topic = %self.topic, partition = self.partition, index = first, offset,
                "replacing a suffix of the Raft log a new leader does not have");
            self.log()
                .truncate_to(offset)
                .await
                .map_err(|e| format!("truncating to {offset}: {e}"))?;
            self.side_op(move |s| s.truncate_sync(first)).await?;
            self.next_offset.set(None);
        }
        let mut at = self.store.start_of(first);
        let mut unflushed = false;
        // Consecutive batches are appended in one `append_assigned` (one write, not one
        // write awaited per entry: a follower's MsgAppend holds up to 1 MiB of entries).
        let mut run: Vec<&Entry> = Vec::new();
        for e in &entries {
            if e.data.is_empty() {
                self.append_run(&mut run).await?;
                if unflushed && !reintroduced(Bug::SideLogCrashOrder) {
                    // The side entry names the offset it follows: the batches before it must
                    // not be lost in a power loss that keeps it.
                    self.log()
                        .flush()
                        .await
                        .map_err(|e| format!("flush: {e}"))?;
                    unflushed = false;
                }
                let side = SideEntry {
                    index: e.index,
                    term: e.term,
                    before_offset: at,
                    context: e.context.to_vec(),
                };
                self.side_op(move |s| s.append_sync(side)).await?;
            } else {
                let (_, end) = rebuild::check_data_entry(e, at)?;
                run.push(e);
                at = end;
                unflushed = true;
            }
        }
        self.append_run(&mut run).await?;
        self.store.append(&entries)
    }

    /// Appends a run of checked, consecutive data entries with one `append_assigned` (the
    /// batches copied into one buffer when there are several) and empties it.
    async fn append_run(&self, run: &mut Vec<&Entry>) -> Result<(), String> {
        let (Some(first), Some(last)) = (run.first(), run.last()) else {
            return Ok(());
        };
        let (from, to) = (first.index, last.index);
        let data = if run.len() == 1 {
            first.data.clone()
        } else {
            let mut b = bytes::BytesMut::with_capacity(run.iter().map(|e| e.data.len()).sum());
            for e in run.iter() {
                b.extend_from_slice(&e.data);
            }
            b.freeze()
        };
        run.clear();
        self.log()
            .append_assigned(data)
            .await
            .map_err(|err| format!("appending entries {from}-{to}: {err}"))?;
        Ok(())
    }

    /// Runs a side log operation on the blocking pool.
    async fn side_op(
        &self,
        op: impl FnOnce(&mut SideLog) -> std::io::Result<()> + Send + 'static,
    ) -> Result<(), String> {
        let mut side = self.side.borrow_mut().take().ok_or("side log in use")?;
        let (side, res) = weir_storage::io::off_reactor(move || {
            let res = op(&mut side);
            (side, res)
        })
        .await;
        *self.side.borrow_mut() = Some(side);
        res.map_err(|e| format!("{}: {e}", self.dir.join("raft_entries").display()))
    }

    /// Notes the cuts among the entries just committed, for the driver to drop the log below
    /// them (`Replica::cut`), and the uploads to list in the remote tier (`remote`,
    /// `Replica::list_remote`): on any partition a log start move (DeleteRecords,
    /// `log_start`); on an internal topic's (`__consumer_offsets`, `__transaction_state`) a
    /// cut record (a bucket store's compaction ends with one,
    /// `group::offsets::Backing::rewrite`).
    fn note_cuts(&self, committed: &[Entry]) {
        let internal = self.topic == crate::broker::group::offsets::OFFSETS_TOPIC
            || self.topic == crate::broker::txn::TXN_TOPIC;
        for e in committed {
            if e.data.is_empty() {
                if let Some(seg) = super::remote::decode(&e.context) {
                    self.remote_due.borrow_mut().push(seg);
                    continue;
                }
            }
            let below = if e.data.is_empty() {
                super::log_start::decode(&e.context)
            } else if internal {
                crate::broker::group::offsets::cut_below(&e.data)
            } else {
                None
            };
            if let Some(below) = below {
                let due = self.cut_due.get().map_or(below, |c| c.max(below));
                self.cut_due.set(Some(due));
            }
        }
    }

    /// A message this replica does not step: a leadership handed to a stopping broker
    /// (`MsgTimeoutNow`: declined, the leader gives up the transfer after an election timeout
    /// and stays), or one it may not answer while the broker rejoins (`raft::rejoin`, which
    /// also mends a heartbeat or a rejection from a follower that lost its log).
    fn declines(&self, host: &dyn Host, m: &mut raft::prelude::Message) -> bool {
        let offered = m.get_msg_type() == MessageType::MsgTimeoutNow;
        if offered && host.stopping() {
            debug!(topic = %self.topic, partition = self.partition, from = m.from,
                "stopping: a leadership offered to this broker declined");
            return true;
        }
        let what = self.name();
        !self
            .rejoin
            .before_step(&mut self.raw.borrow_mut().raft, m, &what)
    }

    /// After its messages are stepped: a rejoining replica that caught up says so.
    fn check_rejoined(&self, host: &dyn Host) {
        let raw = self.raw.borrow();
        if self.rejoin.became_sure(&raw.raft) {
            info!(topic = %self.topic, partition = self.partition, committed = raw.raft.raft_log.committed,
                leader_commit_first_heard = ?self.rejoin.target(),
                "rejoining replica caught up with its leader; it votes again");
            drop(raw);
            host.rejoined(self);
            self.rejoin.record_in_background(self.name().to_string());
        }
    }
}
