//! The log's offsets, with names, in one struct; and a waiter list for "tell me when the
//! offset passes X" used by appends (written), flushes (durable) and readers (new data).

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::task::{Poll, Waker};

/// A snapshot of a log's watermarks. Invariant:
/// `log_start_offset <= flushed_offset <= high_watermark <= log_end_offset`
/// except right after retention moves `log_start_offset` past an unflushed tail (never in
/// practice: retention keeps the active segment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Watermarks {
    /// First offset still held (retention moves it forward).
    pub log_start_offset: u64,
    /// Next offset to be assigned by `append`.
    pub log_end_offset: u64,
    /// Every offset below this has been written to the segment files (survives kill -9) and
    /// is visible to readers.
    pub high_watermark: u64,
    /// Every offset below this has been fdatasync'ed (survives power loss).
    pub flushed_offset: u64,
}

/// A monotonically increasing position with async waiters.
#[derive(Default)]
pub(crate) struct Watch {
    value: Cell<u64>,
    failed: Cell<bool>,
    waiters: RefCell<Vec<(u64, Waker)>>,
}

impl Watch {
    pub(crate) fn new(value: u64) -> Self {
        Watch {
            value: Cell::new(value),
            ..Default::default()
        }
    }

    pub(crate) fn get(&self) -> u64 {
        self.value.get()
    }

    /// Moves the value forward (never back) and wakes waiters whose target is reached.
    pub(crate) fn advance(&self, to: u64) {
        if to <= self.value.get() {
            return;
        }
        self.value.set(to);
        let woken: Vec<Waker> = {
            let mut w = self.waiters.borrow_mut();
            let mut out = Vec::new();
            w.retain(|(target, waker)| {
                if *target <= to {
                    out.push(waker.clone());
                    false
                } else {
                    true
                }
            });
            out
        };
        woken.into_iter().for_each(Waker::wake);
    }

    /// Fails every current and future waiter.
    pub(crate) fn fail(&self) {
        self.failed.set(true);
        let woken: Vec<(u64, Waker)> = std::mem::take(&mut *self.waiters.borrow_mut());
        woken.into_iter().for_each(|(_, w)| w.wake());
    }

    /// Waits until the value is at least `target`. Returns false if the watch failed first.
    pub(crate) async fn wait_for(&self, target: u64) -> bool {
        poll_fn(|cx| {
            if self.value.get() >= target {
                return Poll::Ready(true);
            }
            if self.failed.get() {
                return Poll::Ready(false);
            }
            let mut w = self.waiters.borrow_mut();
            match w.iter_mut().find(|(_, wk)| wk.will_wake(cx.waker())) {
                Some(entry) => entry.0 = target,
                None => w.push((target, cx.waker().clone())),
            }
            Poll::Pending
        })
        .await
    }
}
