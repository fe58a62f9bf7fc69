//! Reads of data no longer in the cache: direct reads of `read_chunk_bytes`-sized, aligned
//! pieces of segment files, with sequential read-ahead (`read_ahead_bytes` in flight) so that
//! a catch-up reader keeps the device busy.
//!
//! The chunks of all the logs of a core share one byte budget (`ReadBudget`, owned by the
//! core's [`BatchCache`](crate::BatchCache)): the budget holds the chunks, oldest first, and
//! evicts the oldest whatever log it belongs to; a log only keeps weak references to find
//! them again. So memory for read data is bounded per core however many partitions are read,
//! and chunks nobody asked for in a while are released by the retention tick.
//!
//! A chunk read from the active segment only holds what was written when it was read: each
//! chunk remembers how far its data is valid, and is read again if a reader needs more.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::{Rc, Weak};
use std::time::Instant;

use bytes::Bytes;

use crate::cache::BatchCache;
use crate::error::{Error, Result};
use crate::read_budget::Slot;
use crate::segment::Segment;

type Key = (u64, u64); // (segment uid, chunk index): a rewritten segment gets a new uid

/// One log's chunks: weak references into the core's [`ReadBudget`].
pub(crate) struct ReadCache {
    chunk_bytes: u64,
    ahead_chunks: u64,
    cache: Rc<BatchCache>,
    slots: RefCell<HashMap<Key, Weak<Slot>>>,
}

impl ReadCache {
    pub(crate) fn new(
        chunk_bytes: usize,
        read_ahead_bytes: usize,
        cache: Rc<BatchCache>,
    ) -> ReadCache {
        let chunk_bytes = crate::io::align_up(chunk_bytes.max(4096) as u64);
        // Read-ahead never takes more than a quarter of the core's budget, so that one
        // reader's chunks are not evicted before it gets to them.
        let budget_chunks = cache.reads.capacity_bytes() as u64 / chunk_bytes / 4;
        let ahead_chunks = (read_ahead_bytes as u64 / chunk_bytes)
            .min(budget_chunks)
            .max(1);
        ReadCache {
            chunk_bytes,
            ahead_chunks,
            cache,
            slots: RefCell::new(HashMap::new()),
        }
    }

    /// Forgets the chunks of a deleted or replaced segment (the budget releases them as they
    /// age out).
    pub(crate) fn forget_segment(&self, uid: u64) {
        self.slots.borrow_mut().retain(|k, _| k.0 != uid);
    }

    /// The core's cache, whose read budget this log's chunks are under.
    pub(crate) fn core_cache(&self) -> &Rc<BatchCache> {
        &self.cache
    }

    /// Lets the core's budget release chunks nobody read for a while.
    pub(crate) fn expire_idle(&self) {
        self.cache.reads.expire(Instant::now());
    }

    fn live(&self, key: Key) -> Option<Rc<Slot>> {
        self.slots.borrow().get(&key).and_then(Weak::upgrade)
    }

    /// The chunk `idx` of `segment`, valid at least up to `need_to` (the caller guarantees
    /// `need_to <= limit`, the segment's visible size).
    fn slot(&self, segment: &Segment, idx: u64, need_to: u64, limit: u64, ahead: bool) -> Rc<Slot> {
        let key = (segment.uid, idx);
        if let Some(s) = self.live(key) {
            if s.valid_to >= need_to {
                if !ahead {
                    self.cache.reads.taken(&s);
                }
                return s;
            }
        }
        let start = idx * self.chunk_bytes;
        let valid_to = ((idx + 1) * self.chunk_bytes).min(limit);
        let slot = Rc::new(Slot {
            valid_to,
            ..Default::default()
        });
        let file = segment.file.clone();
        let s2 = slot.clone();
        let len = (valid_to - start) as usize;
        glommio::spawn_local(async move {
            let r = file.read_at(start, len).await;
            let r = match r {
                Ok(b) if b.len() >= len => Ok(b.slice(..len)),
                Ok(b) => Err(format!("short read at {start}: {} of {len} bytes", b.len())),
                Err(e) => Err(e.to_string()),
            };
            s2.fill(r);
        })
        .detach();
        self.cache.reads.admit(slot.clone(), len, ahead);
        let mut slots = self.slots.borrow_mut();
        slots.insert(key, Rc::downgrade(&slot));
        // Evicted chunks leave dead weak references behind: sweep them now and then.
        if slots.len() > 4 * (self.ahead_chunks as usize + 2) {
            slots.retain(|_, w| w.strong_count() > 0);
        }
        slot
    }

    /// Starts reading the chunks after `idx`, up to the read-ahead window (and while the
    /// core's read-ahead is under half its budget: `ReadBudget::ahead_room`).
    fn read_ahead(&self, segment: &Segment, idx: u64, limit: u64) {
        for next in idx + 1..=idx + self.ahead_chunks {
            let start = next * self.chunk_bytes;
            if start >= limit || !self.cache.reads.ahead_room() {
                break;
            }
            let need = ((next + 1) * self.chunk_bytes).min(limit);
            let present = self
                .live((segment.uid, next))
                .is_some_and(|s| s.valid_to >= need);
            if !present {
                self.slot(segment, next, need, limit, true);
            }
        }
    }

    /// Are the file bytes `[from, to)` of `segment` in memory already (read, or read ahead)?
    pub(crate) fn ready(&self, segment: &Segment, from: u64, to: u64) -> bool {
        let mut idx = from / self.chunk_bytes;
        while idx * self.chunk_bytes < to {
            let need_to = to.min((idx + 1) * self.chunk_bytes);
            let ok = self
                .live((segment.uid, idx))
                .is_some_and(|s| s.valid_to >= need_to && s.data.borrow().is_some());
            if !ok {
                return false;
            }
            idx += 1;
        }
        true
    }

    /// File bytes `[from, to)` of `segment` (all below `limit`), as zero-copy slices of the
    /// chunks that hold them.
    pub(crate) async fn bytes(
        &self,
        segment: &Segment,
        from: u64,
        to: u64,
        limit: u64,
    ) -> Result<Vec<Bytes>> {
        debug_assert!(
            from <= to && to <= limit,
            "read [{from}, {to}) past visible {limit}"
        );
        let mut out = Vec::new();
        let mut pos = from;
        while pos < to {
            let idx = pos / self.chunk_bytes;
            let chunk_start = idx * self.chunk_bytes;
            let chunk_end = chunk_start + self.chunk_bytes;
            let need_to = to.min(chunk_end);
            let slot = self.slot(segment, idx, need_to, limit, false);
            self.read_ahead(segment, idx, limit);
            let data = slot.wait().await.map_err(|why| Error::Io {
                op: "read",
                path: segment.log_path.clone(),
                position: Some(chunk_start),
                source: std::io::Error::other(why),
            })?;
            let a = (pos - chunk_start) as usize;
            let b = (need_to - chunk_start) as usize;
            out.push(data.slice(a..b));
            pos = need_to;
        }
        Ok(out)
    }
}
