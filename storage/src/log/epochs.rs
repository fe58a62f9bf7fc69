//! The leader-epoch list of a log (Kafka's leader-epoch checkpoint, KIP-101/KIP-279): for
//! every leader epoch its batches carry, the offset of its first batch. OffsetForLeaderEpoch
//! is answered from it ([`Log::end_offset_for_epoch`]); a follower uses that answer to find
//! where its log diverged from the leader's.
//!
//! Kept in memory and in the file `leader_epochs`
//! (`magic "WEIREPC1" count u32 { epoch i32 start_offset u64 }*count crc32c u32`, big-endian; the
//! CRC-32C covers everything before it). An entry is added when an append brings a batch
//! with an epoch above the last one, and the file is rewritten (write, fdatasync) *before*
//! that batch is written: no crash leaves a batch on disk whose epoch the file lacks. Entries
//! at or past the log end (their batch was lost in a crash, or cut by a truncation) are dropped
//! when the log opens and when it is truncated. Epoch 0 — every batch of a single-node log —
//! gets no entry, so a log that never saw a leader epoch has no file. A missing or damaged
//! file while the log's last batch carries an epoch above the list's last is rebuilt from the
//! batch headers of every segment (once, at open).

use std::rc::Rc;

use super::{Inner, Log};
use crate::batch::{self, BatchHeader, HEADER_BYTES};
use crate::error::{BatchError, Result};
use crate::segment::Segment;

/// Name of the leader-epoch list in a log directory.
pub const LEADER_EPOCHS_FILE: &str = "leader_epochs";
const MAGIC: &[u8; 8] = b"WEIREPC1";

/// `(epoch, start offset)` pairs, epochs strictly increasing, start offsets non-decreasing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LeaderEpochs {
    entries: Vec<(i32, u64)>,
}

impl LeaderEpochs {
    pub(crate) fn entries(&self) -> &[(i32, u64)] {
        &self.entries
    }

    pub(crate) fn latest(&self) -> Option<i32> {
        self.entries.last().map(|e| e.0)
    }

    /// Records that `epoch` starts at `offset`, if it is above the latest (and not 0).
    /// Returns whether the list changed.
    pub(crate) fn assign(&mut self, epoch: i32, offset: u64) -> bool {
        if epoch <= 0 || self.latest().is_some_and(|l| epoch <= l) {
            return false;
        }
        self.entries.push((epoch, offset));
        true
    }

    /// Drops the entries starting at or after `offset`. Returns whether the list changed.
    pub(crate) fn truncate_from(&mut self, offset: u64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.1 < offset);
        self.entries.len() != before
    }

    /// The list as the leader of epoch `current` answers for it, in a log from `log_start`
    /// to `log_end` ([`Log::epoch_history`]).
    pub(crate) fn history(&self, current: i32, log_start: u64, log_end: u64) -> EpochHistory {
        let mut entries = self.entries.clone();
        if entries.first().is_none_or(|f| f.1 > log_start) {
            // The batches before the first entry carry epoch 0 (all of a single-node log's):
            // Kafka's (0, log start) entry.
            entries.insert(0, (0, log_start));
        }
        if entries.last().is_some_and(|l| current > l.0) {
            // Kafka's leader assigns its epoch at the log end when it takes over.
            entries.push((current, log_end));
        }
        EpochHistory { entries, log_end }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = MAGIC.to_vec();
        v.extend_from_slice(&(self.entries.len() as u32).to_be_bytes());
        for (epoch, start) in &self.entries {
            v.extend_from_slice(&epoch.to_be_bytes());
            v.extend_from_slice(&start.to_be_bytes());
        }
        v.extend_from_slice(&crc32c::crc32c(&v).to_be_bytes());
        v
    }

    pub(crate) fn decode(b: &[u8]) -> Option<LeaderEpochs> {
        if b.len() < 16 || &b[..8] != MAGIC {
            return None;
        }
        let (body, crc) = b.split_at(b.len() - 4);
        if crc32c::crc32c(body) != u32::from_be_bytes(crc.try_into().ok()?) {
            return None;
        }
        let count = u32::from_be_bytes(body[8..12].try_into().ok()?) as usize;
        let rest = &body[12..];
        if rest.len() != count * 12 {
            return None;
        }
        let mut out = LeaderEpochs::default();
        for e in rest.chunks_exact(12) {
            let epoch = i32::from_be_bytes(e[..4].try_into().ok()?);
            let start = u64::from_be_bytes(e[4..].try_into().ok()?);
            let ordered = out.entries.last().is_none_or(|&(_, prev)| prev <= start);
            if !ordered || !out.assign(epoch, start) {
                return None;
            }
        }
        Some(out)
    }
}

