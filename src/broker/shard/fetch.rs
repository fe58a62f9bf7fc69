//! Fetch on the owning core: read whole batches (cache or direct reads), park the fetch on
//! its partitions and the wheel when it is short of `min_bytes`, wake it on append, on its
//! deadline (the wheel driver) or when the requesting core has enough (`FetchWake`).

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};
use weir::metadata::Metadata;

use tracing::warn;

use super::*;
use crate::broker::errors::{self, storage_error_code};
use crate::broker::group::offsets::{kafka_view, OffsetStore, OFFSETS_TOPIC};
use crate::broker::sync::Event;
use crate::broker::wheel::WheelKey;

impl Shard {
    // ---- Fetch ----

    pub(super) async fn read_parts(
        &self,
        parts: &[FetchPart],
        min_bytes: i32,
        max_bytes: i32,
    ) -> (Vec<FetchResult>, Vec<u64>) {
        let mut remaining = max_bytes.max(0) as usize;
        // What the fetch still needs before it may answer: reads wait for the disk only
        // until then, and past it take what the read-ahead holds (`Log::read_available`).
        let mut wanted = min_bytes.max(1) as usize;
        let mut out = Vec::with_capacity(parts.len());
        let mut hws = Vec::with_capacity(parts.len());
        for p in parts {
            // The metadata can name this broker the leader while its replica is not (yet):
            // a restarted broker replays an old leadership record before its group hears
            // from the leader elected meanwhile, and must not answer from its own log then
            // (an empty one would say OFFSET_OUT_OF_RANGE, and the consumer would reset).
            let part = match self.partition(&p.topic, p.partition) {
                None if p.offset >= 0 => match self.offsets_bucket(&p.topic, p.partition) {
                    Some(bucket) => {
                        let limit = (p.max_bytes.max(0) as usize).min(remaining.max(1));
                        let r = self.read_offsets_bucket(bucket, p, wanted, limit).await;
                        remaining = remaining.saturating_sub(r.bytes());
                        wanted = wanted.saturating_sub(r.bytes()).max(1);
                        hws.push(r.high_watermark.max(0) as u64);
                        out.push(r);
                        continue;
                    }
                    None => Err(errors::UNKNOWN_TOPIC_OR_PARTITION),
                },
                None => Err(errors::UNKNOWN_TOPIC_OR_PARTITION),
                Some(_) if !self.answers_fetch(p) => Err(errors::NOT_LEADER_OR_FOLLOWER),
                Some(part) => Ok(part),
            };
            let part = match part {
                Ok(part) => part,
                Err(error) => {
                    out.push(FetchResult {
                        error,
                        high_watermark: -1,
                        last_stable_offset: -1,
                        log_start_offset: -1,
                        ..Default::default()
                    });
                    hws.push(0);
                    continue;
                }
            };
            let wm = part.log.watermarks();
            let mut r = FetchResult {
                error: errors::NONE,
                high_watermark: wm.high_watermark as i64,
                last_stable_offset: wm.last_stable_offset as i64,
                log_start_offset: wm.log_start_offset as i64,
                ..Default::default()
            };
            if p.offset < 0 {
                r.error = errors::OFFSET_OUT_OF_RANGE;
            } else if let Some(node) = self.preferred_read_replica(p) {
                // Sent to a replica in its rack: no records from here (as Kafka).
                r.preferred_read_replica = Some(node);
            } else if remaining > 0 || out.iter().all(|r: &FetchResult| r.chunks.is_empty()) {
                let limit = (p.max_bytes.max(0) as usize).min(remaining.max(1));
                let read = if p.committed {
                    part.log
                        .read_committed(p.offset as u64, wanted, limit)
                        .await
                } else {
                    part.log
                        .read_available(p.offset as u64, wanted, limit)
                        .await
                };
                // A read_committed read gets the aborted transactions it meets, or fails:
                // records without them would show the consumer aborted records.
                let read = match read {
                    Ok(read) if p.committed => match read.next_offset() {
                        Some(end) => part
                            .log
                            .aborted_transactions(p.offset as u64, end)
                            .await
                            .map(|aborted| (read, aborted)),
                        None => Ok((read, Vec::new())),
                    },
                    other => other.map(|read| (read, Vec::new())),
                };
                match read {
                    Ok((read, aborted)) => {
                        r.high_watermark = read.watermarks.high_watermark as i64;
                        r.last_stable_offset = read.watermarks.last_stable_offset as i64;
                        r.log_start_offset = read.watermarks.log_start_offset as i64;
                        r.aborted = aborted
                            .iter()
                            .map(|a| (a.producer_id, a.first_offset as i64))
                            .collect();
                        remaining = remaining.saturating_sub(read.len());
                        wanted = wanted.saturating_sub(read.len()).max(1);
                        r.chunks = if p.topic == OFFSETS_TOPIC {
                            // In a cluster the topic's partitions hold weir's records.
                            kafka_view(&read.chunks)
                        } else {
                            read.chunks
                        };
                    }
                    Err(e) => {
                        if e.is_storage_error() {
                            part.log_io_error("read", &e);
                        }
                        r.error = storage_error_code(&e);
                    }
                }
            }
            hws.push(r.high_watermark.max(0) as u64);
            out.push(r);
        }
        (out, hws)
    }

