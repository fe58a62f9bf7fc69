//! Idempotent and transactional producers: per producer id, its epoch, the sequence ranges
//! and offsets of its last [`KEEP_BATCHES`] batches, and its open transaction (Kafka's
//! `ProducerStateManager`); per log, the aborted transactions.
//!
//! A batch carrying a producer id (`producer_id >= 0`) is checked before it is appended:
//! - an older epoch than the producer's is refused ([`Error::InvalidProducerEpoch`]);
//! - a batch whose sequence range equals one of the last five of that producer and epoch is
//!   a retry of a batch already in the log: it is not written again, the append answers with
//!   the original offsets ([`Check::Duplicate`]);
//! - otherwise its first sequence must follow the producer's last one (after a new epoch it
//!   must be 0), else [`Error::OutOfOrderSequence`];
//! - a producer id the log has no state for is accepted at any sequence (its state was
//!   evicted, or it wrote only to segments recovery did not scan), as Kafka does.
//!
//! Transactions: the first transactional batch of a producer opens its transaction at that
//! batch's offset; a control batch (a commit or abort marker, written by the transaction
//! coordinator) closes it. The earliest open transaction's first offset bounds the last
//! stable offset ([`ProducerState::first_unstable`]); an abort is remembered as
//! [`AbortedTxn`] (producer, first offset, marker offset) so that read_committed fetches can
//! list the aborted ranges they cover. A marker with a newer epoch bumps the producer's
//! epoch: the coordinator fences an old instance that way.
//!
//! The state is rebuilt on open: from the snapshot file [`SNAPSHOT_FILE`] (written at every
//! roll and at close, valid only for the log end or active segment base it records) and the
//! batches of the segments recovery scans. See storage/DESIGN.md.
//!
//! This file is long because the state, its checks and its snapshot format belong together
//! (the format is the state written out); about 200 of its lines are the unit tests.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::batch::{self, BatchHeader};
use crate::error::{Error, Result};

/// The snapshot file in a log's directory.
pub const SNAPSHOT_FILE: &str = "producer_state";
/// Version 1: producers only (read for upgrades); version 2 adds open transactions and the
/// aborted-transaction list.
const SNAPSHOT_MAGIC_V1: &[u8; 8] = b"WEIRPST1";
const SNAPSHOT_MAGIC: &[u8; 8] = b"WEIRPST2";
/// Batches remembered per producer (Kafka's `NUM_BATCHES_TO_RETAIN`, the most a client
/// keeps in flight).
pub const KEEP_BATCHES: usize = 5;
/// Producers remembered per log; past it the least recently active ones without an open
/// transaction are forgotten.
pub const MAX_PRODUCERS: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BatchMeta {
    first_seq: i32,
    last_seq: i32,
    base_offset: u64,
    last_offset: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Producer {
    epoch: i16,
    batches: VecDeque<BatchMeta>,
    /// Offset of its last batch: the eviction order.
    last_offset: u64,
    /// The first offset of its open transaction.
    txn_first: Option<u64>,
    /// When its last batch was appended (ms; recovery counts a replayed batch as seen at
    /// recovery): expiration (`producer.id.expiration.ms`).
    last_ms: i64,
}

/// An idempotent producer as a log knows it: its epoch and its last batch appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveProducer {
    /// The producer id.
    pub producer_id: i64,
    /// Its current epoch.
    pub epoch: i16,
    /// The sequence number of the last record of its last batch.
    pub last_sequence: i32,
    /// The offset of the first record of its last batch.
    pub last_batch_base_offset: u64,
    /// The offset of the last record of its last batch.
    pub last_offset: u64,
    /// The first offset of its open transaction, if one is open.
    pub txn_start_offset: Option<u64>,
}

/// An aborted transaction: a read_committed reader skips this producer's records from
/// `first_offset` up to the abort marker at `last_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    /// The producer id.
    pub producer_id: i64,
    /// The offset of the transaction's first record in this log.
    pub first_offset: u64,
    /// The offset of its abort marker.
    pub last_offset: u64,
}

/// What to do with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    Append,
    /// A retry of a batch already in the log at these offsets.
    Duplicate {
        base_offset: u64,
        last_offset: u64,
    },
}

/// What a producer's batch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Records outside a transaction.
    Data,
    /// Records of a transaction.
    Transactional,
    /// A control batch ending the producer's transaction.
    Marker { commit: bool },
}

