//! raft-rs's `Storage` for one replica (docs/replication.md §2.1, §3.1): what raft-rs reads of
//! its log, served from an index table of every entry above the snapshot point — its term
//! and the Kafka offsets it covers — and a bounded cache of recent entries' bytes, not from a
//! copy of the whole partition in memory.
//!
//! The entries raft-rs must be able to read synchronously (the unapplied ones: committed
//! entries handed out in a `Ready`, the checks of a vote or a leadership transfer) are never
//! evicted: the cache only drops entries at or below the applied index, oldest first, once it
//! holds more than its budget. An older entry asked for to send to a lagging follower (the
//! only asynchronous context, `GetEntriesContext::can_async`) is a fetch request instead:
//! `entries` answers `LogTemporarilyUnavailable`, the driver reads the batches back from the
//! segment files (`Replica::serve_fetches`), hands them over with `fetched`, and calls
//! `RawNode::on_entries_fetched`, after which raft-rs asks again and finds them.
//!
//! One `ReplicaStorage` is shared (an `Rc`) by the `RawNode` and the driver, on one core.
//!
//! Long because its unit tests (a third of the file) sit beside the index table they check.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

use raft::prelude::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};

use super::state::SnapshotPoint;

/// One entry of the index table: its term and the Kafka offsets `[start, end)` it covers
/// (`start == end` for a Raft-only entry, which has no data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub term: u64,
    pub start: u64,
    pub end: u64,
}

/// An entry raft-rs asked for that is no longer cached: `[low, high)`, and the context to
/// hand back to `RawNode::on_entries_fetched` once they are.
pub struct FetchRequest {
    pub low: u64,
    pub high: u64,
    pub context: GetEntriesContext,
}

struct Core {
    hard_state: HardState,
    conf_state: ConfState,
    snap: SnapshotPoint,
    /// `table[i]` describes the entry of Raft index `snap.index + 1 + i`.
    table: VecDeque<Slot>,
    cache: BTreeMap<u64, Entry>,
    /// The contexts of the Raft-only entries that have one (a log start move), which the
    /// index table does not hold: such an entry is rebuilt from its slot and this.
    contexts: BTreeMap<u64, bytes::Bytes>,
    cache_bytes: usize,
    cache_max_bytes: usize,
    applied: u64,
    /// Entries read back for a fetch request, kept until raft-rs asked for them again.
    fetched: BTreeMap<u64, Entry>,
    requests: Vec<FetchRequest>,
    /// The remote tier's manifest as this replica has applied it (a tiered partition), sent
    /// with a snapshot: the follower installing it then knows the segments in the store.
    remote_manifest: Option<bytes::Bytes>,
}

#[derive(Clone)]
pub struct ReplicaStorage {
    core: Rc<RefCell<Core>>,
}

impl ReplicaStorage {
    /// A storage over `entries` (contiguous from `snap.index + 1`, as `rebuild::Rebuild` gives
    /// them) whose first `applied` are applied: only those above `applied`, and as many
    /// below it as fit in `cache_max_bytes`, stay cached.
    pub fn new(
        hard_state: HardState,
        conf_state: ConfState,
        snap: SnapshotPoint,
        entries: Vec<Entry>,
        applied: u64,
        cache_max_bytes: usize,
    ) -> Result<ReplicaStorage, String> {
        let s = ReplicaStorage {
            core: Rc::new(RefCell::new(Core {
                hard_state,
                conf_state,
                snap,
                table: VecDeque::new(),
                cache: BTreeMap::new(),
                contexts: BTreeMap::new(),
                cache_bytes: 0,
                cache_max_bytes,
                applied: snap.index,
                fetched: BTreeMap::new(),
                requests: Vec::new(),
                remote_manifest: None,
            })),
        };
        s.append(&entries)?;
        s.set_applied(applied);
        Ok(s)
    }

    /// The offsets after the last entry (the Raft log's end in Kafka offsets).
    pub fn log_end(&self) -> u64 {
        let c = self.core.borrow();
        c.table.back().map_or(c.snap.offset, |s| s.end)
    }

    pub fn last(&self) -> u64 {
        let c = self.core.borrow();
        c.snap.index + c.table.len() as u64
    }

