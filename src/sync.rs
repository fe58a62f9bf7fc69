//! Tiny single-threaded signalling primitives (one executor, no atomics, no locks).

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::task::{Poll, Waker};

/// A one-time value handed from one task to another on the same core.
pub struct Slot<T> {
    value: RefCell<Option<T>>,
    waker: RefCell<Option<Waker>>,
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot {
            value: RefCell::new(None),
            waker: RefCell::new(None),
        }
    }
}

impl<T> Slot<T> {
    pub fn set(&self, v: T) {
        *self.value.borrow_mut() = Some(v);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    pub async fn take(&self) -> T {
        poll_fn(|cx| match self.value.borrow_mut().take() {
            Some(v) => Poll::Ready(v),
            None => {
                *self.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }
}

/// A latch: once fired it stays fired; any number of tasks may wait on it.
#[derive(Default)]
pub struct Event {
    fired: Cell<bool>,
    waiters: RefCell<Vec<Waker>>,
}

impl Event {
    pub fn fire(&self) {
        if self.fired.replace(true) {
            return;
        }
        let ws = std::mem::take(&mut *self.waiters.borrow_mut());
        ws.into_iter().for_each(Waker::wake);
    }

    pub fn is_fired(&self) -> bool {
        self.fired.get()
    }

    pub async fn wait(&self) {
        poll_fn(|cx| {
            if self.fired.get() {
                return Poll::Ready(());
            }
            let mut ws = self.waiters.borrow_mut();
            if !ws.iter().any(|w| w.will_wake(cx.waker())) {
                ws.push(cx.waker().clone());
            }
            Poll::Pending
        })
        .await
    }
}

/// A wake-up flag for one waiting task, reset by the waiter (the wheel driver's "work
/// arrived" signal).
#[derive(Default)]
pub struct Notify {
    pending: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Notify {
    pub fn notify(&self) {
        self.pending.set(true);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    pub async fn notified(&self) {
        poll_fn(|cx| {
            if self.pending.replace(false) {
                return Poll::Ready(());
            }
            *self.waker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}