impl Log {
    /// The leader-epoch list: `(epoch, start offset)` for every epoch above 0 the log's
    /// batches carry, oldest first.
    pub fn leader_epochs(&self) -> Vec<(i32, u64)> {
        self.inner.epochs.borrow().entries().to_vec()
    }

    /// Kafka's OffsetForLeaderEpoch (KIP-101, KIP-279) for `epoch`, with the epoch
    /// [`Log::set_leader_epoch`] set as the current one: see [`EpochHistory::end_offset_for`].
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, u64)> {
        self.epoch_history(self.leader_epoch())
            .end_offset_for(epoch)
    }

    /// The log's leader epochs as the leader of epoch `current` answers for them (a
    /// replicated partition's leader passes its term, which its batches need not carry yet).
    pub fn epoch_history(&self, current: i32) -> EpochHistory {
        let wm = self.watermarks();
        self.inner
            .epochs
            .borrow()
            .history(current, wm.log_start_offset, wm.log_end_offset)
    }
}

/// Where each leader epoch starts in a log, as its leader answers for them
/// ([`Log::epoch_history`]): Kafka's leader-epoch cache, which answers OffsetForLeaderEpoch
/// and the epoch ListOffsets names with an offset. A copy, taken at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochHistory {
    /// `(epoch, start offset)`, epochs increasing; never empty.
    entries: Vec<(i32, u64)>,
    log_end: u64,
}

impl EpochHistory {
    /// OffsetForLeaderEpoch for `epoch` (KIP-101, KIP-279): the largest epoch known at most
    /// `epoch` (or `epoch` itself when it is below every known one), and the offset after its
    /// last batch: where the next epoch starts, or the log end for the latest. `None` for an
    /// epoch above the latest, or negative (Kafka's UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
    ///
    /// A consumer at offset `p` that read the batch before `p` in epoch `e` is never told an
    /// end below `p` by a log holding that batch: epochs only grow along a log, so the first
    /// batch of a later epoch starts at or after `p`.
    pub fn end_offset_for(&self, epoch: i32) -> Option<(i32, u64)> {
        let latest = self.entries.last()?.0;
        if epoch < 0 || epoch > latest {
            return None;
        }
        if epoch == latest {
            return Some((epoch, self.log_end));
        }
        let higher = self.entries.iter().find(|e| e.0 > epoch)?;
        let floor = self.entries.iter().rev().find(|e| e.0 <= epoch);
        Some((floor.map_or(epoch, |f| f.0), higher.1))
    }

    /// The epoch of the batch holding `offset` (the latest epoch starting at or before it;
    /// at the log end, the current epoch). `None` below the first known start.
    pub fn epoch_at(&self, offset: u64) -> Option<i32> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.1 <= offset)
            .map(|e| e.0)
    }
}

impl Inner {
    /// Records epochs starting at offsets (batches about to be appended, under the append
    /// lock) and, if the list changed, makes it durable before they are written.
    pub(super) async fn note_epochs(&self, starts: &[(i32, u64)]) -> Result<()> {
        let changed = {
            let mut epochs = self.epochs.borrow_mut();
            let mut changed = false;
            for &(epoch, start) in starts {
                changed |= epochs.assign(epoch, start);
            }
            changed
        };
        if changed {
            self.save_epochs().await?;
        }
        Ok(())
    }

