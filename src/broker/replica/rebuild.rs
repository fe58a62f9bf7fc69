//! The Raft log of a replica as raft-rs sees it (docs/replication.md §3.1-3.2): entries
//! rebuilt from the segment files (one record batch = one entry, term = the batch's
//! `partition_leader_epoch`) and the side log (Raft-only entries), above the snapshot point.
//! Raft indexes are dense and implied by position; a batch's Kafka offsets are in its header.
//!
//! `Rebuild` does that at open and is the only place that interleaves the two sources;
//! `entry_span` tells which Kafka offsets an entry covers (a follower truncating at a Raft
//! index cuts the segments at the first offset of that entry); `check_data_entry` is what a
//! follower checks of an entry before `Log::append_assigned` writes it.

use bytes::Bytes;
use raft::prelude::{Entry, EntryType};
use weir_storage::batch::{check_framing_stored, BatchHeader};

use super::side::SideEntry;
use super::state::SnapshotPoint;

/// The Kafka offsets of an entry: `[start, end)`; empty for a Raft-only entry (both its
/// `before_offset`).
pub fn entry_span(e: &Entry, before_offset: u64) -> Result<(u64, u64), String> {
    if e.data.is_empty() {
        return Ok((before_offset, before_offset));
    }
    let h =
        BatchHeader::parse(&e.data).ok_or_else(|| format!("entry {}: no batch header", e.index))?;
    let base = h.base_offset.get();
    if base < 0 {
        return Err(format!("entry {}: negative base offset {base}", e.index));
    }
    Ok((base as u64, h.last_offset() as u64 + 1))
}

/// A data entry as a follower accepts it: one whole stored batch (framing and CRC), whose
/// leader epoch is the entry's term, starting at `expected_offset` (the end of the entry
/// before it). The batch's offsets `[start, end)`.
pub fn check_data_entry(e: &Entry, expected_offset: u64) -> Result<(u64, u64), String> {
    if e.get_entry_type() != EntryType::EntryNormal {
        return Err(format!(
            "entry {}: membership changes are not supported",
            e.index
        ));
    }
    let h = check_framing_stored(&e.data).map_err(|err| format!("entry {}: {err:?}", e.index))?;
    if h.total_bytes() != e.data.len() {
        return Err(format!(
            "entry {}: {} bytes hold a batch of {}",
            e.index,
            e.data.len(),
            h.total_bytes()
        ));
    }
    if i64::from(h.partition_leader_epoch.get()) != e.term as i64 {
        return Err(format!(
            "entry {}: batch epoch {} is not the entry's term {}",
            e.index,
            h.partition_leader_epoch.get(),
            e.term
        ));
    }
    weir_storage::batch::validate_stored(&e.data)
        .map_err(|err| format!("entry {}: {err:?}", e.index))?;
    let span = entry_span(e, expected_offset)?;
    if span.0 != expected_offset {
        return Err(format!(
            "entry {}: batch at offset {}, the log continues at {expected_offset}",
            e.index, span.0
        ));
    }
    Ok(span)
}

/// The Raft entries above `snap`, rebuilt from the stored batches from `snap.offset` on
/// (fed whole and in order, as the log returns them, by `batch`) interleaved with the side
/// entries above `snap.index`, each placed where its index says and checked against its
/// `before_offset`. An inconsistency (a gap in offsets, a side entry whose offset does not
/// match, terms going backwards) is an error: the replica's files disagree and it must not
/// vote or serve on a guess. Incremental, so a long log is never all in memory at once.
pub struct Rebuild<'a> {
    side: std::iter::Peekable<std::slice::Iter<'a, SideEntry>>,
    offset: u64,
    index: u64,
    term: u64,
}

