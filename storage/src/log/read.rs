//! Reads: [`Log::read`] and [`Log::read_available`] (what a Fetch uses), and the timestamp
//! lookups [`Log::offset_for_timestamp`] and [`Log::max_timestamp_offset`].
//!
//! Recent batches come from the core's batch cache (`cache.rs`) by reference. Older ones are
//! read from the segment files in aligned chunks with read-ahead (`reader.rs`), CRC-checked
//! before they are served (corrupt bytes are `CorruptBatch`, never data), and returned as
//! slices of those chunks: a batch that spans two chunks comes back in two pieces, joined only
//! if [`ReadOutcome::batches`] is asked for it. Nothing past the high watermark is returned.

use std::rc::Rc;

use bytes::{Bytes, BytesMut};

use super::{Inner, Log};
use crate::batch::{self, BatchHeader, HEADER_BYTES};
use crate::error::{Error, Result};
use crate::segment::Segment;
use crate::watermark::Watermarks;

/// Whole batches returned by [`Log::read`], as one or more zero-copy chunks.
#[derive(Debug, Clone, Default)]
pub struct ReadOutcome {
    /// Concatenated, these are whole record batches in offset order.
    pub chunks: Vec<Bytes>,
    /// Watermarks when the read was served.
    pub watermarks: Watermarks,
    /// The chunks joined, made only if `batches` is asked for batches that span chunks.
    joined: std::cell::OnceCell<Bytes>,
}

impl ReadOutcome {
    /// Bytes read, all chunks together.
    pub fn len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }

    /// True if nothing was read (the offset is at the high watermark).
    pub fn is_empty(&self) -> bool {
        self.chunks.iter().all(Bytes::is_empty)
    }
    /// Iterates over the batches (header and bytes). A batch split over several chunks (as
    /// [`Log::read_available`] may return it, to avoid a copy) is joined first.
    pub fn batches(&self) -> impl Iterator<Item = (&BatchHeader, &[u8])> {
        let chunks: &[Bytes] = if self.chunks.iter().all(|c| tiles(c)) {
            &self.chunks
        } else {
            std::slice::from_ref(self.joined.get_or_init(|| concat(self.chunks.clone())))
        };
        chunks.iter().flat_map(|c| batch::Batches::new(c))
    }
}

impl ReadOutcome {
    /// The offset after the last batch read (`None` if nothing was). Walks the batch headers
    /// across the chunks without joining them.
    pub fn next_offset(&self) -> Option<u64> {
        let mut next = None;
        let mut pieces = self.chunks.iter().filter(|c| !c.is_empty());
        let mut cur: &[u8] = pieces.next()?;
        loop {
            // The header of the batch at the front of `cur`, gathered across pieces.
            let mut head = [0u8; HEADER_BYTES];
            let (mut got, mut at, mut rest) = (0, cur, pieces.clone());
            while got < HEADER_BYTES {
                let n = at.len().min(HEADER_BYTES - got);
                head[got..got + n].copy_from_slice(&at[..n]);
                got += n;
                if got < HEADER_BYTES {
                    match rest.next() {
                        Some(p) => at = p,
                        None => return next,
                    }
                }
            }
            let h = BatchHeader::parse(&head)?;
            let total = h.total_bytes();
            if total == 0 {
                return next;
            }
            next = Some(h.last_offset() as u64 + 1);
            // Skip the batch.
            let mut skip = total;
            loop {
                if skip < cur.len() {
                    cur = &cur[skip..];
                    break;
                }
                skip -= cur.len();
                match pieces.next() {
                    Some(p) => cur = p,
                    None => return next,
                }
            }
        }
    }
}

/// Does `chunk` hold whole batches only?
fn tiles(chunk: &[u8]) -> bool {
    let mut pos = 0;
    while pos < chunk.len() {
        match BatchHeader::parse(&chunk[pos..]) {
            Some(h) if h.total_bytes() > 0 && pos + h.total_bytes() <= chunk.len() => {
                pos += h.total_bytes()
            }
            _ => return false,
        }
    }
    true
}

