//! A hashed timing wheel: the per-core list of parked fetches ordered by deadline.
//!
//! `slots` buckets of `tick` each; an entry expiring at tick `t` lives in bucket
//! `t % slots` (entries more than one rotation away stay there for several rotations and
//! are skipped until their tick comes). Each bucket is an intrusive doubly linked list over
//! a slab, so insert, remove and expire are O(1) per entry; advancing the wheel costs one
//! bucket per elapsed tick, whatever the number of parked entries.
//!
//! The wheel itself is plain data (no timers, no wakers): `crate::broker::shard` drives it with one
//! glommio timer per core and fires the parked fetches it returns.

use std::time::{Duration, Instant};

/// Handle to a wheel entry, for removal. Stale handles (entry already expired or removed)
/// are detected by the generation number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WheelKey {
    index: usize,
    generation: u32,
}

struct Entry<T> {
    value: Option<T>,
    expires_tick: u64,
    prev: Option<usize>,
    next: Option<usize>,
    generation: u32,
}

pub struct Wheel<T> {
    tick: Duration,
    origin: Instant,
    /// Every tick `<= current_tick` has been expired.
    current_tick: u64,
    heads: Vec<Option<usize>>,
    entries: Vec<Entry<T>>,
    free: Vec<usize>,
    len: usize,
}