    /// A fetch of a standalone broker's offsets bucket (`Shard::offsets_bucket`), in
    /// Kafka's format; `None`, a bucket nothing was committed to, reads as an empty log.
    async fn read_offsets_bucket(
        &self,
        bucket: Option<Rc<OffsetStore>>,
        p: &FetchPart,
        wanted: usize,
        limit: usize,
    ) -> FetchResult {
        let mut r = FetchResult {
            error: errors::NONE,
            high_watermark: 0,
            last_stable_offset: 0,
            log_start_offset: 0,
            ..Default::default()
        };
        let Some(store) = bucket else {
            if p.offset > 0 {
                r.error = errors::OFFSET_OUT_OF_RANGE;
            }
            return r;
        };
        match store
            .log()
            .read_available(p.offset as u64, wanted, limit)
            .await
        {
            Ok(read) => {
                r.high_watermark = read.watermarks.high_watermark as i64;
                r.last_stable_offset = read.watermarks.last_stable_offset as i64;
                r.log_start_offset = read.watermarks.log_start_offset as i64;
                r.chunks = kafka_view(&read.chunks);
            }
            Err(e) => {
                warn!(topic = %p.topic, partition = p.partition, error = %e, "reading an offsets bucket failed");
                r.error = storage_error_code(&e);
            }
        }
        r
    }

    /// Whether this core answers fetch `p` from its own log: as `answers_as_leader`, and a
    /// consumer's Fetch v11+ also on a follower (KIP-392), up to the high watermark it knows —
    /// one whose replica is sure (not rejoining after a lost disk) and whose metadata names
    /// another broker the leader. A restarting broker whose metadata still names it (an old
    /// leadership record replayed) does not answer: a consumer that took it for the leader
    /// would reset on the OFFSET_OUT_OF_RANGE of a log still catching up.
    fn answers_fetch(&self, p: &FetchPart) -> bool {
        if self.answers_as_leader(&p.topic, p.partition) {
            return true;
        }
        p.rack.is_some()
            && self.meta.borrow().placed_elsewhere(&p.topic, p.partition)
            && self
                .replica(&p.topic, p.partition)
                .is_some_and(|g| g.rejoin.is_sure())
    }

