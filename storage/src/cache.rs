//! The per-core cache of recently appended batches: tailing readers are served from memory.
//! One `BatchCache` is shared (by `Rc`) by all the logs of an executor; it evicts the oldest
//! entries, whatever log they belong to, once it holds more than its byte budget.

use std::rc::Rc;

/// A bounded FIFO of recently appended batches, shared by the logs of one core.
pub struct BatchCache {
    capacity_bytes: usize,
}

impl BatchCache {
    pub fn new(capacity_bytes: usize) -> Rc<BatchCache> {
        Rc::new(BatchCache { capacity_bytes })
    }

    pub fn capacity_bytes(&self) -> usize {
        self.capacity_bytes
    }
}
