//! Tiny single-threaded signalling primitives (one executor, no atomics, no locks).

use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Poll, Waker};

/// Runs the futures concurrently and returns their outputs in order. Each poll polls the
/// unfinished ones in order, so the first poll starts them all, in order, before any of
/// them waits.
pub async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut pending = false;
        for (f, out) in futures.iter_mut().zip(outputs.iter_mut()) {
            if out.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *out = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs
        .into_iter()
        .map(|o| o.expect("every future finished"))
        .collect()
}

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
