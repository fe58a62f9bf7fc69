//! Idempotent producers: per producer id, its epoch and the sequence ranges and offsets of
//! its last [`KEEP_BATCHES`] batches (Kafka's `ProducerStateManager`, without transactions).
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
//! The state is rebuilt on open: from the snapshot file [`SNAPSHOT_FILE`] (written at every
//! roll and at close, valid only for the log end or active segment base it records) and the
//! batches of the segments recovery scans. See storage/DESIGN.md.

use std::collections::{HashMap, VecDeque};

use crate::batch::BatchHeader;
use crate::error::{Error, Result};

/// The snapshot file in a log's directory.
pub const SNAPSHOT_FILE: &str = "producer_state";
const SNAPSHOT_MAGIC: &[u8; 8] = b"WEIRPST1";
/// Batches remembered per producer (Kafka's `NUM_BATCHES_TO_RETAIN`, the most a client
/// keeps in flight).
pub const KEEP_BATCHES: usize = 5;
/// Producers remembered per log; past it the least recently active ones are forgotten.
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

/// The idempotence fields of a batch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProducerBatch {
    pub producer_id: i64,
    pub epoch: i16,
    pub first_seq: i32,
    pub last_seq: i32,
}

impl ProducerBatch {
    /// `None` for a batch without a producer id.
    pub(crate) fn of(header: &BatchHeader) -> Option<ProducerBatch> {
        let producer_id = header.producer_id.get();
        let first_seq = header.base_sequence.get();
        if producer_id < 0 || first_seq < 0 {
            return None;
        }
        Some(ProducerBatch {
            producer_id,
            epoch: header.producer_epoch.get(),
            first_seq,
            last_seq: add_seq(first_seq, header.last_offset_delta.get()),
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
        p.batches.push_back(BatchMeta {
            first_seq: b.first_seq,
            last_seq: b.last_seq,
            base_offset,
            last_offset,
        });
        while p.batches.len() > KEEP_BATCHES {
            p.batches.pop_front();
        }
        p.last_offset = last_offset;
        if self.producers.len() > MAX_PRODUCERS {
            if let Some((&oldest, _)) = self.producers.iter().min_by_key(|(_, p)| p.last_offset) {
                self.producers.remove(&oldest);
            }
        }
    }

    /// `magic[8] covers u64 count u32 { pid i64 epoch i16 last_offset u64 n u8
    /// { first_seq i32 last_seq i32 base u64 last u64 }*n }*count crc32c u32`, big-endian.
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
            v.push(p.batches.len() as u8);
            for m in &p.batches {
                v.extend_from_slice(&m.first_seq.to_be_bytes());
                v.extend_from_slice(&m.last_seq.to_be_bytes());
                v.extend_from_slice(&m.base_offset.to_be_bytes());
                v.extend_from_slice(&m.last_offset.to_be_bytes());
            }
        }
        v.extend_from_slice(&crc32c::crc32c(&v).to_be_bytes());
        v
    }

    /// The state and the offset it covers; `None` for a damaged or foreign file.
    pub(crate) fn decode(b: &[u8]) -> Option<(ProducerState, u64)> {
        if b.len() < 24 || &b[..8] != SNAPSHOT_MAGIC {
            return None;
        }
        let (body, crc) = b.split_at(b.len() - 4);
        if crc32c::crc32c(body) != u32::from_be_bytes(crc.try_into().ok()?) {
            return None;
        }
        let mut r = Reader(&body[8..]);
        let covers = r.u64()?;
        let count = r.u32()? as usize;
        let mut state = ProducerState::default();
        for _ in 0..count.min(MAX_PRODUCERS) {
            let id = r.u64()? as i64;
            let epoch = r.u16()? as i16;
            let last_offset = r.u64()?;
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
            state.producers.insert(
                id,
                Producer {
                    epoch,
                    batches,
                    last_offset,
                },
            );
        }
        r.0.is_empty().then_some((state, covers))
    }
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
}
