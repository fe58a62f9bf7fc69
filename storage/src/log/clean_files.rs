//! The files of compaction (`clean.rs` decides what is kept): reading a closed segment's
//! batches, writing a cleaned segment, the cleaner checkpoint, and finishing on open a swap
//! that a crash interrupted. Storage/DESIGN.md ("Compaction") gives the swap's steps and why
//! each crash case is safe.

use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};

use crate::batch::{self, BatchHeader, HEADER_BYTES};
use crate::error::{Error, Result};
use crate::io::{align_down, align_up, IoFile, Vfs, BLOCK};
use crate::recovery::ScanRules;
use crate::segment::{log_name, parse_log_name, segment_path, Segment};

/// Name of the file that records how far the log has been cleaned.
pub const CLEANER_CHECKPOINT_FILE: &str = "cleaner_checkpoint";
const CHECKPOINT_MAGIC: &[u8; 8] = b"WEIRCCP1";
/// Suffix of a cleaned segment being written (deleted on open: the cleaning did not commit).
pub(super) const CLEANED_SUFFIX: &str = ".cleaned";
/// Suffix of a cleaned segment that replaces the segments it covers (finished on open).
pub(super) const SWAP_SUFFIX: &str = ".swap";
/// Bytes read from a segment at a time while cleaning.
const READ_WINDOW: usize = 1 << 20;
/// Bytes written to a cleaned segment at a time.
const WRITE_CHUNK: usize = 1 << 20;

/// The checkpoint: cleaned up to `offset`; the earliest time (ms) a kept tombstone may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Checkpoint {
    pub offset: u64,
    pub tombstones_due_ms: Option<i64>,
}

impl Checkpoint {
    /// `magic[8] offset u64 due i64 crc32c u32` (32 bytes, big-endian; due -1 for none).
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut v = CHECKPOINT_MAGIC.to_vec();
        v.extend_from_slice(&self.offset.to_be_bytes());
        v.extend_from_slice(&self.tombstones_due_ms.unwrap_or(-1).to_be_bytes());
        v.extend_from_slice(&crc32c::crc32c(&v).to_be_bytes());
        v
    }

    pub(super) fn decode(b: &[u8]) -> Option<Checkpoint> {
        if b.len() != 28 || &b[..8] != CHECKPOINT_MAGIC {
            return None;
        }
        let crc = u32::from_be_bytes(b[24..28].try_into().ok()?);
        if crc32c::crc32c(&b[..24]) != crc {
            return None;
        }
        let offset = u64::from_be_bytes(b[8..16].try_into().ok()?);
        let due = i64::from_be_bytes(b[16..24].try_into().ok()?);
        Some(Checkpoint {
            offset,
            tombstones_due_ms: (due >= 0).then_some(due),
        })
    }
}

/// The whole batches of a closed segment, in order, CRC-checked; read straight from the file
/// in large windows (not through the readers' cache).
pub(super) struct SegmentBatches {
    file: IoFile,
    size: u64,
    pos: u64,
    window: Bytes,
    window_pos: u64,
    path: PathBuf,
}

impl SegmentBatches {
    pub(super) fn new(seg: &Segment) -> SegmentBatches {
        SegmentBatches {
            file: seg.file.clone(),
            size: seg.state.borrow().size,
            pos: 0,
            window: Bytes::new(),
            window_pos: 0,
            path: seg.log_path.clone(),
        }
    }

    async fn bytes(&mut self, from: u64, to: u64) -> Result<Bytes> {
        let have_to = self.window_pos + self.window.len() as u64;
        if from < self.window_pos || to > have_to {
            let start = align_down(from);
            let len = align_up(to - start).max(READ_WINDOW as u64);
            let len = len.min(align_up(self.size) - start) as usize;
            self.window = self.file.read_at(start, len).await?;
            self.window_pos = start;
            if self.window_pos + (self.window.len() as u64) < to {
                return Err(Error::CorruptFile {
                    path: self.path.clone(),
                    reason: format!("short read at {from}: the segment ends before its batches"),
                });
            }
        }
        let at = (from - self.window_pos) as usize;
        Ok(self.window.slice(at..at + (to - from) as usize))
    }

    pub(super) async fn next(&mut self) -> Result<Option<Bytes>> {
        if self.pos + HEADER_BYTES as u64 > self.size {
            return Ok(None);
        }
        let head = self.bytes(self.pos, self.pos + HEADER_BYTES as u64).await?;
        let total = BatchHeader::parse(&head).map_or(0, |h| h.total_bytes()) as u64;
        if total < HEADER_BYTES as u64 || self.pos + total > self.size {
            return Err(Error::CorruptBatch {
                position: self.pos,
                reason: crate::error::BatchError::Truncated {
                    have: (self.size - self.pos) as usize,
                    need: total as usize,
                },
            });
        }
        let b = self.bytes(self.pos, self.pos + total).await?;
        batch::validate_stored(&b).map_err(|reason| Error::CorruptBatch {
            position: self.pos,
            reason,
        })?;
        self.pos += total;
        Ok(Some(b))
    }
}

/// Writes a new segment file sequentially in aligned direct writes.
pub(super) struct SegmentWriter {
    file: IoFile,
    pending: BytesMut,
    written: u64,
}

