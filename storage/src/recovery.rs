//! Scanning a segment file: finds the last valid batch and rebuilds the indexes on the way.
//! Used when a segment's indexes cannot be trusted: after an unclean shutdown (always for the
//! last segment) or when an index file is missing or damaged.
//!
//! A batch is valid if its own bytes are (length, magic, CRC-32C) and — since the CRC does
//! not cover the two header fields the log assigns, `base_offset` and
//! `partition_leader_epoch` — if those are what the log can have written there
//! ([`ScanRules`]): the base offset is exactly the previous batch's end (the segment's base
//! for the first batch), except in the bytes a cleaning wrote (`<base>.compacted`), and the
//! epoch is the one the leader-epoch list gives for that offset. A batch that breaks either
//! rule is cut like one that fails its CRC (storage/DESIGN.md, "Recovery").

use bytes::Bytes;

use crate::batch::{self, BatchHeader, HEADER_BYTES};
use crate::error::BatchError;
use crate::io::{align_down, IoFile};
use crate::producer_state::ProducerBatch;
use crate::segment::{Segment, SegmentState};
use crate::Result;

const SCAN_READ_BYTES: usize = 4 << 20;

/// What a scan requires of the fields outside a batch's CRC.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScanRules<'a> {
    /// The first bytes of the file a cleaning wrote (the segment's `<base>.compacted`
    /// marker; 0 for none): there a base offset may skip past the previous batch's end.
    pub compacted_bytes: u64,
    /// The offset the batch at `compacted_bytes` must start at (the marker's `next_offset`).
    pub compacted_next: u64,
    /// What the leader epochs must be.
    pub epochs: EpochRule<'a>,
}

/// What a scan requires of the batches' leader epochs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum EpochRule<'a> {
    /// Exactly the epoch of the last `(epoch, start offset)` entry starting at or before the
    /// batch's base offset, 0 before the first (the durable leader-epoch list, empty when the
    /// log has no `leader_epochs` file).
    Exact(&'a [(i32, u64)]),
    /// Never below the previous batch's (the list exists but is damaged).
    NonDecreasing,
    /// Not checked: data the log already recovered (a rescan for indexes or producers).
    Unchecked,
}

impl ScanRules<'_> {
    /// For a rescan of data that recovery already validated: offsets only go up, epochs are
    /// not checked.
    pub(crate) fn trusted() -> ScanRules<'static> {
        ScanRules {
            compacted_bytes: u64::MAX,
            compacted_next: 0,
            epochs: EpochRule::Unchecked,
        }
    }

    /// The base offset a batch at `pos` must have when the previous one ended at `next`:
    /// `Ok(offset)` exactly, or `Err(offset)` at least (inside the compacted bytes).
    fn expected_offset(&self, pos: u64, next: u64) -> std::result::Result<u64, u64> {
        match pos.cmp(&self.compacted_bytes) {
            std::cmp::Ordering::Less => Err(next),
            // Where the cleaned bytes end (the file's start if there are none): the marker
            // says where the offsets resume (the segment's base without a marker).
            std::cmp::Ordering::Equal => Ok(self.compacted_next.max(next)),
            std::cmp::Ordering::Greater => Ok(next),
        }
    }
}

/// Where and why a scan stopped before the end of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScanStop {
    pub position: u64,
    pub reason: Option<BatchError>,
}

/// The idempotent producers' batches of `segment`'s file, in offset order, as
/// [`scan_segment`] reports them (`(batch, base offset, last offset)`): the scan runs on a
/// copy of the segment, so its own state is untouched. For segments already validated
/// (sealed, or recovered at open).
pub(crate) async fn producer_batches(
    segment: &Segment,
    index_interval_bytes: u32,
) -> Result<Vec<(ProducerBatch, u64, u64)>> {
    let copy = Segment::new(
        segment.base_offset,
        segment.file.clone(),
        segment.log_path.clone(),
        index_interval_bytes,
    );
    let mut batches = Vec::new();
    scan_segment(
        &copy,
        u64::from(index_interval_bytes.max(1)),
        ScanRules::trusted(),
        &mut batches,
    )
    .await?;
    Ok(batches)
}