impl Log {
    /// Returns whole batches starting with the batch that contains `offset`, up to
    /// `max_bytes` (at least one batch if any is available). Empty at the high watermark.
    /// Offsets below the log start or above the log end are `OffsetOutOfRange`.
    pub async fn read(&self, offset: u64, max_bytes: usize) -> Result<ReadOutcome> {
        self.read_available(offset, max_bytes, max_bytes).await
    }

    /// Like [`Log::read`], but waits for the disk only until `min_bytes` (and at least one
    /// batch) are read; past that it adds only the whole batches whose bytes the read-ahead
    /// already holds in memory, up to `max_bytes`. What a fetch wants: a catch-up consumer
    /// gets its response as soon as the device has delivered something, while the read-ahead
    /// keeps the device busy for its next fetch — instead of one response that waits for
    /// `max_bytes` (tens of MiB) of disk reads with the device idle around it. Data in the
    /// write cache (tailing consumers) is always in memory, so this only changes catch-up
    /// reads.
    pub async fn read_available(
        &self,
        offset: u64,
        min_bytes: usize,
        max_bytes: usize,
    ) -> Result<ReadOutcome> {
        self.read_below(offset, min_bytes, max_bytes, self.inner.visible.get(), None)
            .await
    }

    /// Like [`Log::read_available`], but stops at the last stable offset: what a
    /// read_committed consumer may see (no batch of an open transaction, nor anything after
    /// one). The caller lists the aborted transactions it covers with
    /// [`Log::aborted_transactions`].
    pub async fn read_committed(
        &self,
        offset: u64,
        min_bytes: usize,
        max_bytes: usize,
    ) -> Result<ReadOutcome> {
        self.read_below(offset, min_bytes, max_bytes, self.inner.last_stable(), None)
            .await
    }

    /// Like [`Log::read_available`], but stops at the written offset, not the high watermark:
    /// with `LogConfig::committed_reads`, what a leader ships to its followers includes
    /// batches not committed yet (Raft's entries between the commit and the log end). The
    /// same as `read_available` without `committed_reads`. Never give its batches to a
    /// consumer: a truncation may still cut them, and it reads from `stored_start`, below a
    /// log start DeleteRecords moved inside a segment.
    pub async fn read_written(
        &self,
        offset: u64,
        min_bytes: usize,
        max_bytes: usize,
    ) -> Result<ReadOutcome> {
        self.read_below(
            offset,
            min_bytes,
            max_bytes,
            self.inner.hw.get(),
            Some(self.stored_start()),
        )
        .await
    }

    /// The first offset the segment files still hold: the log start, or below it when the
    /// log start was moved inside the first segment (DeleteRecords), whose batches stay on
    /// disk until the whole segment goes.
    pub fn stored_start(&self) -> u64 {
        let inner = &self.inner;
        let first = inner.segments.borrow().keys().next().copied();
        first.map_or(inner.log_start.get(), |b| b.min(inner.log_start.get()))
    }