impl SegmentWriter {
    pub(super) fn new(file: IoFile) -> SegmentWriter {
        SegmentWriter {
            file,
            pending: BytesMut::new(),
            written: 0,
        }
    }

    pub(super) fn position(&self) -> u64 {
        self.written + self.pending.len() as u64
    }

    pub(super) async fn push(&mut self, b: &[u8]) -> Result<()> {
        self.pending.extend_from_slice(b);
        while self.pending.len() >= WRITE_CHUNK {
            let chunk = self.pending.split_to(WRITE_CHUNK);
            self.write(&chunk).await?;
        }
        Ok(())
    }

    async fn write(&mut self, data: &[u8]) -> Result<()> {
        let len = align_up(data.len() as u64).max(BLOCK) as usize;
        let mut buf = self.file.alloc(len);
        buf.as_mut()[..data.len()].copy_from_slice(data);
        buf.as_mut()[data.len()..].fill(0);
        self.file.write_at(buf, self.written).await?;
        self.written += data.len() as u64;
        Ok(())
    }

    /// Writes what is left, cuts the file to its data and makes it durable. Returns its size.
    pub(super) async fn finish(mut self) -> Result<u64> {
        if !self.pending.is_empty() {
            let rest = std::mem::take(&mut self.pending);
            self.write(&rest).await?;
        }
        self.file.truncate(self.written).await?;
        self.file.fdatasync().await?;
        Ok(self.written)
    }
}

/// Removes a segment's files, indexes first: a crash in between never leaves an index beside
/// a `.log` it does not describe (the new segment of a swap takes the same name). Then its
/// compaction marker, if any: only during a committed swap, which open() finishes (and
/// writes the new segment's marker) if a crash stops it here.
pub(super) async fn remove_segment_files(vfs: &Vfs, dir: &Path, base: u64) -> Result<()> {
    let log = segment_path(dir, base);
    vfs.remove(&log.with_extension("index")).await?;
    vfs.remove(&log.with_extension("timeindex")).await?;
    vfs.remove(&log).await?;
    vfs.remove(&super::markers::compacted_path(&log)).await
}

pub(super) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Finishes what a crash interrupted (`Log::open`, before the segments are loaded): removes
/// `.cleaned` files (their cleaning had not committed), and completes each `.swap`: the
/// segments it covers — from its base offset to its last batch's end — are removed and it
/// becomes `<base>.log`. Its indexes are rebuilt by the segment scan that follows.
pub(super) async fn complete_swaps(vfs: &Vfs, dir: &Path, interval: u32) -> Result<()> {
    let names = vfs.list(dir)?;
    let mut changed = false;
    for name in &names {
        if name.ends_with(CLEANED_SUFFIX) {
            vfs.remove(&dir.join(name)).await?;
            changed = true;
        }
    }
    for name in &names {
        let Some(stem) = name.strip_suffix(SWAP_SUFFIX) else {
            continue;
        };
        let Some(base) = parse_log_name(stem) else {
            continue;
        };
        let swap_path = dir.join(name);
        let seg = Segment::new(
            base,
            vfs.open(&swap_path, false).await?,
            swap_path.clone(),
            interval,
        );
        let mut scanned = Vec::new();
        // The whole swap file is a cleaning's output (complete and fdatasync'ed before it
        // was named `.swap`): offsets may skip anywhere in it.
        crate::recovery::scan_segment(
            &seg,
            u64::from(interval.max(1)),
            ScanRules::trusted(),
            &mut scanned,
        )
        .await?;
        let (end, bytes) = {
            let st = seg.state.borrow();
            (st.next_offset, st.size)
        };
        drop(seg);
        tracing::warn!(dir = %dir.display(), base, end, "finishing a compaction swap a crash interrupted");
        let mut covered: Vec<u64> = vfs
            .list(dir)?
            .iter()
            .filter_map(|n| {
                let stem = n
                    .strip_suffix(".index")
                    .or_else(|| n.strip_suffix(".timeindex"))
                    .map(|s| format!("{s}.log"))
                    .unwrap_or_else(|| n.clone());
                parse_log_name(&stem)
            })
            .filter(|&b| base <= b && b < end)
            .collect();
        covered.dedup();
        for b in covered {
            remove_segment_files(vfs, dir, b).await?;
        }
        let log_path = dir.join(log_name(base));
        let marker = super::markers::Compacted {
            bytes,
            next_offset: end,
        };
        super::markers::write_compacted(vfs, &log_path, marker).await?;
        vfs.rename(&swap_path, &log_path).await?;
        changed = true;
    }
    if changed {
        vfs.sync_dir(dir).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_round_trips_and_refuses_damage() {
        for c in [
            Checkpoint {
                offset: 42,
                tombstones_due_ms: None,
            },
            Checkpoint {
                offset: 7,
                tombstones_due_ms: Some(1_700_000_000_000),
            },
        ] {
            let b = c.encode();
            assert_eq!(Checkpoint::decode(&b), Some(c));
            for i in 0..b.len() {
                let mut bad = b.clone();
                bad[i] ^= 0x04;
                assert_eq!(Checkpoint::decode(&bad), None, "flip at {i} accepted");
            }
        }
    }
}