    pub(super) async fn save_epochs(&self) -> Result<()> {
        let bytes = self.epochs.borrow().encode();
        write_file(&self.vfs, &self.dir, &bytes).await
    }
}

/// Writes the `leader_epochs` file (write, fdatasync). When it is created, the directory is
/// fsync'ed as well: recovery reads "no file" as "no batch carries an epoch above 0"
/// (`StoredEpochs::Absent`), so the file must not vanish in a power loss once a batch
/// that needs it may be on disk.
async fn write_file(vfs: &crate::io::Vfs, dir: &std::path::Path, bytes: &[u8]) -> Result<()> {
    let path = dir.join(LEADER_EPOCHS_FILE);
    let created = !vfs.exists(&path);
    vfs.write_small(&path, bytes).await?;
    if created {
        vfs.sync_dir(dir).await?;
    }
    Ok(())
}

/// The `leader_epochs` file as recovery finds it, before anything is dropped from it.
pub(super) enum StoredEpochs {
    /// No file: no batch of the log carries an epoch above 0 (the file is created, and its
    /// directory entry made durable, before the first such batch is written).
    Absent,
    /// The file fails its CRC or does not decode (a write torn by a power loss).
    Damaged,
    /// The list as written.
    Valid(LeaderEpochs),
}

impl StoredEpochs {
    pub(super) async fn read(vfs: &crate::io::Vfs, dir: &std::path::Path) -> Result<StoredEpochs> {
        Ok(match vfs.read_small(&dir.join(LEADER_EPOCHS_FILE)).await? {
            None => StoredEpochs::Absent,
            Some(b) => LeaderEpochs::decode(&b).map_or(StoredEpochs::Damaged, StoredEpochs::Valid),
        })
    }

    /// What recovery can require of the batches' epochs: exactly the list's (none means
    /// epoch 0 everywhere), or only that they never go down when the list is damaged.
    pub(super) fn rule(&self) -> crate::recovery::EpochRule<'_> {
        match self {
            StoredEpochs::Absent => crate::recovery::EpochRule::Exact(&[]),
            StoredEpochs::Damaged => crate::recovery::EpochRule::NonDecreasing,
            StoredEpochs::Valid(list) => crate::recovery::EpochRule::Exact(list.entries()),
        }
    }
}

/// The leader-epoch list of a log opened with `segments` (ending at `log_end`): the file,
/// less the entries at or past the end; rebuilt from the batch headers if the log's last
/// batch carries an epoch the list does not know (a missing or damaged file).
pub(super) async fn load(
    vfs: &crate::io::Vfs,
    dir: &std::path::Path,
    segments: &std::collections::BTreeMap<u64, Rc<Segment>>,
    log_end: u64,
) -> Result<LeaderEpochs> {
    let path = dir.join(LEADER_EPOCHS_FILE);
    let mut epochs = vfs
        .read_small(&path)
        .await?
        .and_then(|b| LeaderEpochs::decode(&b))
        .unwrap_or_default();
    let mut changed = epochs.truncate_from(log_end);
    // The last batch is in the last non-empty segment (a roll leaves the new one empty).
    let mut last = None;
    for seg in segments.values().rev() {
        last = last_epoch(seg).await?;
        if last.is_some() {
            break;
        }
    }
    if last.is_some_and(|e| e > 0 && epochs.latest().is_none_or(|l| e > l)) {
        tracing::warn!(dir = %dir.display(), "leader-epoch list missing or behind the log: rebuilding it from the batch headers");
        epochs = LeaderEpochs::default();
        for seg in segments.values() {
            scan_epochs(seg, &mut epochs).await?;
        }
        changed = true;
    }
    if changed {
        write_file(vfs, dir, &epochs.encode()).await?;
    }
    Ok(epochs)
}