/// The producer fields of a batch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProducerBatch {
    pub producer_id: i64,
    pub epoch: i16,
    pub first_seq: i32,
    pub last_seq: i32,
    pub kind: Kind,
    /// When the log saw it (ms, wall clock): appended, or scanned by recovery. Not the
    /// batch's own timestamps: a producer's clock (or CreateTime from the past) must not
    /// expire its state early.
    pub timestamp: i64,
}

impl ProducerBatch {
    /// `None` for a batch without a producer id (or a control batch that is not a
    /// transaction marker). `batch`: the whole batch, header first.
    pub(crate) fn of(batch: &[u8]) -> Option<ProducerBatch> {
        let header = BatchHeader::parse(batch)?;
        let producer_id = header.producer_id.get();
        if producer_id < 0 {
            return None;
        }
        let epoch = header.producer_epoch.get();
        let timestamp = now_ms();
        if header.is_control() {
            let commit = batch::marker_type(batch)?;
            return Some(ProducerBatch {
                producer_id,
                epoch,
                first_seq: -1,
                last_seq: -1,
                kind: Kind::Marker { commit },
                timestamp,
            });
        }
        let first_seq = header.base_sequence.get();
        if first_seq < 0 {
            return None;
        }
        Some(ProducerBatch {
            producer_id,
            epoch,
            first_seq,
            last_seq: add_seq(first_seq, header.last_offset_delta.get()),
            kind: if header.attributes.get() & batch::TRANSACTIONAL_FLAG != 0 {
                Kind::Transactional
            } else {
                Kind::Data
            },
            timestamp,
        })
    }
}