    /// KIP-392's rack-aware selector (`replica.selector.class`), on a leader, for a consumer
    /// that gave its rack: when this broker is in another rack, the node of an in-sync
    /// replica in the consumer's rack that holds the fetch offset — the most caught up of
    /// them — as Kafka's `RackAwareReplicaSelector` chooses.
    fn preferred_read_replica(&self, p: &FetchPart) -> Option<i32> {
        let rack = p.rack.as_deref().filter(|r| !r.is_empty())?;
        if !self.config.rack_aware_reads {
            return None;
        }
        let g = self.replica(&p.topic, p.partition)?;
        let meta = self.metadata();
        let here = meta.local_broker?;
        if !g.is_leader() || self.rack_of(&meta, here) == Some(rack) {
            return None;
        }
        let replicas = meta
            .topics
            .get(&p.topic)?
            .replicas
            .get(p.partition as usize)?;
        let raw = g.raw.borrow();
        let mut best: Option<(u64, u64, usize)> = None;
        for &(b, core) in replicas {
            if b == here || self.rack_of(&meta, b) != Some(rack) {
                continue;
            }
            let Some(pr) = raw.raft.prs().get(b) else {
                continue;
            };
            let holds = g.store.end_of(pr.matched) >= p.offset as u64;
            if pr.recent_active && holds && best.is_none_or(|(m, _, _)| pr.matched > m) {
                best = Some((pr.matched, b, core));
            }
        }
        drop(raw);
        let (_, b, core) = best?;
        Some(self.node_at(&meta, b, core))
    }

    /// The `broker.rack` of broker `b` (this one's from its config, another's as it
    /// registered it).
    fn rack_of<'a>(&'a self, meta: &'a Metadata, b: u64) -> Option<&'a str> {
        if meta.local_broker.is_none_or(|here| here == b) {
            return self.config.rack.as_deref();
        }
        meta.brokers.get(&b).and_then(|i| i.rack.as_deref())
    }

    /// Whether this core may answer for `topic`-`partition` from its own log
    /// (`Partition::leads`); a partition not open here is answered as not replicated unless
    /// the topic has more than one replica.
    pub(super) fn answers_as_leader(&self, topic: &str, partition: i32) -> bool {
        match self.partition(topic, partition) {
            Some(part) => part.leads(),
            None => self
                .meta
                .borrow()
                .topics
                .get(topic)
                .is_none_or(|t| Metadata::replication_factor(t) <= 1),
        }
    }

    /// Serves a fetch for partitions this core owns; parks it in the wheel while it has
    /// less than `min_bytes`, until data arrives (woken by `Log::on_append`), the deadline
    /// passes, or the requesting core says it has enough (`FetchWake`).
    pub async fn fetch_local(
        self: &Rc<Self>,
        key: Option<FetchKey>,
        min_bytes: i32,
        max_wait_ms: i32,
        max_bytes: i32,
        parts: &[FetchPart],
    ) -> Vec<FetchResult> {
        let wait = (max_wait_ms.max(0) as u64).min(self.config.fetch_max_wait_ms);
        let deadline = Instant::now() + Duration::from_millis(wait);
        let mut external = false;
        loop {
            let (results, hws) = self.read_parts(parts, min_bytes, max_bytes).await;
            let total: usize = results.iter().map(FetchResult::bytes).sum();
            // Errors, and partitions sent to another replica (KIP-392), are answered at once.
            let any_error = results
                .iter()
                .any(|r| r.error != errors::NONE || r.preferred_read_replica.is_some());
            if total as i64 >= i64::from(min_bytes)
                || any_error
                || external
                || Instant::now() >= deadline
                || self.shutdown.is_fired()
            {
                return self.count_fetched(parts, results);
            }
            if let Some(k) = key {
                if self.early_wakes.borrow_mut().remove(&k) {
                    return self.count_fetched(parts, results);
                }
            }
            // Data may have landed while we were reading: read again instead of parking.
            let moved = parts.iter().zip(&hws).any(|(p, hw)| {
                self.partition(&p.topic, p.partition)
                    .is_some_and(|part| part.log.watermarks().high_watermark != *hw)
            });
            if moved {
                continue;
            }
            if self.wheel.borrow().len() >= self.config.max_parked_fetches {
                if !self.warned_parked_limit.replace(true) {
                    warn!(
                        core = self.id,
                        limit = self.config.max_parked_fetches,
                        "parked fetch limit reached: fetches are answered at once (fetch.max.parked)"
                    );
                }
                return self.count_fetched(parts, results);
            }
            let parked = Rc::new(Parked {
                fired: Cell::new(false),
                external: Cell::new(false),
                signal: Event::default(),
            });
            for p in parts {
                if let Some(part) = self.partition(&p.topic, p.partition) {
                    let mut ws = part.waiters.borrow_mut();
                    // Amortised cleanup of entries left by fetches that timed out.
                    if ws.len() >= 32 && ws.len().is_power_of_two() {
                        ws.retain(|w| w.upgrade().is_some_and(|p| !p.fired.get()));
                    }
                    ws.push(Rc::downgrade(&parked));
                }
            }
            let wheel_key: WheelKey = {
                let mut wheel = self.wheel.borrow_mut();
                let k = wheel.insert(deadline, parked.clone());
                // Wake the driver if it sleeps past this deadline (or not at all).
                let sleeps_until = self.wheel_sleep_until.get();
                if sleeps_until.is_none_or(|t| deadline < t) {
                    self.wheel_work.notify();
                }
                k
            };
            if let Some(k) = key {
                self.remote_parked
                    .borrow_mut()
                    .insert(k, Rc::downgrade(&parked));
            }
            parked.signal.wait().await;
            if Instant::now() >= deadline {
                crate::broker::metrics::CoreMetrics::bump(&self.metrics.wheel_expired);
            } else {
                crate::broker::metrics::CoreMetrics::bump(&self.metrics.wheel_woken);
            }
            self.wheel.borrow_mut().remove(wheel_key);
            if let Some(k) = key {
                self.remote_parked.borrow_mut().remove(&k);
            }
            external = parked.external.get();
        }
    }