/// The header of the batch at `pos` of `seg`; `None` where no batch starts (a file whose
/// size is not its data's, e.g. grown by hand: the walks below stop there).
async fn header_at(seg: &Segment, pos: u64) -> Result<Option<BatchHeader>> {
    let head = seg.file.read_at(pos, HEADER_BYTES).await?;
    Ok(match batch::check_framing_stored(&head) {
        Ok(h) => Some(*h),
        Err(BatchError::Truncated { need, .. }) if need > HEADER_BYTES => {
            BatchHeader::parse(&head).copied()
        }
        Err(_) => None,
    })
}

/// The epoch of the last batch of `seg`, found from its last index entry.
async fn last_epoch(seg: &Segment) -> Result<Option<i32>> {
    let (size, mut pos) = {
        let st = seg.state.borrow();
        let rel = (st.next_offset.saturating_sub(seg.base_offset)).min(u64::from(u32::MAX));
        (st.size, u64::from(st.offset_index.lookup(rel as u32)))
    };
    let mut last = None;
    while pos < size {
        let Some(h) = header_at(seg, pos).await? else {
            break;
        };
        last = Some(h.partition_leader_epoch.get());
        pos += h.total_bytes() as u64;
        glommio::yield_if_needed().await;
    }
    Ok(last)
}

/// Adds the epochs of every batch of `seg` to `epochs`.
async fn scan_epochs(seg: &Segment, epochs: &mut LeaderEpochs) -> Result<()> {
    let size = seg.state.borrow().size;
    let mut pos = 0;
    while pos < size {
        let Some(h) = header_at(seg, pos).await? else {
            break;
        };
        epochs.assign(h.partition_leader_epoch.get(), h.base_offset.get() as u64);
        pos += h.total_bytes() as u64;
        glommio::yield_if_needed().await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn end_offsets_follow_kip_279_and_the_file_round_trips() {
        let mut e = LeaderEpochs::default();
        // Nothing known: every batch carries epoch 0, which ends at the log end.
        assert_eq!(e.history(0, 0, 10).end_offset_for(0), Some((0, 10)));
        assert_eq!(e.history(0, 0, 10).end_offset_for(1), None);
        assert!(!e.assign(0, 0), "epoch 0 has no entry");
        assert!(e.assign(2, 5));
        assert!(!e.assign(2, 7), "not a new epoch");
        assert!(!e.assign(1, 9), "epochs only go up");
        assert!(e.assign(5, 20));
        let h = e.history(5, 0, 30);
        // The latest epoch ends at the log end.
        assert_eq!(h.end_offset_for(5), Some((5, 30)));
        // An earlier epoch ends where the next starts.
        assert_eq!(h.end_offset_for(2), Some((2, 20)));
        // An unknown epoch between known ones: the largest known below it.
        assert_eq!(h.end_offset_for(4), Some((2, 20)));
        // The batches before the first entry carry epoch 0.
        assert_eq!(h.end_offset_for(1), Some((0, 5)));
        assert_eq!(h.epoch_at(4), Some(0));
        assert_eq!(h.epoch_at(5), Some(2));
        // With the log start past the first entry, an epoch below every known one is the
        // requested one, ending where the first starts.
        assert_eq!(e.history(5, 7, 30).end_offset_for(1), Some((1, 5)));
        assert_eq!(e.history(5, 7, 30).epoch_at(6), Some(2));
        // Above the current epoch, or negative: undefined.
        assert_eq!(h.end_offset_for(6), None);
        assert_eq!(h.end_offset_for(-1), None);
        // A leader of a later epoch than any batch: its epoch starts at the log end.
        let led = e.history(8, 0, 30);
        assert_eq!(led.end_offset_for(8), Some((8, 30)));
        assert_eq!(led.end_offset_for(6), Some((5, 30)));
        assert_eq!(led.epoch_at(29), Some(5));
        assert_eq!(led.epoch_at(30), Some(8));
        let bytes = e.encode();
        assert_eq!(LeaderEpochs::decode(&bytes), Some(e.clone()));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x04;
            assert_eq!(LeaderEpochs::decode(&bad), None, "flip at {i} accepted");
        }
        assert!(e.truncate_from(20));
        assert_eq!(e.entries(), &[(2, 5)]);
        assert!(!e.truncate_from(20));
    }
}
