//! Tiny single-threaded synchronisation: a one-value promise with many waiters, and a
//! notify. Everything runs on one glommio executor, so `Rc<RefCell<..>>` is enough.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

struct Slot<T> {
    value: Option<T>,
    resolver_gone: bool,
    wakers: Vec<Waker>,
}

/// Resolves a promise once. Dropping it unresolved makes waiters see `None`.
pub(crate) struct Resolver<T>(Rc<RefCell<Slot<T>>>);

/// Waits for a promise. Cloneable: every clone sees the same value.
pub(crate) struct Waiter<T>(Rc<RefCell<Slot<T>>>);

impl<T> Clone for Waiter<T> {
    fn clone(&self) -> Self {
        Waiter(self.0.clone())
    }
}

pub(crate) fn promise<T>() -> (Resolver<T>, Waiter<T>) {
    let slot = Rc::new(RefCell::new(Slot {
        value: None,
        resolver_gone: false,
        wakers: Vec::new(),
    }));
    (Resolver(slot.clone()), Waiter(slot))
}

impl<T> Resolver<T> {
    pub(crate) fn resolve(self, value: T) {
        let wakers = {
            let mut s = self.0.borrow_mut();
            s.value = Some(value);
            std::mem::take(&mut s.wakers)
        };
        wakers.into_iter().for_each(Waker::wake);
    }
}

impl<T> Drop for Resolver<T> {
    fn drop(&mut self) {
        let wakers = {
            let mut s = self.0.borrow_mut();
            s.resolver_gone = true;
            std::mem::take(&mut s.wakers)
        };
        wakers.into_iter().for_each(Waker::wake);
    }
}

impl<T: Clone> Waiter<T> {
    /// The value, if already resolved.
    pub(crate) fn peek(&self) -> Option<T> {
        self.0.borrow().value.clone()
    }
}

impl<T: Clone> Future for Waiter<T> {
    type Output = Option<T>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut s = self.0.borrow_mut();
        if let Some(v) = &s.value {
            return Poll::Ready(Some(v.clone()));
        }
        if s.resolver_gone {
            return Poll::Ready(None);
        }
        if !s.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            s.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// Wakes whoever waits; a notification given while nobody waits is kept for the next wait.
#[derive(Clone, Default)]
pub(crate) struct Notify(Rc<RefCell<NotifyState>>);

#[derive(Default)]
struct NotifyState {
    pending: bool,
    wakers: Vec<Waker>,
}

impl Notify {
    pub(crate) fn notify(&self) {
        let wakers = {
            let mut s = self.0.borrow_mut();
            s.pending = true;
            std::mem::take(&mut s.wakers)
        };
        wakers.into_iter().for_each(Waker::wake);
    }

    pub(crate) fn wait(&self) -> NotifyWait {
        NotifyWait(self.0.clone())
    }
}

pub(crate) struct NotifyWait(Rc<RefCell<NotifyState>>);

impl Future for NotifyWait {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.0.borrow_mut();
        if s.pending {
            s.pending = false;
            return Poll::Ready(());
        }
        if !s.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            s.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promise_resolves_all_waiters_and_drop_gives_none() {
        futures_lite::future::block_on(async {
            let (r, w) = promise::<u32>();
            let w2 = w.clone();
            r.resolve(5);
            assert_eq!(w.await, Some(5));
            assert_eq!(w2.await, Some(5));
            let (r, w) = promise::<u32>();
            drop(r);
            assert_eq!(w.await, None);
        });
    }

    #[test]
    fn notify_is_remembered() {
        futures_lite::future::block_on(async {
            let n = Notify::default();
            n.notify();
            n.wait().await;
        });
    }
}