    /// The index table's slot of `index`, if the log holds it.
    pub fn slot(&self, index: u64) -> Option<Slot> {
        let c = self.core.borrow();
        let i = index.checked_sub(c.snap.index + 1)?;
        c.table.get(i as usize).copied()
    }

    /// The Raft-only entry at `index` (no data, no offsets), rebuilt from the index table and
    /// its context; `None` if `index` is not such an entry of this log.
    pub fn raft_only(&self, index: u64) -> Option<Entry> {
        let slot = self.slot(index).filter(|s| s.start == s.end)?;
        let c = self.core.borrow();
        Some(Entry {
            index,
            term: slot.term,
            context: c.contexts.get(&index).cloned().unwrap_or_default(),
            ..Default::default()
        })
    }

    /// The entry holding Kafka offset `offset` and its slot, if the log holds it above the
    /// snapshot point.
    pub fn entry_at(&self, offset: u64) -> Option<(u64, Slot)> {
        let c = self.core.borrow();
        let i = c.table.partition_point(|s| s.end <= offset);
        let slot = c.table.get(i).copied().filter(|s| s.start <= offset)?;
        Some((c.snap.index + 1 + i as u64, slot))
    }

    /// The offset where entry `index` starts (the end of the one before it).
    pub fn start_of(&self, index: u64) -> u64 {
        let c = self.core.borrow();
        match index.checked_sub(c.snap.index + 2) {
            Some(i) => c.table.get(i as usize).map_or_else(
                || c.table.back().map_or(c.snap.offset, |s| s.end),
                |s| s.end,
            ),
            None => c.snap.offset,
        }
    }

    /// The offset after every entry up to `index` (all of them if `index` is past the end).
    pub fn end_of(&self, index: u64) -> u64 {
        let c = self.core.borrow();
        match index.checked_sub(c.snap.index + 1) {
            Some(i) => c
                .table
                .get(i as usize)
                .or(c.table.back())
                .map_or(c.snap.offset, |s| s.end),
            None => c.snap.offset,
        }
    }

    /// Appends entries written to the log: an entry at an index the log holds replaces it
    /// and everything after it (the caller cut the segments first). Each must follow the
    /// one before in offsets.
    pub fn append(&self, entries: &[Entry]) -> Result<(), String> {
        let Some(first) = entries.first().map(|e| e.index) else {
            return Ok(());
        };
        let mut guard = self.core.borrow_mut();
        let c = &mut *guard;
        let next = c.snap.index + 1 + c.table.len() as u64;
        if first <= c.snap.index || first > next {
            return Err(format!(
                "appending at Raft index {first}: the log holds {}..{next}",
                c.snap.index + 1
            ));
        }
        let keep = (first - c.snap.index - 1) as usize;
        c.table.truncate(keep);
        let cut: Vec<u64> = c.cache.range(first..).map(|(&i, _)| i).collect();
        for i in cut {
            if let Some(e) = c.cache.remove(&i) {
                c.cache_bytes -= e.data.len();
            }
        }
        c.fetched.retain(|&i, _| i < first);
        c.contexts.retain(|&i, _| i < first);
        let mut end = c.table.back().map_or(c.snap.offset, |s| s.end);
        for (k, e) in entries.iter().enumerate() {
            if e.index != first + k as u64 {
                return Err(format!("entries not contiguous at Raft index {}", e.index));
            }
            let (start, stop) = super::rebuild::entry_span(e, end)?;
            if start != end {
                return Err(format!(
                    "entry {} starts at offset {start}, the log ends at {end}",
                    e.index
                ));
            }
            end = stop;
            c.table.push_back(Slot {
                term: e.term,
                start,
                end: stop,
            });
            if e.data.is_empty() && !e.context.is_empty() {
                // A copy: a received entry's bytes are a slice of its whole frame.
                c.contexts
                    .insert(e.index, bytes::Bytes::copy_from_slice(&e.context));
            }
            c.cache_bytes += e.data.len();
            c.cache.insert(e.index, e.clone());
        }
        c.evict();
        Ok(())
    }

    /// The remote tier's manifest as applied here (`None`: no remote tier), for snapshots.
    pub fn set_remote_manifest(&self, manifest: Option<Vec<u8>>) {
        self.core.borrow_mut().remote_manifest = manifest.map(bytes::Bytes::from);
    }