    /// Whole batches from `offset` with base offsets below `hw`. `floor`: the lowest offset
    /// that may be read (default: the log start; a replica's Raft log reads from
    /// `stored_start`, since its entries are whole batches).
    async fn read_below(
        &self,
        offset: u64,
        min_bytes: usize,
        max_bytes: usize,
        hw: u64,
        floor: Option<u64>,
    ) -> Result<ReadOutcome> {
        let inner = &self.inner;
        let start = floor.unwrap_or_else(|| inner.log_start.get());
        // Below the local log: the remote tier's (a consumer's read, not a replica's).
        let remote = match (floor, inner.remote()) {
            (None, Some(r)) if offset < start => {
                let seg = r.find(offset);
                seg.filter(|_| offset >= inner.start_offset())
                    .map(|s| (r, s))
            }
            _ => None,
        };
        if (offset < start && remote.is_none()) || offset > inner.log_end.get() {
            return Err(Error::OffsetOutOfRange {
                offset,
                log_start_offset: if floor.is_some() {
                    start
                } else {
                    inner.start_offset()
                },
                log_end_offset: inner.log_end.get(),
            });
        }
        let mut out = ReadOutcome {
            chunks: Vec::new(),
            watermarks: self.watermarks(),
            joined: Default::default(),
        };
        if offset >= hw {
            return Ok(out);
        }
        if let Some((r, seg)) = remote {
            out.chunks = super::tiered::read_remote(&r, seg, offset, max_bytes, hw).await?;
            out.watermarks = self.watermarks();
            return Ok(out);
        }
        if let Some(chunks) = inner.cache.read(offset, max_bytes, hw) {
            out.chunks = chunks;
            return Ok(out);
        }
        let mut next = offset;
        loop {
            let seg = {
                let segs = inner.segments.borrow();
                segs.range(..=next).next_back().map(|(_, s)| s.clone())
            };
            let Some(seg) = seg else { break };
            let chunks = inner
                .read_segment(&seg, next, min_bytes.min(max_bytes), max_bytes, hw)
                .await?;
            if !chunks.is_empty() {
                out.chunks = chunks;
                break;
            }
            // Nothing at or after `next` in this segment: go on with the following one.
            let following = inner
                .segments
                .borrow()
                .range(seg.base_offset + 1..)
                .next()
                .map(|(b, _)| *b);
            match following {
                Some(b) if b < hw => next = b,
                _ => break,
            }
        }
        out.watermarks = self.watermarks();
        Ok(out)
    }

    /// First offset whose record timestamp is `>= timestamp_ms`, with that timestamp;
    /// `None` if every record is older. Compressed batches are decompressed (bounded by
    /// `inflated_max_bytes`); one that does not decode answers with its base offset and max
    /// timestamp.
    pub async fn offset_for_timestamp(&self, timestamp_ms: i64) -> Result<Option<(u64, i64)>> {
        let inner = &self.inner;
        let hw = inner.visible.get();
        let inflate_max = inner.config.borrow().inflated_max_bytes;
        if let Some(found) =
            super::tiered::remote_offset_for_timestamp(inner, timestamp_ms, hw, inflate_max).await?
        {
            return Ok(Some(found));
        }
        let segs: Vec<Rc<Segment>> = inner.segments.borrow().values().cloned().collect();
        for seg in segs {
            let (max_ts, limit, start_pos) = {
                let st = seg.state.borrow();
                let rel = st.time_index.lookup_before(timestamp_ms);
                (
                    st.max_timestamp,
                    st.visible_size,
                    u64::from(st.offset_index.lookup(rel)),
                )
            };
            if max_ts < timestamp_ms {
                continue;
            }
            let mut pos = start_pos;
            while pos + HEADER_BYTES as u64 <= limit {
                let header_bytes = concat(
                    inner
                        .reader
                        .bytes(&seg, pos, pos + HEADER_BYTES as u64, limit)
                        .await?,
                );
                let header = *BatchHeader::parse(&header_bytes).ok_or(Error::CorruptBatch {
                    position: pos,
                    reason: crate::error::BatchError::Truncated {
                        have: header_bytes.len(),
                        need: HEADER_BYTES,
                    },
                })?;
                let total = header.total_bytes() as u64;
                let base = header.base_offset.get() as u64;
                if base >= hw || pos + total > limit {
                    break;
                }
                let trusted = header.max_timestamp_trusted();
                if base >= inner.log_start.get()
                    && (!trusted || header.max_timestamp.get() >= timestamp_ms)
                {
                    let whole = concat(inner.reader.bytes(&seg, pos, pos + total, limit).await?);
                    let batch_max = batch::max_timestamp(&whole);
                    if batch_max >= timestamp_ms {
                        if let Some(records) = batch::decode_whole(&whole, inflate_max) {
                            if let Some(r) = records.iter().find(|r| r.timestamp >= timestamp_ms) {
                                return Ok(Some((r.offset as u64, r.timestamp)));
                            }
                        }
                        return Ok(Some((base, batch_max)));
                    }
                }
                pos += total;
            }
        }
        Ok(None)
    }

