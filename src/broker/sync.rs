//! Tiny single-threaded signalling primitives (one executor, no atomics, no locks).

use std::cell::{Cell, RefCell};
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

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

/// Adds the task polling with `cx` to `waiters`, once.
fn register(waiters: &RefCell<Vec<Waker>>, cx: &Context<'_>) {
    let mut ws = waiters.borrow_mut();
    if !ws.iter().any(|w| w.will_wake(cx.waker())) {
        ws.push(cx.waker().clone());
    }
}

/// Wakes every task in `waiters` and forgets them (the list is taken first: a woken task may
/// register again).
fn wake_all(waiters: &RefCell<Vec<Waker>>) {
    let ws = std::mem::take(&mut *waiters.borrow_mut());
    ws.into_iter().for_each(Waker::wake);
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
        wake_all(&self.waiters);
    }

    pub fn is_fired(&self) -> bool {
        self.fired.get()
    }

    pub async fn wait(&self) {
        poll_fn(|cx| {
            if self.fired.get() {
                return Poll::Ready(());
            }
            register(&self.waiters, cx);
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

/// A wake-up any number of tasks may wait for: each [`Pulse::notified`] completes at the first
/// [`Pulse::notify`] after its first poll (earlier ones are not remembered, so a waiter checks
/// its condition, then awaits, with no yield between: nothing is missed).
#[derive(Default)]
pub struct Pulse {
    generation: Cell<u64>,
    waiters: RefCell<Vec<Waker>>,
}

impl Pulse {
    pub fn notify(&self) {
        self.generation.set(self.generation.get() + 1);
        wake_all(&self.waiters);
    }

    pub async fn notified(&self) {
        let mut seen = None;
        poll_fn(|cx| {
            let now = self.generation.get();
            if *seen.get_or_insert(now) != now {
                return Poll::Ready(());
            }
            register(&self.waiters, cx);
            Poll::Pending
        })
        .await
    }
}

/// A per-core budget of bytes: the memory of requests being read and not yet answered
/// (`queued.max.request.bytes`, Kafka's socket-server memory pool). A connection takes a
/// [`Held`] for a frame's whole size once its size prefix has arrived, waiting for room only
/// then — never halfway through a frame — and the request keeps it until its task ends.
/// A holder therefore only ever waits for its own client's bytes or for request processing,
/// never for another reader: nothing can wait in a circle. Single-core, no lock.
pub struct ByteBudget {
    used: Cell<usize>,
    limit: usize,
    /// Readers waiting for room, woken (all, to re-check) when bytes are given back.
    waiters: RefCell<Vec<Waker>>,
    /// Times a reader had to wait (`weir_request_memory_waits_total`).
    waits: Cell<u64>,
}

impl ByteBudget {
    pub fn new(limit: usize) -> Rc<ByteBudget> {
        Rc::new(ByteBudget {
            used: Cell::new(0),
            limit,
            waiters: RefCell::new(Vec::new()),
            waits: Cell::new(0),
        })
    }

    pub fn used(&self) -> usize {
        self.used.get()
    }

    pub fn waits(&self) -> u64 {
        self.waits.get()
    }

    fn fits(&self, bytes: usize) -> bool {
        // One request is never stopped by the others' absence (the limit is at least one
        // largest request, but a SASL-less frame may still be larger than what is left).
        self.used.get() == 0 || self.used.get() + bytes <= self.limit
    }

    /// Waits until `bytes` fit, then takes them.
    pub async fn take(self: &Rc<Self>, bytes: usize) -> Held {
        if !self.fits(bytes) {
            self.waits.set(self.waits.get() + 1);
            poll_fn(|cx| {
                if self.fits(bytes) {
                    return Poll::Ready(());
                }
                self.waiters.borrow_mut().push(cx.waker().clone());
                Poll::Pending
            })
            .await;
        }
        self.used.set(self.used.get() + bytes);
        Held {
            budget: self.clone(),
            bytes,
        }
    }

    fn give_back(&self, bytes: usize) {
        self.used.set(self.used.get() - bytes);
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        for w in waiters {
            w.wake();
        }
    }
}

/// Bytes taken from a [`ByteBudget`], given back when dropped.
pub struct Held {
    budget: Rc<ByteBudget>,
    bytes: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.give_back(self.bytes);
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

    #[test]
    fn byte_budget_makes_a_reader_wait_until_requests_finish() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let budget = ByteBudget::new(100);
                let a = budget.take(60).await;
                let b = budget.take(30).await;
                assert_eq!(budget.used(), 90);
                // 20 more do not fit: the reader waits, holding nothing meanwhile.
                let waiter = {
                    let budget = budget.clone();
                    glommio::spawn_local(async move { budget.take(20).await })
                };
                futures_lite::future::yield_now().await;
                assert_eq!((budget.used(), budget.waits()), (90, 1));
                drop(b); // a request finished: 60 + 20 fit
                let c = waiter.await;
                assert_eq!(budget.used(), 80);
                drop((a, c));
                assert_eq!(budget.used(), 0);
                // An empty budget takes a request larger than the limit (one largest
                // request is never refused for the others' absence).
                let big = budget.take(500).await;
                assert_eq!(budget.used(), 500);
                drop(big);
                assert_eq!(budget.used(), 0);
            })
            .unwrap()
            .join()
            .unwrap();
    }

    /// A replica's `handled` is waited on by a retried idempotent batch, a DeleteRecords and
    /// the tiering task at once: one notify wakes them all (a `Notify` keeps one waker, and a
    /// second waiter took the first one's wake-up), and a notify before a wait is not one.
    #[test]
    fn pulse_wakes_every_waiter_and_only_for_later_notifies() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let pulse = Rc::new(Pulse::default());
                pulse.notify(); // before anyone waits: not remembered
                let woken = Rc::new(Cell::new(0));
                let tasks: Vec<_> = (0..3)
                    .map(|_| {
                        let (pulse, woken) = (pulse.clone(), woken.clone());
                        glommio::spawn_local(async move {
                            pulse.notified().await;
                            woken.set(woken.get() + 1);
                        })
                    })
                    .collect();
                for _ in 0..3 {
                    futures_lite::future::yield_now().await;
                }
                assert_eq!(woken.get(), 0, "an earlier notify woke a waiter");
                pulse.notify();
                for t in tasks {
                    t.await;
                }
                assert_eq!(woken.get(), 3);
            })
            .expect("spawn")
            .join()
            .expect("join");
    }

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
