//! The log's offsets, with names, in one struct; and a waiter list for "tell me when the
//! offset passes X" used by appends (written), flushes (durable) and readers (new data).

use std::cell::{Cell, RefCell};
use std::collections::BTreeSet;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// A snapshot of a log's watermarks. Invariant:
/// `log_start_offset <= flushed_offset <= written_offset <= log_end_offset` and
/// `high_watermark = min(written_offset, committed_offset)`, except right after retention
/// moves `log_start_offset` past an unflushed tail (never in practice: retention keeps the
/// active segment). Without `LogConfig::committed_reads` the three of `high_watermark`,
/// `written_offset` and `committed_offset` are equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Watermarks {
    /// First offset still held (retention moves it forward).
    pub log_start_offset: u64,
    /// Next offset to be assigned by `append`.
    pub log_end_offset: u64,
    /// Every offset below this is visible to readers: written to the segment files (survives
    /// kill -9) and, with `LogConfig::committed_reads`, committed (`Log::set_committed`).
    /// Kafka's high watermark.
    pub high_watermark: u64,
    /// Every offset below this has been written to the segment files (survives kill -9).
    /// Equal to `high_watermark` unless `LogConfig::committed_reads` is set.
    pub written_offset: u64,
    /// The offset `Log::set_committed` last set (with `LogConfig::committed_reads`), or the
    /// written offset (without). `high_watermark` is the smaller of it and `written_offset`.
    pub committed_offset: u64,
    /// Every offset below this has been fdatasync'ed (survives power loss).
    pub flushed_offset: u64,
    /// Kafka's last stable offset: the high watermark, or the first offset of the earliest
    /// open transaction if that is lower. read_committed readers stop here.
    pub last_stable_offset: u64,
}

/// A monotonically increasing position with async waiters.
#[derive(Default)]
pub(crate) struct Watch {
    value: Cell<u64>,
    failed: Cell<bool>,
    waiters: RefCell<Vec<(u64, Waker)>>,
    /// How many times [`Watch::rewind`] moved the value back.
    rewinds: Cell<u64>,
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

    /// Moves the value back to `to` (a truncation, `log/replicate.rs`). Only called when every
    /// waiter's target had been reached before: a waiter that was woken but has not run yet
    /// still returns true (it compares the rewind count it started with), and later waiters
    /// wait for the value to pass their target again.
    pub(crate) fn rewind(&self, to: u64) {
        if to < self.value.get() {
            self.value.set(to);
            self.rewinds.set(self.rewinds.get() + 1);
        }
    }

    /// Fails every current and future waiter.
    pub(crate) fn fail(&self) {
        self.failed.set(true);
        let woken: Vec<(u64, Waker)> = std::mem::take(&mut *self.waiters.borrow_mut());
        woken.into_iter().for_each(|(_, w)| w.wake());
    }

    /// Waits until the value is at least `target`. Returns false if the watch failed first.
    pub(crate) async fn wait_for(&self, target: u64) -> bool {
        let rewinds = self.rewinds.get();
        poll_fn(|cx| {
            if self.rewinds.get() != rewinds && !self.failed.get() {
                // The value passed `target` and was moved back since (see `rewind`).
                return Poll::Ready(true);
            }
            self.poll_wait(target, cx)
        })
        .await
    }

    fn poll_wait(&self, target: u64, cx: &mut Context<'_>) -> Poll<bool> {
        if self.value.get() >= target {
            return Poll::Ready(true);
        }
        if self.failed.get() {
            return Poll::Ready(false);
        }
        let mut w = self.waiters.borrow_mut();
        match w.iter_mut().find(|(_, wk)| wk.will_wake(cx.waker())) {
            // One task can wait for several targets at once: futures polled together in one
            // task (a produce request's partitions, checked side by side, each waiting for
            // the core's inflate turn, a `FifoLock`). Its entry keeps the lowest target, so
            // the first one reached wakes it; it polls them all again and the rest register
            // anew. Keeping the last one polled instead lost that wake-up: the turn came to
            // a waiter nobody woke, and every compressed produce on the core hung behind it.
            Some(entry) => entry.0 = entry.0.min(target),
            None => w.push((target, cx.waker().clone())),
        }
        Poll::Pending
    }
}

