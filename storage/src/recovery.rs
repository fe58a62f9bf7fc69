//! Scanning a segment file: finds the last valid batch (length, magic, CRC-32C and offsets
//! that only go up checked) and rebuilds the indexes on the way. Used when a segment's indexes
//! cannot be trusted: after an unclean shutdown (always for the last segment) or when an
//! index file is missing or damaged.

use bytes::Bytes;

use crate::batch::{self, HEADER_BYTES};
use crate::error::BatchError;
use crate::io::{align_down, IoFile};
use crate::producer_state::ProducerBatch;
use crate::segment::{Segment, SegmentState};
use crate::Result;

const SCAN_READ_BYTES: usize = 4 << 20;

/// Where and why a scan stopped before the end of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScanStop {
    pub position: u64,
    pub reason: Option<BatchError>,
}

/// Scans `segment`'s file from the start, refilling its state with every valid batch.
/// Returns where the valid data ends and why.
///
/// The batches of idempotent producers are reported to `producers` (in offset order), so that
/// the log can rebuild their state.
pub(crate) async fn scan_segment(
    segment: &Segment,
    interval: u64,
    producers: &mut Vec<(ProducerBatch, u64, u64)>,
) -> Result<ScanStop> {
    let file_size = segment.file.file_size().await?;
    let mut window = Vec::<u8>::new();
    let mut window_pos = 0u64; // file position of window[0]
    let mut read_to = 0u64; // file position up to which we have read
    let mut pos = 0u64;
    let mut st = SegmentState::empty(segment.base_offset);
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
        // Offsets only go up. They follow each other exactly, except where compaction
        // removed whole batches from a segment it rewrote (`log/clean.rs`).
        if info.base_offset < 0 || (info.base_offset as u64) < st.next_offset {
            break ScanStop {
                position: pos,
                reason: Some(BatchError::OffsetGap {
                    expected: st.next_offset,
                    got: info.base_offset,
                }),
            };
        }
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
    st.visible_size = st.size;
    *segment.state.borrow_mut() = st;
    Ok(stop)
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