    /// Counts what a fetch returns (bytes out per partition, errors) before it goes.
    pub(super) fn count_fetched(
        &self,
        parts: &[FetchPart],
        results: Vec<FetchResult>,
    ) -> Vec<FetchResult> {
        for (p, r) in parts.iter().zip(&results) {
            self.metrics
                .error(kafka_protocol::messages::ApiKey::Fetch, r.error);
            if let Some(part) = self.partition(&p.topic, p.partition) {
                part.bytes_out.set(part.bytes_out.get() + r.bytes() as u64);
            }
        }
        results
    }

    /// This core's figures (`Req::Metrics`).
    /// (topic, partition, bytes on disk) of this core's partitions (DescribeLogDirs).
    pub(super) fn wake_remote(&self, key: FetchKey) {
        let parked = self.remote_parked.borrow_mut().remove(&key);
        match parked.and_then(|w| w.upgrade()) {
            Some(p) => {
                p.external.set(true);
                p.fire();
            }
            None => {
                let mut early = self.early_wakes.borrow_mut();
                if early.len() > 10_000 {
                    early.clear();
                }
                early.insert(key);
            }
        }
    }

    /// Drives the wheel with one timer: sleeps until the first non-empty bucket is due (or
    /// a fetch with an earlier deadline is parked), then expires what is due.
    pub async fn run_wheel(self: Rc<Self>) {
        let mut expired = Vec::new();
        loop {
            let next = self.wheel.borrow().next_wake_at();
            self.wheel_sleep_until.set(next);
            let woken = async {
                futures_lite::future::or(self.wheel_work.notified(), self.shutdown.wait()).await
            };
            match next {
                None => woken.await,
                Some(at) => {
                    let now = Instant::now();
                    if at > now {
                        futures_lite::future::or(glommio::timer::sleep(at - now), woken).await;
                    }
                }
            }
            self.wheel_sleep_until.set(None);
            if self.shutdown.is_fired() {
                // Answer everything parked now; later fetches return at once.
                let all: Vec<Rc<Parked>> = {
                    let mut w = self.wheel.borrow_mut();
                    let mut out = Vec::new();
                    w.advance(Instant::now() + Duration::from_secs(3600), &mut out);
                    out
                };
                all.iter().for_each(|p| p.fire());
                if self.wheel.borrow().is_empty() {
                    glommio::timer::sleep(Duration::from_millis(5)).await;
                }
                continue;
            }
            self.wheel
                .borrow_mut()
                .advance(Instant::now(), &mut expired);
            for p in expired.drain(..) {
                p.fire();
            }
        }
    }
}