impl<'a> Rebuild<'a> {
    pub fn new(snap: SnapshotPoint, side: &'a [SideEntry]) -> Rebuild<'a> {
        let skip = side.iter().take_while(|s| s.index <= snap.index).count();
        Rebuild {
            side: side[skip..].iter().peekable(),
            offset: snap.offset,
            index: snap.index + 1,
            term: snap.term,
        }
    }

    fn push(&mut self, e: Entry, out: &mut Vec<Entry>) -> Result<(), String> {
        if e.term < self.term {
            return Err(format!(
                "terms go backwards in the Raft log at index {} ({} after {})",
                e.index, e.term, self.term
            ));
        }
        self.term = e.term;
        self.index += 1;
        out.push(e);
        Ok(())
    }

    /// The side entries due at the next index (one that does not fit stays unconsumed).
    fn side_entries(&mut self, out: &mut Vec<Entry>) -> Result<(), String> {
        while let Some(s) = self.side.peek().filter(|s| s.index == self.index).cloned() {
            if s.before_offset != self.offset {
                return Err(format!(
                    "side entry {} was appended at offset {}, the log is at {} there",
                    s.index, s.before_offset, self.offset
                ));
            }
            self.side.next();
            let e = Entry {
                index: s.index,
                term: s.term,
                context: s.context.clone().into(),
                ..Default::default()
            };
            self.push(e, out)?;
        }
        Ok(())
    }

    /// The entries up to and including the one of this stored batch.
    pub fn batch(&mut self, b: Bytes) -> Result<Vec<Entry>, String> {
        let mut out = Vec::new();
        self.side_entries(&mut out)?;
        let h = BatchHeader::parse(&b).ok_or("a stored batch without a header")?;
        let e = Entry {
            index: self.index,
            term: h.partition_leader_epoch.get().max(0) as u64,
            data: b.clone(),
            ..Default::default()
        };
        let (start, end) = entry_span(&e, self.offset)?;
        if start != self.offset {
            return Err(format!(
                "batch at offset {start} where the Raft log continues at {}",
                self.offset
            ));
        }
        self.offset = end;
        self.push(e, &mut out)?;
        Ok(out)
    }

    /// The side entries after the last batch, and the index of the first side entry that
    /// lies beyond the log (to cut from the side file): left by a truncation that cut the
    /// segments and was interrupted before it cut the side log. What remains is then a
    /// prefix of the replica's log before that truncation, which Raft allows.
    pub fn finish(mut self) -> Result<(Vec<Entry>, Option<u64>), String> {
        let mut out = Vec::new();
        self.side_entries(&mut out).or_else(|e| {
            // A side entry at the next index whose offset is past the log's end: cut.
            if self
                .side
                .peek()
                .is_some_and(|s| s.before_offset > self.offset)
            {
                Ok(())
            } else {
                Err(e)
            }
        })?;
        Ok((out, self.side.next().map(|s| s.index)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_storage::batch::{assign_offset, RecordBatchBuilder};

    /// `Rebuild` over a whole list of batches.
    fn rebuild(
        snap: SnapshotPoint,
        batches: &[Bytes],
        side: &[SideEntry],
    ) -> Result<Vec<Entry>, String> {
        let mut r = Rebuild::new(snap, side);
        let mut out = Vec::new();
        for b in batches {
            out.extend(r.batch(b.clone())?);
        }
        let (rest, beyond) = r.finish()?;
        if let Some(i) = beyond {
            return Err(format!("side entry {i} lies beyond the log"));
        }
        out.extend(rest);
        Ok(out)
    }

    /// A stored batch of `n` records at `base` stamped with `epoch`.
    fn batch(base: u64, n: usize, epoch: i32) -> Bytes {
        let mut b = RecordBatchBuilder::new(1000);
        for i in 0..n {
            b = b.record(None, Some(format!("v{i}").as_bytes()), &[]);
        }
        let mut bytes = b.build().to_vec();
        assign_offset(&mut bytes, base as i64, epoch);
        Bytes::from(bytes)
    }

    fn side(index: u64, term: u64, before_offset: u64) -> SideEntry {
        SideEntry {
            index,
            term,
            before_offset,
            context: Vec::new(),
        }
    }

    #[test]
    fn rebuild_interleaves_batches_and_side_entries() {
        let batches = [batch(0, 3, 1), batch(3, 2, 1), batch(5, 1, 2)];
        let s = [side(1, 1, 0), side(4, 2, 5)];
        let log = rebuild(SnapshotPoint::default(), &batches, &s).unwrap();
        let view: Vec<(u64, u64, bool)> = log
            .iter()
            .map(|e| (e.index, e.term, e.data.is_empty()))
            .collect();
        assert_eq!(
            view,
            vec![
                (1, 1, true),
                (2, 1, false),
                (3, 1, false),
                (4, 2, true),
                (5, 2, false)
            ]
        );
        assert_eq!(entry_span(&log[4], 0).unwrap(), (5, 6));
        assert_eq!(entry_span(&log[3], 5).unwrap(), (5, 5));
        // Above a snapshot point: only what follows it.
        let snap = SnapshotPoint {
            index: 3,
            term: 1,
            offset: 5,
        };
        let log = rebuild(snap, &batches[2..], &s).unwrap();
        assert_eq!(log.iter().map(|e| e.index).collect::<Vec<_>>(), vec![4, 5]);
    }

    #[test]
    fn rebuild_refuses_files_that_disagree() {
        let batches = [batch(0, 3, 1), batch(3, 2, 1)];
        // The side entry says offset 2: the batches say 3.
        assert!(rebuild(SnapshotPoint::default(), &batches, &[side(2, 1, 2)]).is_err());
        // A gap in offsets.
        assert!(rebuild(
            SnapshotPoint::default(),
            &[batch(0, 3, 1), batch(4, 1, 1)],
            &[]
        )
        .is_err());
        // A side entry past the end.
        assert!(rebuild(SnapshotPoint::default(), &batches, &[side(9, 1, 5)]).is_err());
        // An interrupted truncation (segments cut, side log not): the side entries past the
        // segments' end are reported for cutting; what remains is the old log's prefix.
        for (leftover, first_cut) in [
            (vec![side(1, 1, 0), side(5, 2, 7), side(6, 2, 9)], 5),
            (vec![side(1, 1, 0), side(4, 2, 7)], 4),
        ] {
            let mut r = Rebuild::new(SnapshotPoint::default(), &leftover);
            let mut got = r.batch(batches[0].clone()).unwrap();
            got.extend(r.batch(batches[1].clone()).unwrap());
            let (rest, beyond) = r.finish().unwrap();
            assert_eq!((got.len(), rest.len()), (3, 0));
            assert_eq!(beyond, Some(first_cut));
        }
    }

    #[test]
    fn a_follower_checks_what_it_appends() {
        let mut e = Entry {
            index: 7,
            term: 3,
            data: batch(10, 2, 3),
            ..Default::default()
        };
        assert_eq!(check_data_entry(&e, 10).unwrap(), (10, 12));
        assert!(
            check_data_entry(&e, 11).is_err(),
            "not where the log continues"
        );
        e.term = 4;
        assert!(check_data_entry(&e, 10).is_err(), "epoch is not the term");
        e.term = 3;
        let mut bad = e.data.to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        e.data = Bytes::from(bad);
        assert!(check_data_entry(&e, 10).is_err(), "CRC");
        e.data = Bytes::from_static(&[0xff; 80]);
        assert!(check_data_entry(&e, 10).is_err(), "garbage");
        e.data = Bytes::new();
        assert!(check_data_entry(&e, 10).is_err(), "empty");
    }
}