impl<T> Wheel<T> {
    pub fn new(tick: Duration, slots: usize, origin: Instant) -> Wheel<T> {
        assert!(slots > 0 && !tick.is_zero(), "wheel needs slots and a tick");
        Wheel {
            tick,
            origin,
            current_tick: 0,
            heads: vec![None; slots],
            entries: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The tick containing `at`, rounded up (an entry never fires before its deadline).
    fn tick_of(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.origin);
        let tick_ns = self.tick.as_nanos();
        since.as_nanos().div_ceil(tick_ns) as u64
    }

    fn tick_at(&self, tick: u64) -> Instant {
        self.origin + Duration::from_nanos(self.tick.as_nanos() as u64 * tick)
    }

    /// When the driver must next call `advance`: the first tick whose bucket holds an
    /// entry (at most one rotation ahead; an entry several rotations away makes the driver
    /// wake once per rotation). `None` when the wheel is empty. Costs one scan of the
    /// bucket heads, not of the entries.
    pub fn next_wake_at(&self) -> Option<Instant> {
        if self.len == 0 {
            return None;
        }
        let slots = self.heads.len() as u64;
        (1..=slots)
            .map(|d| self.current_tick + d)
            .find(|t| self.heads[(t % slots) as usize].is_some())
            .map(|t| self.tick_at(t))
    }

    /// Parks `value` until `deadline`.
    pub fn insert(&mut self, deadline: Instant, value: T) -> WheelKey {
        let expires_tick = self.tick_of(deadline).max(self.current_tick + 1);
        let slot = (expires_tick % self.heads.len() as u64) as usize;
        let head = self.heads[slot];
        let index = match self.free.pop() {
            Some(i) => {
                let e = &mut self.entries[i];
                debug_assert!(e.value.is_none(), "free slab entry {i} still holds a value");
                e.value = Some(value);
                e.expires_tick = expires_tick;
                e.prev = None;
                e.next = head;
                i
            }
            None => {
                self.entries.push(Entry {
                    value: Some(value),
                    expires_tick,
                    prev: None,
                    next: head,
                    generation: 0,
                });
                self.entries.len() - 1
            }
        };
        if let Some(h) = head {
            self.entries[h].prev = Some(index);
        }
        self.heads[slot] = Some(index);
        self.len += 1;
        WheelKey {
            index,
            generation: self.entries[index].generation,
        }
    }

    fn unlink(&mut self, index: usize) -> T {
        let (prev, next, tick) = {
            let e = &self.entries[index];
            (e.prev, e.next, e.expires_tick)
        };
        match prev {
            Some(p) => self.entries[p].next = next,
            None => {
                let slot = (tick % self.heads.len() as u64) as usize;
                debug_assert_eq!(self.heads[slot], Some(index));
                self.heads[slot] = next;
            }
        }
        if let Some(n) = next {
            self.entries[n].prev = prev;
        }
        let e = &mut self.entries[index];
        e.prev = None;
        e.next = None;
        e.generation = e.generation.wrapping_add(1);
        self.free.push(index);
        self.len -= 1;
        e.value.take().expect("linked wheel entry has a value")
    }

    /// Removes the entry if it is still parked.
    pub fn remove(&mut self, key: WheelKey) -> Option<T> {
        let e = self.entries.get(key.index)?;
        if e.generation != key.generation || e.value.is_none() {
            return None;
        }
        Some(self.unlink(key.index))
    }

    /// Expires every entry whose deadline is `<= now`, appending them to `out`.
    pub fn advance(&mut self, now: Instant, out: &mut Vec<T>) {
        // An entry at tick t is due once now >= origin + t * tick.
        let since = now.saturating_duration_since(self.origin);
        let target = (since.as_nanos() / self.tick.as_nanos()) as u64;
        if self.len == 0 {
            self.current_tick = self.current_tick.max(target);
            return;
        }
        while self.current_tick < target {
            self.current_tick += 1;
            let slot = (self.current_tick % self.heads.len() as u64) as usize;
            let mut cursor = self.heads[slot];
            while let Some(i) = cursor {
                cursor = self.entries[i].next;
                if self.entries[i].expires_tick <= self.current_tick {
                    out.push(self.unlink(i));
                }
            }
            if self.len == 0 {
                self.current_tick = target;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn expires_in_deadline_order_and_never_early() {
        let t0 = Instant::now();
        let mut w = Wheel::new(ms(5), 8, t0);
        w.insert(t0 + ms(12), "a");
        w.insert(t0 + ms(3), "b");
        w.insert(t0 + ms(100), "c"); // several rotations away
        let mut out = Vec::new();
        w.advance(t0 + ms(4), &mut out);
        assert!(out.is_empty(), "nothing is due at 4 ms: {out:?}");
        w.advance(t0 + ms(5), &mut out);
        assert_eq!(out, vec!["b"]);
        out.clear();
        w.advance(t0 + ms(14), &mut out);
        assert!(out.is_empty());
        w.advance(t0 + ms(15), &mut out);
        assert_eq!(out, vec!["a"]);
        out.clear();
        w.advance(t0 + ms(99), &mut out);
        assert!(out.is_empty());
        w.advance(t0 + ms(100), &mut out);
        assert_eq!(out, vec!["c"]);
        assert!(w.is_empty());
    }

    #[test]
    fn next_wake_skips_empty_buckets() {
        let t0 = Instant::now();
        let mut w = Wheel::new(ms(2), 16, t0);
        assert_eq!(w.next_wake_at(), None);
        w.insert(t0 + ms(9), 1); // tick 5
        assert_eq!(w.next_wake_at(), Some(t0 + ms(10)));
        w.insert(t0 + ms(100), 2); // tick 50: bucket 2, several rotations away
        assert_eq!(
            w.next_wake_at(),
            Some(t0 + ms(4)),
            "bucket 2 comes first in the rotation"
        );
        let mut out = Vec::new();
        w.advance(t0 + ms(4), &mut out);
        assert!(out.is_empty(), "entry 2 is not due yet");
        assert_eq!(w.next_wake_at(), Some(t0 + ms(10)));
        w.advance(t0 + ms(10), &mut out);
        assert_eq!(out, vec![1]);
        w.advance(t0 + ms(100), &mut out);
        assert_eq!(out, vec![1, 2]);
        assert_eq!(w.next_wake_at(), None);
    }

    #[test]
    fn remove_is_o1_and_stale_keys_are_ignored() {
        let t0 = Instant::now();
        let mut w = Wheel::new(ms(1), 4, t0);
        let a = w.insert(t0 + ms(2), 1);
        let b = w.insert(t0 + ms(2), 2);
        let c = w.insert(t0 + ms(2), 3);
        assert_eq!(w.remove(b), Some(2));
        assert_eq!(w.remove(b), None);
        let d = w.insert(t0 + ms(2), 4); // reuses b's slab entry
        assert_eq!(w.remove(b), None, "stale key must not remove the new entry");
        let mut out = Vec::new();
        w.advance(t0 + ms(10), &mut out);
        out.sort();
        assert_eq!(out, vec![1, 3, 4]);
        assert_eq!(w.remove(a), None);
        assert_eq!(w.remove(c), None);
        assert_eq!(w.remove(d), None);
    }

    #[test]
    fn many_entries_random_model() {
        // Seeded LCG: compares the wheel with a sorted list of deadlines.
        let seed: u64 = 0x5eed;
        let mut x = seed;
        let mut rnd = move || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x >> 33
        };
        let t0 = Instant::now();
        let mut w = Wheel::new(ms(2), 16, t0);
        let mut model: Vec<(u64, u32, Option<WheelKey>)> = Vec::new();
        for id in 0..2000u32 {
            let d = rnd() % 300;
            let k = w.insert(t0 + ms(d), id);
            model.push((d, id, Some(k)));
        }
        for m in model.iter_mut() {
            if rnd() % 4 == 0 {
                let key = m.2.take().expect("inserted above");
                assert_eq!(w.remove(key), Some(m.1));
            }
        }
        let mut now = 0;
        while now <= 320 {
            let mut out = Vec::new();
            w.advance(t0 + ms(now), &mut out);
            for id in out {
                let m = &model[id as usize];
                assert!(m.2.is_some(), "removed entry {id} expired (seed {seed})");
                assert!(
                    m.0 <= now,
                    "entry {id} due at {} fired at {now} (seed {seed})",
                    m.0
                );
                assert!(
                    now - m.0 < 2 + 3,
                    "entry {id} due at {} fired late at {now}",
                    m.0
                );
            }
            now += 3;
        }
        assert!(w.is_empty());
    }
}