/// A first-come-first-served lock for one executor. The place in line is taken when
/// [`FifoLock::lock`] is *called*, so callers get the lock in the order they asked for it.
/// (glommio's `Semaphore` is not FIFO: a task arriving while a woken waiter has not run
/// yet can take the permit first, which reordered appends to a partition.)
#[derive(Default)]
pub(crate) struct FifoLock {
    next_ticket: Cell<u64>,
    serving: Watch,
    /// Tickets whose waiters gave up before their turn.
    abandoned: RefCell<BTreeSet<u64>>,
}

pub(crate) struct FifoGuard<'a> {
    lock: &'a FifoLock,
}

pub(crate) struct FifoWait<'a> {
    lock: &'a FifoLock,
    ticket: u64,
    acquired: bool,
}

impl FifoLock {
    /// Takes the next place in line now; the returned future resolves when it is this
    /// caller's turn (or `None` once the lock is closed).
    pub(crate) fn lock(&self) -> FifoWait<'_> {
        let ticket = self.next_ticket.get();
        self.next_ticket.set(ticket + 1);
        FifoWait {
            lock: self,
            ticket,
            acquired: false,
        }
    }

    /// Fails every current and future waiter.
    pub(crate) fn close(&self) {
        self.serving.fail();
    }

    fn pass(&self, after: u64) {
        let mut next = after + 1;
        {
            let mut abandoned = self.abandoned.borrow_mut();
            while abandoned.remove(&next) {
                next += 1;
            }
        }
        self.serving.advance(next);
    }
}

impl<'a> Future for FifoWait<'a> {
    type Output = Option<FifoGuard<'a>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.lock.serving.poll_wait(self.ticket, cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(false) => Poll::Ready(None),
            Poll::Ready(true) => {
                debug_assert_eq!(
                    self.lock.serving.get(),
                    self.ticket,
                    "two holders of a FifoLock"
                );
                self.acquired = true;
                Poll::Ready(Some(FifoGuard { lock: self.lock }))
            }
        }
    }
}

impl Drop for FifoWait<'_> {
    fn drop(&mut self) {
        if self.acquired {
            return;
        }
        if self.lock.serving.get() == self.ticket {
            self.lock.pass(self.ticket);
        } else {
            self.lock.abandoned.borrow_mut().insert(self.ticket);
        }
    }
}

impl Drop for FifoGuard<'_> {
    fn drop(&mut self) {
        let ticket = self.lock.serving.get();
        self.lock.pass(ticket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    /// Regression: two waits polled by one task (one waker) for different targets. The
    /// second one's registration replaced the first's target, so reaching the lower target
    /// woke nobody: a FifoLock whose turn came to such a waiter stayed taken for good (every
    /// compressed produce on a core hung behind the thread's inflate turn).
    #[test]
    fn one_task_waiting_for_two_targets_wakes_at_the_lower_one() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let watch = Rc::new(Watch::new(0));
                let w = watch.clone();
                glommio::spawn_local(async move {
                    glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
                    w.advance(5);
                })
                .detach();
                let both = futures_lite::future::or(
                    async {
                        watch.wait_for(5).await;
                        "lower"
                    },
                    async {
                        watch.wait_for(10).await;
                        "higher"
                    },
                );
                // The timeout first: `or` prefers its first future when both are ready.
                let got = futures_lite::future::or(
                    async {
                        glommio::timer::sleep(std::time::Duration::from_secs(2)).await;
                        "nothing within 2 s"
                    },
                    both,
                )
                .await;
                assert_eq!(got, "lower");

                // The same through a FifoLock: two places in line taken in one task, the
                // turn reaching the first while the second was polled last.
                // 'static, so the guard can move into the task that lets it go.
                let lock: &'static FifoLock = Box::leak(Box::default());
                let held = lock.lock().await.expect("open");
                let (a, b) = (lock.lock(), lock.lock());
                glommio::spawn_local(async move {
                    glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
                    drop(held);
                })
                .detach();
                let first = futures_lite::future::or(
                    async {
                        glommio::timer::sleep(std::time::Duration::from_secs(2)).await;
                        "nothing within 2 s"
                    },
                    futures_lite::future::or(
                        async {
                            a.await.expect("open");
                            "first"
                        },
                        async {
                            let _g = b.await;
                            "second before first"
                        },
                    ),
                )
                .await;
                assert_eq!(first, "first");
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
                let first = lock.lock().await.expect("open");
                let mut tasks = Vec::new();
                for i in 0..20u32 {
                    let (lock, order) = (lock.clone(), order.clone());
                    tasks.push(glommio::spawn_local(async move {
                        if i == 7 {
                            // Gives up its place before its turn.
                            drop(lock.lock());
                            return;
                        }
                        let _g = lock.lock().await.expect("open");
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