    /// The snapshot point: entries up to its index are compacted away.
    pub fn snapshot_point(&self) -> SnapshotPoint {
        self.core.borrow().snap
    }

    /// The point retention may compact the log to, given that it would move the log start to
    /// `offset`: the last applied entry ending at or below `offset` (`None` if that is not past
    /// the current point).
    pub fn compaction_point(&self, offset: u64) -> Option<SnapshotPoint> {
        let c = self.core.borrow();
        // Entry ends only go up: the entries ending at or below `offset` are a prefix.
        let applied = c.applied.saturating_sub(c.snap.index) as usize;
        let n = c.table.partition_point(|s| s.end <= offset).min(applied);
        let slot = c.table.get(n.checked_sub(1)?)?;
        Some(SnapshotPoint {
            index: c.snap.index + n as u64,
            term: slot.term,
            offset: slot.end,
        })
    }

    /// Forgets the entries up to `point` (which `compaction_point` gave): raft-rs's log then
    /// starts after it.
    pub fn compact(&self, point: SnapshotPoint) -> Result<(), String> {
        let mut guard = self.core.borrow_mut();
        let c = &mut *guard;
        let Some(n) = point.index.checked_sub(c.snap.index) else {
            return Err(format!(
                "compacting to {} below the point {}",
                point.index, c.snap.index
            ));
        };
        let slot = c.table.get(n.saturating_sub(1) as usize).copied();
        if n == 0
            || point.index > c.applied
            || slot.map(|s| (s.term, s.end)) != Some((point.term, point.offset))
        {
            return Err(format!(
                "compacting to {point:?}: not an applied entry of this log"
            ));
        }
        c.table.drain(..n as usize);
        let dropped: Vec<u64> = c.cache.range(..=point.index).map(|(&i, _)| i).collect();
        for i in dropped {
            if let Some(e) = c.cache.remove(&i) {
                c.cache_bytes -= e.data.len();
            }
        }
        c.fetched.retain(|&i, _| i > point.index);
        c.contexts.retain(|&i, _| i > point.index);
        c.snap = point;
        Ok(())
    }

    /// A snapshot installed (a follower behind its leader's log start, whose log now
    /// restarts empty at `point.offset`): every entry is forgotten, raft-rs's log is empty
    /// after `point` (first index `point.index + 1`, last `point.index`), and everything up to
    /// it counts as committed and applied.
    pub fn apply_snapshot(&self, point: SnapshotPoint) {
        let mut guard = self.core.borrow_mut();
        let c = &mut *guard;
        c.table.clear();
        c.cache.clear();
        c.contexts.clear();
        c.cache_bytes = 0;
        c.fetched.clear();
        c.requests.clear();
        c.snap = point;
        c.applied = point.index;
        c.hard_state.commit = c.hard_state.commit.max(point.index);
        c.hard_state.term = c.hard_state.term.max(point.term);
    }

    pub fn set_hard_state(&self, hs: HardState) {
        self.core.borrow_mut().hard_state = hs;
    }

    /// Entries up to `index` are applied: they may leave the cache.
    pub fn set_applied(&self, index: u64) {
        let mut c = self.core.borrow_mut();
        c.applied = c.applied.max(index);
        c.evict();
    }

    /// Whether raft-rs asked for entries to be read back since `take_requests` last ran.
    pub fn has_requests(&self) -> bool {
        !self.core.borrow().requests.is_empty()
    }

    /// The fetch requests raft-rs made since the last call.
    pub fn take_requests(&self) -> Vec<FetchRequest> {
        std::mem::take(&mut self.core.borrow_mut().requests)
    }

    /// Entries read back for a fetch request; they replace any fetched before.
    pub fn fetched(&self, entries: Vec<Entry>) {
        let mut c = self.core.borrow_mut();
        c.fetched = entries.into_iter().map(|e| (e.index, e)).collect();
    }

    /// How many entries and bytes are cached (for tests and logs).
    pub fn cached(&self) -> (usize, usize) {
        let c = self.core.borrow();
        (c.cache.len(), c.cache_bytes)
    }
}

