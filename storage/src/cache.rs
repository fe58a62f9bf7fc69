//! The per-core cache of recently appended batches: tailing readers are served from memory.
//!
//! One `BatchCache` is shared (by `Rc`) by all the logs of an executor. Each log keeps its
//! own queue of cached batches (slices of the produce request's bytes: no copy); the shared
//! part is the byte budget and a FIFO of insertions across logs, so the oldest data is
//! evicted first, whatever log it belongs to.
//!
//! The same object carries the core's budget for chunks read from disk
//! (`ReadBudget`, in `read_budget.rs`), so that everything a core holds for readers
//! is bounded by two numbers, however many logs it has.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::rc::{Rc, Weak};

use bytes::Bytes;

use crate::read_budget::ReadBudget;

/// The default budget for chunks read from disk, per core.
pub const DEFAULT_READ_CACHE_BYTES: usize = 128 << 20;

/// A bounded FIFO of recently appended batches, shared by the logs of one core.
pub struct BatchCache {
    capacity_bytes: usize,
    used_bytes: Cell<usize>,
    order: RefCell<VecDeque<(u64, usize)>>,
    logs: RefCell<HashMap<u64, Weak<LogCache>>>,
    next_id: Cell<u64>,
    hits: Cell<u64>,
    misses: Cell<u64>,
    pub(crate) reads: ReadBudget,
}

/// Cache statistics of one core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    /// The budget for appended batches.
    pub capacity_bytes: usize,
    /// Bytes of appended batches held now.
    pub used_bytes: usize,
    /// Reads served from the cache.
    pub hits: u64,
    /// Reads of offsets older than the cache holds (served from disk).
    pub misses: u64,
    /// The budget for chunks read from disk.
    pub read_capacity_bytes: usize,
    /// Bytes of chunks read from disk held now.
    pub read_used_bytes: usize,
}

impl BatchCache {
    /// A cache of `capacity_bytes` for appended batches, with the default read budget.
    pub fn new(capacity_bytes: usize) -> Rc<BatchCache> {
        Self::with_read_budget(capacity_bytes, DEFAULT_READ_CACHE_BYTES)
    }

    /// A cache of `capacity_bytes` for appended batches and `read_bytes` for chunks read
    /// from disk (read-ahead included), both shared by every log opened with it.
    pub fn with_read_budget(capacity_bytes: usize, read_bytes: usize) -> Rc<BatchCache> {
        Rc::new(BatchCache {
            capacity_bytes,
            used_bytes: Cell::new(0),
            order: RefCell::new(VecDeque::new()),
            logs: RefCell::new(HashMap::new()),
            next_id: Cell::new(0),
            hits: Cell::new(0),
            misses: Cell::new(0),
            reads: ReadBudget::new(read_bytes),
        })
    }

    /// The budget for appended batches.
    pub fn capacity_bytes(&self) -> usize {
        self.capacity_bytes
    }

    /// What the cache holds now and how it has served.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            capacity_bytes: self.capacity_bytes,
            used_bytes: self.used_bytes.get(),
            hits: self.hits.get(),
            misses: self.misses.get(),
            read_capacity_bytes: self.reads.capacity_bytes(),
            read_used_bytes: self.reads.used_bytes(),
        }
    }

    pub(crate) fn register(self: &Rc<Self>) -> Rc<LogCache> {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let log = Rc::new(LogCache {
            id,
            cache: self.clone(),
            entries: RefCell::new(VecDeque::new()),
        });
        self.logs.borrow_mut().insert(id, Rc::downgrade(&log));
        log
    }

    fn admit(&self, id: u64, len: usize) {
        self.order.borrow_mut().push_back((id, len));
        self.used_bytes.set(self.used_bytes.get() + len);
        while self.used_bytes.get() > self.capacity_bytes {
            let Some((victim, vlen)) = self.order.borrow_mut().pop_front() else {
                break;
            };
            self.used_bytes.set(self.used_bytes.get() - vlen);
            let log = self.logs.borrow().get(&victim).and_then(Weak::upgrade);
            match log {
                Some(log) => {
                    log.entries.borrow_mut().pop_front();
                }
                None => {
                    self.logs.borrow_mut().remove(&victim);
                }
            }
        }
    }
}

struct CachedBatch {
    base_offset: u64,
    next_offset: u64,
    bytes: Bytes,
}

/// One log's view of the core's cache.
pub(crate) struct LogCache {
    id: u64,
    cache: Rc<BatchCache>,
    entries: RefCell<VecDeque<CachedBatch>>,
}

impl LogCache {
    pub(crate) fn insert(&self, base_offset: u64, next_offset: u64, bytes: Bytes) {
        let len = bytes.len();
        self.entries.borrow_mut().push_back(CachedBatch {
            base_offset,
            next_offset,
            bytes,
        });
        self.cache.admit(self.id, len);
    }

    /// Drops the cached batches below `offset` (compaction rewrote them): reads there go to
    /// the segment files.
    pub(crate) fn forget_below(&self, offset: u64) {
        let mut entries = self.entries.borrow_mut();
        while entries.front().is_some_and(|e| e.next_offset <= offset) {
            entries.pop_front();
        }
    }

    /// Drops the cached batches at or above `offset` (a truncation cut them). Their bytes stay
    /// counted in the core's budget until their turn to be evicted comes, as with
    /// [`LogCache::forget_below`].
    pub(crate) fn forget_from(&self, offset: u64) {
        let mut entries = self.entries.borrow_mut();
        while entries.back().is_some_and(|e| e.next_offset > offset) {
            entries.pop_back();
        }
    }

    /// Whole batches from the one containing `offset`, below `visible_end`, up to `max_bytes`
    /// (at least one). `None` if `offset` is not cached.
    pub(crate) fn read(
        &self,
        offset: u64,
        max_bytes: usize,
        visible_end: u64,
    ) -> Option<Vec<Bytes>> {
        let entries = self.entries.borrow();
        let first = entries.front()?;
        if offset < first.base_offset {
            self.cache.misses.set(self.cache.misses.get() + 1);
            return None;
        }
        let start = entries.partition_point(|e| e.next_offset <= offset);
        let mut out = Vec::new();
        let mut total = 0;
        for e in entries.range(start..) {
            if e.base_offset >= visible_end {
                break;
            }
            if !out.is_empty() && total + e.bytes.len() > max_bytes {
                break;
            }
            total += e.bytes.len();
            out.push(e.bytes.clone());
            if total >= max_bytes {
                break;
            }
        }
        if out.is_empty() {
            return None;
        }
        self.cache.hits.set(self.cache.hits.get() + 1);
        Some(out)
    }
}

impl Drop for LogCache {
    fn drop(&mut self) {
        self.cache.logs.borrow_mut().remove(&self.id);
    }
}
