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

/// A per-core budget of bytes (the memory of requests still being read, `queued.max.request.bytes`):
/// holders add what they take and give it back; a reader that would pass the limit waits until
/// others gave enough back. Single-core, no lock.
pub struct ByteBudget {
    used: Cell<usize>,
    limit: usize,
}

impl ByteBudget {
    pub fn new(limit: usize) -> ByteBudget {
        ByteBudget {
            used: Cell::new(0),
            limit,
        }
    }

    /// Moves the bytes held by `delta` (gives back when negative).
    pub fn change(&self, delta: isize) {
        self.used.set(self.used.get().saturating_add_signed(delta));
    }

    /// Waits until `extra` more bytes fit (or nothing is held: one reader is never stopped by
    /// the others' absence), checking every millisecond: the budget is full only under
    /// overload, where a wake-up list is not worth its cost on every read.
    pub async fn room_for(&self, extra: usize) {
        while self.used.get() > 0 && self.used.get() + extra > self.limit {
            glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
        }
    }
}

/// A lock granted in the order [`FifoLock::lock`] is *called* (glommio's `Semaphore` is not
/// FIFO): `Shard::call` takes its place in line for a destination core at once, so
/// pipelined calls leave in the order they were made. A waiter dropped before its turn gives
/// its place up.
#[derive(Default)]
pub struct FifoLock {
    next_ticket: Cell<u64>,
    serving: Cell<u64>,
    /// Tickets whose waiters gave up before their turn.
    abandoned: RefCell<std::collections::BTreeSet<u64>>,
    waiters: RefCell<std::collections::BTreeMap<u64, Waker>>,
}

/// Holding the lock; dropping it lets the next ticket in.
pub struct FifoGuard<'a> {
    lock: &'a FifoLock,
}

/// A place in line (resolves to the guard on its turn).
pub struct FifoWait<'a> {
    lock: &'a FifoLock,
    ticket: u64,
    acquired: bool,
}

impl FifoLock {
    /// Takes the next place in line now.
    pub fn lock(&self) -> FifoWait<'_> {
        let ticket = self.next_ticket.get();
        self.next_ticket.set(ticket + 1);
        FifoWait {
            lock: self,
            ticket,
            acquired: false,
        }
    }

    fn pass(&self, after: u64) {
        let mut next = after + 1;
        {
            let mut abandoned = self.abandoned.borrow_mut();
            while abandoned.remove(&next) {
                next += 1;
            }
        }
        self.serving.set(next);
        let waker = self.waiters.borrow_mut().remove(&next);
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<'a> Future for FifoWait<'a> {
    type Output = FifoGuard<'a>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        if self.lock.serving.get() == self.ticket {
            self.acquired = true;
            return Poll::Ready(FifoGuard { lock: self.lock });
        }
        self.lock
            .waiters
            .borrow_mut()
            .insert(self.ticket, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for FifoWait<'_> {
    fn drop(&mut self) {
        if self.acquired {
            return;
        }
        self.lock.waiters.borrow_mut().remove(&self.ticket);
        if self.lock.serving.get() == self.ticket {
            self.lock.pass(self.ticket);
        } else {
            self.lock.abandoned.borrow_mut().insert(self.ticket);
        }
    }
}

impl Drop for FifoGuard<'_> {
    fn drop(&mut self) {
        self.lock.pass(self.lock.serving.get());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn fifo_lock_serves_in_call_order_even_when_waiters_give_up() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let lock = Rc::new(FifoLock::default());
                let order = Rc::new(RefCell::new(Vec::new()));
                let first = lock.lock().await;
                let mut tasks = Vec::new();
                for i in 0..20u32 {
                    let (lock, order) = (lock.clone(), order.clone());
                    tasks.push(glommio::spawn_local(async move {
                        if i == 7 {
                            // Gives up its place before its turn.
                            drop(lock.lock());
                            return;
                        }
                        let _g = lock.lock().await;
                        order.borrow_mut().push(i);
                        futures_lite::future::yield_now().await;
                    }));
                }
                // Let every task take its place in line, then release.
                futures_lite::future::yield_now().await;
                drop(first);
                for t in tasks {
                    t.await;
                }
                let want: Vec<u32> = (0..20).filter(|&i| i != 7).collect();
                assert_eq!(*order.borrow(), want);
            })
            .expect("spawn")
            .join()
            .expect("join");
    }
}