/// Scans `segment`'s file from the start, refilling its state with every valid batch.
/// Returns where the valid data ends and why.
///
/// The batches of idempotent producers are reported to `producers` (in offset order), so that
/// the log can rebuild their state.
pub(crate) async fn scan_segment(
    segment: &Segment,
    interval: u64,
    rules: ScanRules<'_>,
    producers: &mut Vec<(ProducerBatch, u64, u64)>,
) -> Result<ScanStop> {
    let file_size = segment.file.file_size().await?;
    let mut window = Vec::<u8>::new();
    let mut window_pos = 0u64; // file position of window[0]
    let mut read_to = 0u64; // file position up to which we have read
    let mut pos = 0u64;
    let mut st = SegmentState::empty(segment.base_offset);
    let mut prev_epoch: Option<i32> = None;
    let stop = loop {
        // Make sure the whole header, then the whole batch, is in the window.
        let need_header = pos + HEADER_BYTES as u64;
        if !fill(
            &segment.file,
            &mut window,
            &mut window_pos,
            &mut read_to,
            pos,
            need_header,
            file_size,
        )
        .await?
        {
            break ScanStop {
                position: pos,
                reason: None,
            };
        }
        let at = (pos - window_pos) as usize;
        let header_ok = batch::check_framing_stored(&window[at..]);
        let total = match header_ok {
            Ok(h) => h.total_bytes() as u64,
            Err(BatchError::Truncated { need, .. }) if need > HEADER_BYTES => need as u64,
            Err(e) => {
                break ScanStop {
                    position: pos,
                    reason: Some(e),
                }
            }
        };
        if !fill(
            &segment.file,
            &mut window,
            &mut window_pos,
            &mut read_to,
            pos,
            pos + total,
            file_size,
        )
        .await?
        {
            break ScanStop {
                position: pos,
                reason: Some(BatchError::Truncated {
                    have: (file_size - pos) as usize,
                    need: total as usize,
                }),
            };
        }
        if pos + total > crate::config::SEGMENT_POSITION_MAX {
            // Never written by a log that rolls at SEGMENT_BYTES_MAX; a crafted or foreign
            // file: cut here rather than index a position that does not fit.
            break ScanStop {
                position: pos,
                reason: Some(BatchError::PastSegmentLimit { end: pos + total }),
            };
        }
        let at = (pos - window_pos) as usize;
        let info = match batch::validate_stored(&window[at..at + total as usize]) {
            Ok(info) => info,
            Err(e) => {
                break ScanStop {
                    position: pos,
                    reason: Some(e),
                }
            }
        };
        // The base offset and the epoch are outside the CRC: a bit flipped in an unflushed
        // write there would otherwise serve the batch at another offset or epoch.
        let expected = rules.expected_offset(pos, st.next_offset);
        let offset_ok = info.base_offset >= 0
            && match expected {
                Ok(exact) => info.base_offset as u64 == exact,
                Err(min) => info.base_offset as u64 >= min,
            };
        if !offset_ok {
            let expected = expected.unwrap_or_else(|min| min);
            tracing::warn!(
                path = %segment.log_path.display(),
                position = pos,
                expected_offset = expected,
                found_offset = info.base_offset,
                "recovery: a batch's base offset does not follow the previous batch; the log is cut here"
            );
            break ScanStop {
                position: pos,
                reason: Some(BatchError::OffsetGap {
                    expected,
                    got: info.base_offset,
                }),
            };
        }
        let epoch = BatchHeader::parse(&window[at..]).map_or(0, |h| h.partition_leader_epoch.get());
        let expected_epoch = match rules.epochs {
            EpochRule::Exact(list) => Some(epoch_at(list, info.base_offset as u64)),
            EpochRule::NonDecreasing => prev_epoch.filter(|&p| epoch < p),
            EpochRule::Unchecked => None,
        };
        if let Some(want) = expected_epoch.filter(|&want| want != epoch) {
            tracing::warn!(
                path = %segment.log_path.display(),
                position = pos,
                offset = info.base_offset,
                expected_epoch = want,
                found_epoch = epoch,
                "recovery: a batch's leader epoch is not the one the log gave it; the log is cut here"
            );
            break ScanStop {
                position: pos,
                reason: Some(BatchError::EpochMismatch {
                    expected: want,
                    got: epoch,
                }),
            };
        }
        prev_epoch = Some(epoch);
        let base = info.base_offset as u64;
        let last = base + info.last_offset_delta as u64;
        let producer = ProducerBatch::of(&window[at..]);
        if last - segment.base_offset > u64::from(u32::MAX) {
            // A segment never spans more offsets than its 32-bit relative offsets hold.
            break ScanStop {
                position: pos,
                reason: Some(BatchError::OffsetGap {
                    expected: st.next_offset,
                    got: info.base_offset,
                }),
            };
        }
        Segment::record_into(
            &mut st,
            segment.base_offset,
            interval,
            pos,
            total,
            base,
            last,
            info.max_timestamp,
        );
        if let Some(b) = producer {
            producers.push((b, base, last));
        }
        pos += total;
        glommio::yield_if_needed().await;
    };
    if stop.position == rules.compacted_bytes {
        // The data ends (or was cut) where the cleaned bytes end: the log goes on at the
        // marker's offset — after a truncation into them, the truncation's offset, past any
        // offsets compaction removed before it — which is where appends then continue.
        st.next_offset = st.next_offset.max(rules.compacted_next);
    }
    st.visible_size = st.size;
    *segment.state.borrow_mut() = st;
    Ok(stop)
}

/// The epoch a batch at `offset` carries according to the leader-epoch list `list`: the
/// latest entry starting at or before it, 0 before the first.
pub(crate) fn epoch_at(list: &[(i32, u64)], offset: u64) -> i32 {
    list.iter().rev().find(|e| e.1 <= offset).map_or(0, |e| e.0)
}

/// Ensures the window holds file bytes `[from, to)`. Returns false if the file ends first.
async fn fill(
    file: &IoFile,
    window: &mut Vec<u8>,
    window_pos: &mut u64,
    read_to: &mut u64,
    from: u64,
    to: u64,
    file_size: u64,
) -> Result<bool> {
    if to > file_size {
        return Ok(false);
    }
    if to <= *read_to {
        return Ok(true);
    }
    // Drop what is behind `from` (keeping the window aligned to where reads resume).
    let keep_from = from.min(*read_to);
    let drop = (keep_from - *window_pos) as usize;
    if drop > 0 {
        window.drain(..drop);
        *window_pos += drop as u64;
    }
    while *read_to < to {
        let start = align_down(*read_to);
        let want = SCAN_READ_BYTES.max((to - start) as usize);
        let data: Bytes = file.read_at(start, want).await?;
        if data.is_empty() {
            return Ok(false);
        }
        let skip = (*read_to - start) as usize;
        if data.len() <= skip {
            return Ok(false);
        }
        window.extend_from_slice(&data[skip..]);
        *read_to = start + data.len() as u64;
    }
    Ok(true)
}
