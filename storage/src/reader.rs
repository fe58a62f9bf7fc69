//! Reads of data no longer in the cache: direct reads of `read_chunk_bytes`-sized, aligned
//! pieces of segment files, kept in a small per-log chunk cache, with sequential read-ahead
//! (`read_ahead_bytes` in flight) so that a catch-up reader keeps the device busy.
//!
//! A chunk read from the active segment only holds what was written when it was read: each
//! chunk remembers how far its data is valid, and is read again if a reader needs more.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::segment::Segment;

type Key = (u64, u64); // (segment base offset, chunk index)

#[derive(Default)]
struct Slot {
    data: RefCell<Option<std::result::Result<Bytes, String>>>,
    waiters: RefCell<Vec<Waker>>,
    /// File position up to which this chunk's data is valid.
    valid_to: u64,
}

pub(crate) struct ReadCache {
    chunk_bytes: u64,
    ahead_chunks: u64,
    max_slots: usize,
    slots: RefCell<HashMap<Key, Rc<Slot>>>,
    order: RefCell<VecDeque<Key>>,
}

impl ReadCache {
    pub(crate) fn new(chunk_bytes: usize, read_ahead_bytes: usize) -> ReadCache {
        let chunk_bytes = crate::io::align_up(chunk_bytes.max(4096) as u64);
        let ahead_chunks = (read_ahead_bytes as u64 / chunk_bytes).max(1);
        ReadCache {
            chunk_bytes,
            ahead_chunks,
            max_slots: (2 * ahead_chunks + 2) as usize,
            slots: RefCell::new(HashMap::new()),
            order: RefCell::new(VecDeque::new()),
        }
    }

    /// Forgets the chunks of a deleted segment.
    pub(crate) fn forget_segment(&self, base_offset: u64) {
        self.slots.borrow_mut().retain(|k, _| k.0 != base_offset);
        self.order.borrow_mut().retain(|k| k.0 != base_offset);
    }

    /// The chunk `idx` of `segment`, valid at least up to `need_to` (the caller guarantees
    /// `need_to <= limit`, the segment's visible size).
    fn slot(&self, segment: &Segment, idx: u64, need_to: u64, limit: u64) -> Rc<Slot> {
        let key = (segment.base_offset, idx);
        if let Some(s) = self.slots.borrow().get(&key) {
            if s.valid_to >= need_to {
                return s.clone();
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
            *s2.data.borrow_mut() = Some(r);
            let waiters = std::mem::take(&mut *s2.waiters.borrow_mut());
            waiters.into_iter().for_each(Waker::wake);
        })
        .detach();
        let mut slots = self.slots.borrow_mut();
        let mut order = self.order.borrow_mut();
        if slots.insert(key, slot.clone()).is_none() {
            order.push_back(key);
        }
        while slots.len() > self.max_slots {
            match order.pop_front() {
                Some(old) => {
                    slots.remove(&old);
                }
                None => break,
            }
        }
        slot
    }

    /// Starts reading the chunks after `idx`, up to the read-ahead window.
    fn read_ahead(&self, segment: &Segment, idx: u64, limit: u64) {
        for next in idx + 1..=idx + self.ahead_chunks {
            let start = next * self.chunk_bytes;
            if start >= limit {
                break;
            }
            let need = ((next + 1) * self.chunk_bytes).min(limit);
            let present = self
                .slots
                .borrow()
                .get(&(segment.base_offset, next))
                .is_some_and(|s| s.valid_to >= need);
            if !present {
                self.slot(segment, next, need, limit);
            }
        }
    }

    /// Are the file bytes `[from, to)` of `segment` in memory already (read, or read ahead)?
    pub(crate) fn ready(&self, segment: &Segment, from: u64, to: u64) -> bool {
        let slots = self.slots.borrow();
        let mut idx = from / self.chunk_bytes;
        while idx * self.chunk_bytes < to {
            let need_to = to.min((idx + 1) * self.chunk_bytes);
            let ok = slots
                .get(&(segment.base_offset, idx))
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
            let slot = self.slot(segment, idx, need_to, limit);
            self.read_ahead(segment, idx, limit);
            let data = wait(&slot).await.map_err(|why| Error::Io {
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

async fn wait(slot: &Slot) -> std::result::Result<Bytes, String> {
    poll_fn(|cx| {
        if let Some(r) = slot.data.borrow().as_ref() {
            return Poll::Ready(r.clone());
        }
        slot.waiters.borrow_mut().push(cx.waker().clone());
        Poll::Pending
    })
    .await
}