/// Sequence numbers wrap from i32::MAX to 0 (Kafka's `DefaultRecordBatch.incrementSequence`).
fn add_seq(seq: i32, delta: i32) -> i32 {
    let next = i64::from(seq) + i64::from(delta.max(0));
    if next > i64::from(i32::MAX) {
        (next - i64::from(i32::MAX) - 1) as i32
    } else {
        next as i32
    }
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ProducerState {
    producers: HashMap<i64, Producer>,
    /// Open transactions: first offset → producer id.
    open: BTreeMap<u64, i64>,
    /// Aborted transactions by marker offset.
    aborted: BTreeMap<u64, AbortedTxn>,
    /// Transactions closed by a marker that may not be durable yet: marker offset → first
    /// offset. Until the log's visible offset passes its marker such a transaction still
    /// bounds the stable offset, as an open one does (Kafka's unreplicated transactions): a
    /// replicated log's leader appends a marker before a majority has it, and a consumer must
    /// not read the transaction as ended before its end is committed. Not in the snapshot
    /// (see `settle`).
    ending: BTreeMap<u64, u64>,
}

impl ProducerState {
    pub(crate) fn len(&self) -> usize {
        self.producers.len()
    }

    /// The offset of each known producer's last batch's last record: compaction keeps that
    /// batch (emptied if need be) so that the producer's state can be rebuilt from the log.
    pub(crate) fn last_offsets(&self) -> HashMap<i64, u64> {
        self.producers
            .iter()
            .map(|(&pid, p)| (pid, p.last_offset))
            .collect()
    }

    /// The first offset of the earliest transaction that is open, or whose marker is at or
    /// after `visible` (appended, not yet durable or committed): nothing at or after it is
    /// stable.
    pub(crate) fn first_unstable(&self, visible: u64) -> Option<u64> {
        let open = self.open.keys().next().copied();
        let ending = self.ending.range(visible..).map(|(_, &first)| first).min();
        match (open, ending) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Forgets the ended transactions whose markers are below `visible` (durable or
    /// committed): they no longer bound the stable offset. A state rebuilt from a snapshot
    /// holds none; the markers replayed after the snapshot are known again.
    pub(crate) fn settle(&mut self, visible: u64) {
        if self
            .ending
            .first_key_value()
            .is_some_and(|(&m, _)| m < visible)
        {
            self.ending = self.ending.split_off(&visible);
        }
    }

    /// The aborted transactions a read of `[from, to)` may meet: those whose marker is at or
    /// after `from` and whose first record is before `to`, by marker offset.
    pub(crate) fn aborted_between(&self, from: u64, to: u64) -> Vec<AbortedTxn> {
        self.aborted
            .range(from..)
            .map(|(_, a)| *a)
            .filter(|a| a.first_offset < to)
            .collect()
    }

    /// Forgets the producers without an open transaction whose last batch was appended
    /// before `now_ms - max_age_ms` (Kafka's `producer.id.expiration.ms`). Returns how many.
    pub(crate) fn expire(&mut self, now_ms: i64, max_age_ms: u64) -> usize {
        let horizon = now_ms.saturating_sub(i64::try_from(max_age_ms).unwrap_or(i64::MAX));
        let before = self.producers.len();
        self.producers
            .retain(|_, p| p.txn_first.is_some() || p.last_ms >= horizon);
        before - self.producers.len()
    }

    /// Forgets the aborted transactions whose markers retention removed.
    pub(crate) fn forget_aborted_before(&mut self, log_start: u64) {
        self.aborted = self.aborted.split_off(&log_start);
    }

    /// Every producer the log remembers, by producer id: its epoch and its last batch.
    pub(crate) fn active(&self) -> Vec<ActiveProducer> {
        let mut out: Vec<ActiveProducer> = self
            .producers
            .iter()
            .filter_map(|(&producer_id, p)| {
                let last = p.batches.back()?;
                Some(ActiveProducer {
                    producer_id,
                    epoch: p.epoch,
                    last_sequence: last.last_seq,
                    last_batch_base_offset: last.base_offset,
                    last_offset: last.last_offset,
                    txn_start_offset: p.txn_first,
                })
            })
            .collect();
        out.sort_unstable_by_key(|a| a.producer_id);
        out
    }

    /// Checks `b` against the state (does not change it).
    pub(crate) fn check(&self, b: &ProducerBatch) -> Result<Check> {
        let Some(p) = self.producers.get(&b.producer_id) else {
            return Ok(Check::Append);
        };
        if b.epoch < p.epoch {
            return Err(Error::InvalidProducerEpoch {
                producer_id: b.producer_id,
                epoch: b.epoch,
                current: p.epoch,
            });
        }
        if matches!(b.kind, Kind::Marker { .. }) {
            return Ok(Check::Append);
        }
        if b.epoch > p.epoch {
            if b.first_seq != 0 {
                return Err(Error::OutOfOrderSequence {
                    producer_id: b.producer_id,
                    expected: 0,
                    got: b.first_seq,
                });
            }
            return Ok(Check::Append);
        }
        if let Some(d) = p
            .batches
            .iter()
            .find(|m| m.first_seq == b.first_seq && m.last_seq == b.last_seq)
        {
            return Ok(Check::Duplicate {
                base_offset: d.base_offset,
                last_offset: d.last_offset,
            });
        }
        match p.batches.back() {
            Some(last) if add_seq(last.last_seq, 1) != b.first_seq => {
                Err(Error::OutOfOrderSequence {
                    producer_id: b.producer_id,
                    expected: add_seq(last.last_seq, 1),
                    got: b.first_seq,
                })
            }
            _ => Ok(Check::Append),
        }
    }

    /// Records an appended batch (also used when replaying the log).
    pub(crate) fn update(&mut self, b: &ProducerBatch, base_offset: u64, last_offset: u64) {
        let p = self.producers.entry(b.producer_id).or_default();
        if b.epoch != p.epoch {
            p.epoch = b.epoch;
            p.batches.clear();
        }
        p.last_offset = last_offset;
        p.last_ms = p.last_ms.max(b.timestamp);
        match b.kind {
            Kind::Marker { commit } => {
                if let Some(first) = p.txn_first.take() {
                    self.open.remove(&first);
                    self.ending.insert(base_offset, first);
                    if !commit {
                        self.aborted.insert(
                            base_offset,
                            AbortedTxn {
                                producer_id: b.producer_id,
                                first_offset: first,
                                last_offset: base_offset,
                            },
                        );
                    }
                }
            }
            Kind::Data | Kind::Transactional => {
                if b.kind == Kind::Transactional && p.txn_first.is_none() {
                    p.txn_first = Some(base_offset);
                    self.open.insert(base_offset, b.producer_id);
                }
                p.batches.push_back(BatchMeta {
                    first_seq: b.first_seq,
                    last_seq: b.last_seq,
                    base_offset,
                    last_offset,
                });
                while p.batches.len() > KEEP_BATCHES {
                    p.batches.pop_front();
                }
            }
        }
        if self.producers.len() > MAX_PRODUCERS {
            // A producer with an open transaction is kept: it still bounds the stable offset.
            let oldest = self
                .producers
                .iter()
                .filter(|(_, p)| p.txn_first.is_none())
                .min_by_key(|(_, p)| p.last_offset)
                .map(|(&id, _)| id);
            if let Some(oldest) = oldest {
                self.producers.remove(&oldest);
            }
        }
    }

    /// `magic[8] covers u64 count u32 { pid i64 epoch i16 last_offset u64 txn_first i64
    /// last_ms i64 n u8 { first_seq i32 last_seq i32 base u64 last u64 }*n }*count aborted u32
    /// { pid i64 first u64 last u64 }*aborted crc32c u32`, big-endian; `txn_first` -1: none.
    /// `covers`: the log offset up to which the state is complete.
    pub(crate) fn encode(&self, covers: u64) -> Vec<u8> {
        let mut v = SNAPSHOT_MAGIC.to_vec();
        v.extend_from_slice(&covers.to_be_bytes());
        v.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        let mut ids: Vec<&i64> = self.producers.keys().collect();
        ids.sort_unstable();
        for id in ids {
            let p = &self.producers[id];
            v.extend_from_slice(&id.to_be_bytes());
            v.extend_from_slice(&p.epoch.to_be_bytes());
            v.extend_from_slice(&p.last_offset.to_be_bytes());
            let first = p.txn_first.map_or(-1, |f| f as i64);
            v.extend_from_slice(&first.to_be_bytes());
            v.extend_from_slice(&p.last_ms.to_be_bytes());
            v.push(p.batches.len() as u8);
            for m in &p.batches {
                v.extend_from_slice(&m.first_seq.to_be_bytes());
                v.extend_from_slice(&m.last_seq.to_be_bytes());
                v.extend_from_slice(&m.base_offset.to_be_bytes());
                v.extend_from_slice(&m.last_offset.to_be_bytes());
            }
        }
        v.extend_from_slice(&(self.aborted.len() as u32).to_be_bytes());
        for a in self.aborted.values() {
            v.extend_from_slice(&a.producer_id.to_be_bytes());
            v.extend_from_slice(&a.first_offset.to_be_bytes());
            v.extend_from_slice(&a.last_offset.to_be_bytes());
        }
        v.extend_from_slice(&crc32c::crc32c(&v).to_be_bytes());
        v
    }

    /// The state and the offset it covers; `None` for a damaged or foreign file. Reads
    /// version 1 snapshots (no transactions) too.
    pub(crate) fn decode(b: &[u8]) -> Option<(ProducerState, u64)> {
        if b.len() < 24 {
            return None;
        }
        let v2 = match &b[..8] {
            m if m == SNAPSHOT_MAGIC => true,
            m if m == SNAPSHOT_MAGIC_V1 => false,
            _ => return None,
        };
        let (body, crc) = b.split_at(b.len() - 4);
        if crc32c::crc32c(body) != u32::from_be_bytes(crc.try_into().ok()?) {
            return None;
        }
        let mut r = Reader(&body[8..]);
        let covers = r.u64()?;
        let count = r.u32()? as usize;
        let mut state = ProducerState::default();
        for _ in 0..count.min(MAX_PRODUCERS + 1) {
            let id = r.u64()? as i64;
            let epoch = r.u16()? as i16;
            let last_offset = r.u64()?;
            let (txn_first, last_ms) = if v2 {
                (u64::try_from(r.u64()? as i64).ok(), r.u64()? as i64)
            } else {
                // Version 1 kept no time: counted from now (not expired at once).
                (None, now_ms())
            };
            let n = r.u8()? as usize;
            if n > KEEP_BATCHES {
                return None;
            }
            let mut batches = VecDeque::with_capacity(n);
            for _ in 0..n {
                batches.push_back(BatchMeta {
                    first_seq: r.u32()? as i32,
                    last_seq: r.u32()? as i32,
                    base_offset: r.u64()?,
                    last_offset: r.u64()?,
                });
            }
            if let Some(first) = txn_first {
                state.open.insert(first, id);
            }
            state.producers.insert(
                id,
                Producer {
                    epoch,
                    batches,
                    last_offset,
                    txn_first,
                    last_ms,
                },
            );
        }
        if v2 {
            let aborted = r.u32()? as usize;
            if aborted > r.0.len() / 24 {
                return None;
            }
            for _ in 0..aborted {
                let a = AbortedTxn {
                    producer_id: r.u64()? as i64,
                    first_offset: r.u64()?,
                    last_offset: r.u64()?,
                };
                state.aborted.insert(a.last_offset, a);
            }
        }
        r.0.is_empty().then_some((state, covers))
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        if self.0.len() < N {
            return None;
        }
        let (a, rest) = self.0.split_at(N);
        self.0 = rest;
        a.try_into().ok()
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|a| a[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_be_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_be_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_be_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(pid: i64, epoch: i16, first: i32, last: i32) -> ProducerBatch {
        ProducerBatch {
            producer_id: pid,
            epoch,
            first_seq: first,
            last_seq: last,
            kind: Kind::Data,
            timestamp: 1_000,
        }
    }

    #[test]
    fn sequences_duplicates_epochs_and_snapshots() {
        let mut s = ProducerState::default();
        assert_eq!(
            s.check(&b(7, 0, 5, 9)).expect("check"),
            Check::Append,
            "unknown producer"
        );
        s.update(&b(7, 0, 0, 4), 100, 104);
        s.update(&b(7, 0, 5, 9), 105, 109);
        // A retry of either batch answers its offsets.
        assert_eq!(
            s.check(&b(7, 0, 0, 4)).expect("check"),
            Check::Duplicate {
                base_offset: 100,
                last_offset: 104
            }
        );
        assert_eq!(s.check(&b(7, 0, 10, 12)).expect("check"), Check::Append);
        assert!(matches!(
            s.check(&b(7, 0, 11, 12)),
            Err(Error::OutOfOrderSequence {
                expected: 10,
                got: 11,
                ..
            })
        ));
        assert!(matches!(
            s.check(&b(7, 0, 3, 6)),
            Err(Error::OutOfOrderSequence { .. })
        ));
        // A new epoch starts at 0; an old one is fenced.
        assert!(matches!(
            s.check(&b(7, 1, 10, 10)),
            Err(Error::OutOfOrderSequence { expected: 0, .. })
        ));
        s.update(&b(7, 1, 0, 0), 110, 110);
        assert!(matches!(
            s.check(&b(7, 0, 10, 10)),
            Err(Error::InvalidProducerEpoch { .. })
        ));
        // Only the last five batches are remembered.
        for i in 1..=6 {
            s.update(&b(7, 1, i, i), 110 + i as u64, 110 + i as u64);
        }
        assert!(matches!(
            s.check(&b(7, 1, 1, 1)),
            Err(Error::OutOfOrderSequence { expected: 7, .. })
        ));
        assert_eq!(
            s.check(&b(7, 1, 2, 2)).expect("check"),
            Check::Duplicate {
                base_offset: 112,
                last_offset: 112
            }
        );
        // Wrap-around.
        assert_eq!(add_seq(i32::MAX, 1), 0);
        assert_eq!(add_seq(i32::MAX - 1, 3), 1);
        // Snapshot round trip; damage is detected.
        let bytes = s.encode(999);
        let (back, covers) = ProducerState::decode(&bytes).expect("decode");
        assert_eq!((back.clone(), covers), (s.clone(), 999));
        let mut bad = bytes.clone();
        bad[20] ^= 1;
        assert!(ProducerState::decode(&bad).is_none());
        assert!(ProducerState::decode(&bytes[..bytes.len() - 1]).is_none());
    }

    fn txn(pid: i64, epoch: i16, first: i32, last: i32) -> ProducerBatch {
        ProducerBatch {
            kind: Kind::Transactional,
            ..b(pid, epoch, first, last)
        }
    }

    fn marker(pid: i64, epoch: i16, commit: bool) -> ProducerBatch {
        ProducerBatch {
            kind: Kind::Marker { commit },
            ..b(pid, epoch, -1, -1)
        }
    }

    #[test]
    fn transactions_bound_the_stable_offset_and_aborts_are_listed() {
        let mut s = ProducerState::default();
        s.update(&txn(1, 0, 0, 9), 10, 19);
        s.update(&b(2, 0, 0, 4), 20, 24);
        s.update(&txn(3, 0, 0, 0), 25, 25);
        s.update(&txn(1, 0, 10, 10), 26, 26);
        assert_eq!(s.first_unstable(0), Some(10), "producer 1 opened first");
        assert_eq!(s.active()[0].txn_start_offset, Some(10));
        s.update(&marker(1, 0, false), 27, 27);
        assert_eq!(
            s.first_unstable(27),
            Some(10),
            "producer 1's marker is not durable yet"
        );
        assert_eq!(s.first_unstable(28), Some(25), "producer 3 is still open");
        s.update(&marker(3, 0, true), 28, 28);
        assert_eq!(s.first_unstable(28), Some(25), "its marker is not durable");
        s.settle(29);
        assert_eq!(s.first_unstable(0), None, "both markers are durable");
        let aborted = AbortedTxn {
            producer_id: 1,
            first_offset: 10,
            last_offset: 27,
        };
        assert_eq!(s.aborted_between(0, 100), vec![aborted]);
        assert_eq!(s.aborted_between(27, 100), vec![aborted]);
        assert!(
            s.aborted_between(28, 100).is_empty(),
            "marker before the read"
        );
        assert!(s.aborted_between(0, 10).is_empty(), "read ends before it");
        // A marker with a newer epoch fences the old one and resets the sequences.
        s.update(&txn(1, 0, 11, 11), 29, 29);
        s.update(&marker(1, 1, false), 30, 30);
        assert!(matches!(
            s.check(&txn(1, 0, 12, 12)),
            Err(Error::InvalidProducerEpoch { current: 1, .. })
        ));
        assert!(matches!(
            s.check(&marker(1, 0, true)),
            Err(Error::InvalidProducerEpoch { .. })
        ));
        assert_eq!(s.check(&txn(1, 1, 0, 0)).expect("check"), Check::Append);
        // An open transaction and the aborted list survive a snapshot; retention forgets.
        s.update(&txn(2, 0, 5, 5), 31, 31);
        // The snapshot leaves out the ended transactions whose markers are not settled.
        s.settle(32);
        let (back, covers) = ProducerState::decode(&s.encode(32)).expect("decode");
        assert_eq!((back.clone(), covers), (s.clone(), 32));
        assert_eq!(back.first_unstable(32), Some(31));
        assert_eq!(back.aborted_between(0, 100).len(), 2);
        s.forget_aborted_before(28);
        assert_eq!(s.aborted_between(0, 100).len(), 1);
    }

    #[test]
    fn version_1_snapshots_are_read() {
        let mut s = ProducerState::default();
        s.update(&b(7, 2, 0, 4), 100, 104);
        let mut v1 = SNAPSHOT_MAGIC_V1.to_vec();
        v1.extend_from_slice(&105u64.to_be_bytes());
        v1.extend_from_slice(&1u32.to_be_bytes());
        v1.extend_from_slice(&7i64.to_be_bytes());
        v1.extend_from_slice(&2i16.to_be_bytes());
        v1.extend_from_slice(&104u64.to_be_bytes());
        v1.push(1);
        for x in [0i32, 4] {
            v1.extend_from_slice(&x.to_be_bytes());
        }
        for x in [100u64, 104] {
            v1.extend_from_slice(&x.to_be_bytes());
        }
        v1.extend_from_slice(&crc32c::crc32c(&v1).to_be_bytes());
        let (back, covers) = ProducerState::decode(&v1).expect("v1 decodes");
        assert_eq!((back.active(), covers), (s.active(), 105));
        assert_eq!(back.first_unstable(0), None);
    }

    #[test]
    fn idle_producers_expire_unless_a_transaction_is_open() {
        let mut s = ProducerState::default();
        s.update(&b(1, 0, 0, 0), 0, 0); // timestamp 1_000
        s.update(&txn(2, 0, 0, 0), 1, 1);
        s.update(
            &ProducerBatch {
                timestamp: 50_000,
                ..b(3, 0, 0, 0)
            },
            2,
            2,
        );
        assert_eq!(s.expire(60_000, 30_000), 1, "producer 1 is idle past 30 s");
        let left: Vec<i64> = s.active().iter().map(|a| a.producer_id).collect();
        assert_eq!(left, vec![2, 3], "producer 2's transaction is open");
        assert_eq!(s.first_unstable(0), Some(1));
        let (back, _) = ProducerState::decode(&s.encode(3)).expect("decode");
        assert_eq!(back, s, "last timestamps are in the snapshot");
    }
}