    /// The record with the largest timestamp among the readable records (Kafka's
    /// ListOffsets MAX_TIMESTAMP, KIP-734), remote ones included: its offset and timestamp;
    /// the earliest such record if several share it. `None` for an empty log. Local segments
    /// are visited from the largest `max_timestamp` down, and a visit stops as soon as no
    /// remaining segment can beat the best found, so usually one segment is scanned. For a
    /// compressed batch the batch's base offset stands for its records (they are not
    /// decompressed).
    pub async fn max_timestamp_offset(&self) -> Result<Option<(u64, i64)>> {
        let inner = &self.inner;
        let hw = inner.visible.get();
        let inflate_max = inner.config.borrow().inflated_max_bytes;
        let start = inner.log_start.get();
        let mut segs: Vec<(i64, Rc<Segment>)> = inner
            .segments
            .borrow()
            .values()
            .map(|s| (s.state.borrow().max_timestamp, s.clone()))
            .collect();
        // Largest max timestamp first; among equals the older segment (earlier offsets).
        segs.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.base_offset.cmp(&b.1.base_offset)));
        let mut best: Option<(u64, i64)> = None;
        for (seg_max, seg) in segs {
            // Visited in order: a segment whose max does not beat the best (ties lose to the
            // earlier segment) cannot hold a better record, nor can any after it.
            if best.is_some_and(|(_, ts)| seg_max <= ts) {
                break;
            }
            // Every batch before the time index's last entry below `seg_max` is older than
            // `seg_max`: when the whole segment is readable, the scan starts there.
            let (limit, mut pos) = {
                let st = seg.state.borrow();
                let from = if seg.base_offset >= start {
                    u64::from(st.offset_index.lookup(st.time_index.lookup_before(seg_max)))
                } else {
                    0
                };
                (st.visible_size, from)
            };
            while pos + HEADER_BYTES as u64 <= limit {
                let header_bytes = concat(
                    inner
                        .reader
                        .bytes(&seg, pos, pos + HEADER_BYTES as u64, limit)
                        .await?,
                );
                let header = *BatchHeader::parse(&header_bytes).ok_or(Error::CorruptBatch {
                    position: pos,
                    reason: crate::error::BatchError::Truncated {
                        have: header_bytes.len(),
                        need: HEADER_BYTES,
                    },
                })?;
                let total = header.total_bytes() as u64;
                let base = header.base_offset.get() as u64;
                if base >= hw || pos + total > limit {
                    break;
                }
                let last = base + header.last_offset_delta.get().max(0) as u64;
                // A header whose max timestamp is not to be believed may hide the best one.
                let header_max = if header.max_timestamp_trusted() {
                    header.max_timestamp.get()
                } else {
                    i64::MAX
                };
                let beats = match best {
                    None => true,
                    Some((off, ts)) => header_max > ts || (header_max == ts && base < off),
                };
                if last >= start && beats {
                    let whole = concat(inner.reader.bytes(&seg, pos, pos + total, limit).await?);
                    let batch_max = batch::max_timestamp(&whole);
                    let found = batch::decode_whole(&whole, inflate_max).and_then(|records| {
                        records
                            .iter()
                            .filter(|r| r.offset as u64 >= start && (r.offset as u64) < hw)
                            .fold(None, |acc: Option<(u64, i64)>, r| match acc {
                                Some((_, ts)) if r.timestamp <= ts => acc,
                                _ => Some((r.offset as u64, r.timestamp)),
                            })
                    });
                    let candidate = found.unwrap_or((base.max(start), batch_max));
                    let better = match best {
                        None => true,
                        Some((off, ts)) => {
                            candidate.1 > ts || (candidate.1 == ts && candidate.0 < off)
                        }
                    };
                    if better {
                        best = Some(candidate);
                    }
                    if candidate.1 >= seg_max {
                        break; // later batches of this segment can only tie, later
                    }
                }
                pos += total;
                glommio::yield_if_needed().await;
            }
        }
        // Below the local start, the remote tier: its segment with the largest max
        // timestamp holds the answer if that beats (or ties: earlier offsets) the local one.
        if let Some(remote_max) = super::tiered::remote_max_timestamp(inner)
            .filter(|&m| best.is_none_or(|(_, ts)| m >= ts))
        {
            if let Some(found) =
                super::tiered::remote_offset_for_timestamp(inner, remote_max, hw, inflate_max)
                    .await?
            {
                if best.is_none_or(|(off, ts)| found.1 > ts || (found.1 == ts && found.0 < off)) {
                    return Ok(Some(found));
                }
            }
        }
        Ok(best)
    }
}