impl Core {
    /// Drops the oldest applied entries while the cache is over its budget.
    fn evict(&mut self) {
        while self.cache_bytes > self.cache_max_bytes {
            let Some((&i, _)) = self.cache.first_key_value() else {
                return;
            };
            if i > self.applied {
                return;
            }
            if let Some(e) = self.cache.remove(&i) {
                self.cache_bytes -= e.data.len();
            }
        }
    }
}

impl raft::Storage for ReplicaStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        let c = self.core.borrow();
        Ok(RaftState::new(c.hard_state.clone(), c.conf_state.clone()))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        let mut c = self.core.borrow_mut();
        if low <= c.snap.index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        let last = c.snap.index + c.table.len() as u64;
        if high > last + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let max = max_size.into().unwrap_or(u64::MAX);
        let mut out: Vec<Entry> = Vec::new();
        let mut bytes = 0u64;
        for i in low..high {
            let e = match c.cache.get(&i).or_else(|| c.fetched.get(&i)) {
                Some(e) => e.clone(),
                None => {
                    let slot = c.table[(i - c.snap.index - 1) as usize];
                    if slot.start == slot.end {
                        // A Raft-only entry has no bytes to read back.
                        Entry {
                            index: i,
                            term: slot.term,
                            context: c.contexts.get(&i).cloned().unwrap_or_default(),
                            ..Default::default()
                        }
                    } else if !out.is_empty() {
                        break;
                    } else if context.can_async() {
                        c.requests.push(FetchRequest {
                            low: i,
                            high,
                            context,
                        });
                        return Err(raft::Error::Store(StorageError::LogTemporarilyUnavailable));
                    } else {
                        return Err(raft::Error::Store(StorageError::Unavailable));
                    }
                }
            };
            bytes += e.data.len() as u64 + 16;
            if !out.is_empty() && bytes > max {
                break;
            }
            out.push(e);
        }
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        let c = self.core.borrow();
        if idx == c.snap.index {
            return Ok(c.snap.term);
        }
        if idx < c.snap.index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        c.table
            .get((idx - c.snap.index - 1) as usize)
            .map(|s| s.term)
            .ok_or(raft::Error::Store(StorageError::Unavailable))
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.core.borrow().snap.index + 1)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    /// What raft-rs sends a follower that needs entries below the first index (retention
    /// deleted them): the snapshot point, whose data names the offset the follower's log
    /// restarts at (`replica::snapshot`), and on a tiered partition the remote tier's
    /// manifest. Nothing to send before the log was ever compacted.
    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let c = self.core.borrow();
        if c.snap.index == 0 || request_index > c.snap.index {
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        let mut s = Snapshot {
            data: super::snapshot::encode_data(c.snap.offset, c.remote_manifest.as_deref()),
            ..Default::default()
        };
        let m = s.mut_metadata();
        m.index = c.snap.index;
        m.term = c.snap.term;
        m.set_conf_state(c.conf_state.clone());
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use raft::Storage;
    use weir_storage::batch::{assign_offset, RecordBatchBuilder};

    fn data(index: u64, term: u64, base: u64, n: usize) -> Entry {
        let mut b = RecordBatchBuilder::new(1000);
        for i in 0..n {
            b = b.record(None, Some(format!("value {i} of a batch").as_bytes()), &[]);
        }
        let mut bytes = b.build().to_vec();
        assign_offset(&mut bytes, base as i64, term as i32);
        Entry {
            index,
            term,
            data: Bytes::from(bytes),
            ..Default::default()
        }
    }

    fn empty(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            ..Default::default()
        }
    }

    fn ctx_async() -> GetEntriesContext {
        GetEntriesContext::empty(true)
    }

    /// entries 1 (empty, term 1), 2..=5 (batches of 2 records, term 1): offsets 0..8.
    fn five(cache_max_bytes: usize, applied: u64) -> ReplicaStorage {
        let mut entries = vec![empty(1, 1)];
        for i in 2..=5 {
            entries.push(data(i, 1, (i - 2) * 2, 2));
        }
        ReplicaStorage::new(
            HardState::default(),
            ConfState::from((vec![1, 2, 3], vec![])),
            SnapshotPoint::default(),
            entries,
            applied,
            cache_max_bytes,
        )
        .unwrap()
    }

    #[test]
    fn a_log_start_move_keeps_its_context_after_the_cache_drops_it() {
        // Entries 1-5 as `five`, then 6: a log start move to offset 3 (no data), 7: a batch.
        let s = five(0, 5);
        let mv = Entry {
            context: Bytes::from(super::super::log_start::encode(3)),
            ..empty(6, 1)
        };
        s.append(&[mv.clone(), data(7, 1, 8, 2)]).unwrap();
        assert_eq!(s.start_of(7), 8, "a Raft-only entry takes no offset");
        s.set_applied(7);
        assert_eq!(s.cached().0, 0, "a zero budget keeps no applied entry");
        assert_eq!(s.raft_only(6), Some(mv.clone()));
        assert_eq!(s.raft_only(1), Some(empty(1, 1)));
        assert_eq!(s.raft_only(2), None, "a batch");
        assert_eq!(
            s.entries(6, 7, None, ctx_async()).unwrap(),
            vec![mv.clone()]
        );
        // A conflicting suffix replacing it forgets its context.
        s.append(&[empty(6, 2)]).unwrap();
        assert_eq!(s.raft_only(6), Some(empty(6, 2)));
    }

    #[test]
    fn the_index_table_answers_terms_and_offsets() {
        let s = five(usize::MAX, 0);
        assert_eq!((s.first_index().unwrap(), s.last_index().unwrap()), (1, 5));
        assert_eq!(s.term(0).unwrap(), 0);
        assert_eq!(s.term(3).unwrap(), 1);
        assert!(s.term(6).is_err());
        assert_eq!(s.log_end(), 8);
        assert_eq!(s.start_of(1), 0);
        assert_eq!(s.start_of(2), 0, "after the empty entry");
        assert_eq!(s.start_of(4), 4);
        assert_eq!(s.start_of(6), 8, "the log end");
        assert_eq!(s.end_of(3), 4);
        assert_eq!(s.end_of(0), 0);
        assert_eq!(s.end_of(99), 8);
        let got = s.entries(2, 6, None, ctx_async()).unwrap();
        assert_eq!(
            got.iter().map(|e| e.index).collect::<Vec<_>>(),
            vec![2, 3, 4, 5]
        );
        // Size-limited: at least one entry.
        assert_eq!(s.entries(2, 6, 1, ctx_async()).unwrap().len(), 1);
    }

    #[test]
    fn a_conflicting_append_replaces_the_suffix() {
        let s = five(usize::MAX, 0);
        // A new leader (term 2) replaces entries 4 and 5 with its empty entry and a batch.
        s.append(&[empty(4, 2), data(5, 2, 4, 3)]).unwrap();
        assert_eq!(s.last(), 5);
        assert_eq!(s.term(4).unwrap(), 2);
        assert_eq!(s.log_end(), 7);
        assert_eq!(s.entries(5, 6, None, ctx_async()).unwrap()[0].term, 2);
        // Refused: a gap in indexes, an entry not where the log ends in offsets.
        assert!(s.append(&[data(9, 2, 7, 1)]).is_err());
        assert!(s.append(&[data(6, 2, 9, 1)]).is_err());
    }

    /// Applied entries leave the cache past its budget, unapplied ones never; an evicted one
    /// asked for asynchronously is a fetch request, answered once it was read back; asked
    /// for synchronously it is an error (never happens: only applied entries are evicted).
    #[test]
    fn compaction_forgets_applied_entries_up_to_a_point() {
        // Entry 1 is empty, entries 2-5 cover offsets 0-2, 2-4, 4-6, 6-8; 3 are applied.
        let s = five(1 << 20, 3);
        // Retention would move the start into entry 3: the point is entry 2's end.
        let p = s.compaction_point(3).expect("a point");
        assert_eq!((p.index, p.offset), (2, 2));
        // Never past what is applied, whatever retention asks.
        assert_eq!(s.compaction_point(1_000).map(|p| p.index), Some(3));
        s.compact(p).unwrap();
        assert_eq!(s.first_index().unwrap(), 3);
        assert_eq!(s.term(2).unwrap(), p.term);
        assert!(matches!(
            s.term(1),
            Err(raft::Error::Store(StorageError::Compacted))
        ));
        assert!(matches!(
            s.entries(1, 3, None, ctx_async()),
            Err(raft::Error::Store(StorageError::Compacted))
        ));
        assert_eq!(s.start_of(3), 2);
        assert_eq!((s.last(), s.log_end()), (5, 8));
        assert_eq!(s.compaction_point(2), None, "nothing past the point");
        let unapplied = SnapshotPoint {
            index: 5,
            term: 1,
            offset: 8,
        };
        assert!(s.compact(unapplied).is_err(), "not applied");
    }

    /// The leader's snapshot is its compaction point; a follower that applies it has an
    /// empty log after the point, starting at the point's offset, and appends continue there.
    #[test]
    fn a_snapshot_is_the_compaction_point_and_applying_it_empties_the_log() {
        let leader = five(1 << 20, 5);
        assert_eq!(
            leader.snapshot(0, 2),
            Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable
            )),
            "never compacted: nothing to send"
        );
        let p = leader.compaction_point(6).expect("a point");
        leader.compact(p).unwrap();
        let snap = leader.snapshot(0, 2).unwrap();
        let meta = snap.get_metadata();
        assert_eq!((meta.index, meta.term), (p.index, p.term));
        assert_eq!(meta.get_conf_state().voters, vec![1, 2, 3]);
        assert_eq!(
            crate::broker::replica::snapshot::decode_data(&snap.data).unwrap(),
            (6, None)
        );
        leader.set_remote_manifest(Some(b"manifest".to_vec()));
        let snap = leader.snapshot(0, 2).unwrap();
        assert_eq!(
            crate::broker::replica::snapshot::decode_data(&snap.data).unwrap(),
            (6, Some(&b"manifest"[..])),
            "a tiered partition's snapshot carries its remote segments"
        );
        assert!(leader.snapshot(p.index + 1, 2).is_err(), "past the point");

        // A follower whose log diverged after entry 2 (term 1) and holds uncommitted entries.
        let follower = five(1 << 20, 2);
        follower.apply_snapshot(p);
        assert_eq!(
            (
                follower.first_index().unwrap(),
                follower.last_index().unwrap()
            ),
            (p.index + 1, p.index)
        );
        assert_eq!(follower.term(p.index).unwrap(), p.term);
        assert_eq!(follower.log_end(), 6);
        assert_eq!(follower.start_of(p.index + 1), 6);
        assert_eq!(follower.cached(), (0, 0));
        let hs = follower.initial_state().unwrap().hard_state;
        assert_eq!(hs.commit, p.index);
        follower
            .append(&[data(p.index + 1, 2, 6, 3)])
            .expect("appends continue at the point's offset");
        assert_eq!(follower.log_end(), 9);
        assert!(follower.append(&[data(p.index + 1, 2, 0, 3)]).is_err());
    }

    #[test]
    fn eviction_and_fetching() {
        let batch = data(2, 1, 0, 2).data.len();
        let s = five(2 * batch, 0);
        assert_eq!(s.cached().0, 5, "nothing applied: everything stays");
        s.set_applied(3);
        assert_eq!(s.cached(), (2, 2 * batch), "entries 1-3 may go, and had to");
        assert!(s
            .entries(4, 6, None, GetEntriesContext::empty(false))
            .is_ok());
        let err = s.entries(2, 6, None, ctx_async()).unwrap_err();
        assert_eq!(
            err,
            raft::Error::Store(StorageError::LogTemporarilyUnavailable)
        );
        let reqs = s.take_requests();
        assert_eq!((reqs.len(), reqs[0].low, reqs[0].high), (1, 2, 6));
        assert!(s
            .entries(2, 6, None, GetEntriesContext::empty(false))
            .is_err());
        s.fetched(vec![data(2, 1, 0, 2), data(3, 1, 2, 2)]);
        let got = s.entries(2, 6, None, ctx_async()).unwrap();
        assert_eq!(
            got.iter().map(|e| e.index).collect::<Vec<_>>(),
            vec![2, 3, 4, 5]
        );
        // The empty entry 1 needs no bytes: it is rebuilt from the table.
        let got = s
            .entries(1, 2, None, GetEntriesContext::empty(false))
            .unwrap();
        assert!(got[0].data.is_empty());
        assert!(
            s.entries(0, 2, None, ctx_async()).is_err(),
            "below the first index"
        );
        assert!(s.entries(2, 7, None, ctx_async()).is_err(), "past the last");
    }
}