impl Inner {
    /// Whole batches of `seg` from the one holding `offset`: waiting for the disk until
    /// `min_bytes` are read, then only those already in memory, up to `max_bytes`
    /// (`Log::read_available`).
    async fn read_segment(
        &self,
        seg: &Rc<Segment>,
        offset: u64,
        min_bytes: usize,
        max_bytes: usize,
        hw: u64,
    ) -> Result<Vec<Bytes>> {
        let (limit, mut pos) = {
            let st = seg.state.borrow();
            let rel = offset
                .saturating_sub(seg.base_offset)
                .min(u64::from(u32::MAX)) as u32;
            (st.visible_size, u64::from(st.offset_index.lookup(rel)))
        };
        let mut out: Vec<Bytes> = Vec::new();
        let mut total = 0usize;
        while pos + HEADER_BYTES as u64 <= limit {
            // Enough to answer with: go on only while the bytes are already read.
            let satisfied = !out.is_empty() && total >= min_bytes;
            if satisfied && !self.reader.ready(seg, pos, pos + HEADER_BYTES as u64) {
                break;
            }
            let header_bytes = concat(
                self.reader
                    .bytes(seg, pos, pos + HEADER_BYTES as u64, limit)
                    .await?,
            );
            let header = match batch::check_framing_stored(&header_bytes) {
                Ok(h) => *h,
                Err(crate::error::BatchError::Truncated { .. }) => {
                    match BatchHeader::parse(&header_bytes) {
                        Some(h) => *h,
                        None => break,
                    }
                }
                Err(reason) => {
                    return Err(Error::CorruptBatch {
                        position: pos,
                        reason,
                    })
                }
            };
            let batch_bytes = header.total_bytes();
            let base = header.base_offset.get() as u64;
            if base >= hw || pos + batch_bytes as u64 > limit {
                break;
            }
            if (header.last_offset() as u64) < offset {
                pos += batch_bytes as u64;
                continue;
            }
            if !out.is_empty() && total + batch_bytes > max_bytes {
                break;
            }
            if satisfied && !self.reader.ready(seg, pos, pos + batch_bytes as u64) {
                break;
            }
            let mut parts = self
                .reader
                .bytes(seg, pos, pos + batch_bytes as u64, limit)
                .await?;
            // A batch that spans read chunks stays in pieces (the response carries them back
            // to back): no copy to join them.
            let valid = match parts.as_slice() {
                [one] => batch::validate_stored(one),
                _ => batch::validate_pieces(&parts),
            };
            if let Err(reason) = valid {
                return Err(Error::CorruptBatch {
                    position: pos,
                    reason,
                });
            }
            out.append(&mut parts);
            total += batch_bytes;
            pos += batch_bytes as u64;
            if total >= max_bytes {
                break;
            }
            glommio::yield_if_needed().await;
        }
        Ok(out)
    }
}

fn concat(parts: Vec<Bytes>) -> Bytes {
    if parts.len() == 1 {
        return parts.into_iter().next().unwrap_or_default();
    }
    let mut b = BytesMut::with_capacity(parts.iter().map(Bytes::len).sum());
    for p in parts {
        b.extend_from_slice(&p);
    }
    b.freeze()
}
