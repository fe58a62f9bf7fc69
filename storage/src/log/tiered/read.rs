//! Reads of a log's remote tier: batches of a remote segment through the log's chunk cache
//! (ranged GETs, every batch CRC-checked before it is served), the remote segments' offset
//! indexes, and the timestamp lookups below the local log start.

use std::rc::Rc;

use bytes::{Bytes, BytesMut};

use super::{Remote, REMOTE_CHUNKS_KEPT, REMOTE_CHUNK_BYTES, REMOTE_INDEXES_KEPT};
use crate::batch::{self, BatchHeader, HEADER_BYTES};
use crate::error::{Error, Result};
use crate::log::Inner;
use crate::offset_index::OffsetIndex;
use crate::tier::RemoteSegment;

/// Whole batches from the remote segment holding `offset`, up to `max_bytes` (at least
/// one batch), none at or past `hw`. Every batch is CRC-checked.
pub(in crate::log) async fn read_remote(
    remote: &Remote,
    seg: RemoteSegment,
    offset: u64,
    max_bytes: usize,
    hw: u64,
) -> Result<Vec<Bytes>> {
    let index = remote_index(remote, &seg).await?;
    let rel = (offset - seg.base_offset).min(u64::from(u32::MAX)) as u32;
    let mut pos = u64::from(index.lookup(rel));
    let mut out = Vec::new();
    let mut total = 0usize;
    while pos + HEADER_BYTES as u64 <= seg.size {
        let head = remote_bytes(remote, &seg, pos, HEADER_BYTES as u64).await?;
        let header =
            *BatchHeader::parse(&head).ok_or_else(|| corrupt(&seg, pos, "no batch header"))?;
        let len = header.total_bytes();
        let base = header.base_offset.get() as u64;
        if len < HEADER_BYTES || pos + len as u64 > seg.size {
            return Err(corrupt(&seg, pos, "a batch runs past the segment"));
        }
        if base >= hw {
            break;
        }
        if (header.last_offset() as u64) < offset {
            pos += len as u64;
            continue;
        }
        if !out.is_empty() && total + len > max_bytes {
            break;
        }
        let whole = remote_bytes(remote, &seg, pos, len as u64).await?;
        if let Err(e) = batch::validate_stored(&whole) {
            // Read again next time: the store may have had a bad moment.
            remote
                .chunks
                .borrow_mut()
                .retain(|(id, _, _)| *id != seg.id);
            return Err(corrupt(&seg, pos, &e.to_string()));
        }
        out.push(whole);
        total += len;
        pos += len as u64;
        if total >= max_bytes {
            break;
        }
    }
    remote.stats.borrow_mut().read_bytes += total as u64;
    Ok(out)
}

/// The largest max timestamp of the remote segments below the local log start (`None`:
/// none, or no remote tier).
pub(in crate::log) fn remote_max_timestamp(inner: &Inner) -> Option<i64> {
    let remote = inner.remote()?;
    let (start, local) = (inner.start_offset(), inner.log_start.get());
    let m = remote.manifest.borrow();
    m.segments
        .values()
        .filter(|s| s.next_offset > start && s.base_offset < local && s.max_timestamp >= 0)
        .map(|s| s.max_timestamp)
        .max()
}

/// [`Log::offset_for_timestamp`] over the remote segments below the local log start:
/// the first record at or after `timestamp_ms` there.
pub(in crate::log) async fn remote_offset_for_timestamp(
    inner: &Inner,
    timestamp_ms: i64,
    hw: u64,
    inflate_max: u64,
) -> Result<Option<(u64, i64)>> {
    let Some(remote) = inner.remote() else {
        return Ok(None);
    };
    let start = inner.start_offset();
    let local = inner.log_start.get();
    let segs: Vec<RemoteSegment> = remote
        .manifest
        .borrow()
        .segments
        .values()
        .copied()
        .collect();
    for seg in segs {
        if seg.max_timestamp < timestamp_ms || seg.next_offset <= start || seg.base_offset >= local
        {
            continue;
        }
        let mut next = seg.base_offset.max(start);
        while next < seg.next_offset.min(local) {
            let chunks = read_remote(&remote, seg, next, 1 << 20, hw).await?;
            if chunks.is_empty() {
                break;
            }
            for whole in &chunks {
                let Some(h) = BatchHeader::parse(whole) else {
                    break;
                };
                next = h.last_offset() as u64 + 1;
                let base = h.base_offset.get() as u64;
                if base < start || batch::max_timestamp(whole) < timestamp_ms {
                    continue;
                }
                let records = batch::decode_whole(whole, inflate_max);
                if let Some(r) =
                    records.and_then(|rs| rs.into_iter().find(|r| r.timestamp >= timestamp_ms))
                {
                    return Ok(Some((r.offset as u64, r.timestamp)));
                }
                return Ok(Some((base, batch::max_timestamp(whole))));
            }
            glommio::yield_if_needed().await;
        }
    }
    Ok(None)
}

async fn remote_index(remote: &Remote, seg: &RemoteSegment) -> Result<Rc<OffsetIndex>> {
    if let Some((_, idx)) = remote.indexes.borrow().iter().find(|(id, _)| *id == seg.id) {
        return Ok(idx.clone());
    }
    let key = seg.key(&remote.prefix, "index");
    let bytes = remote.store.get_range(&key, 0..u64::MAX).await?;
    let (summary, idx) = OffsetIndex::decode(&bytes)
        .ok_or_else(|| Error::Remote(format!("{key}: not a valid offset index")))?;
    if summary.base_offset != seg.base_offset || summary.segment_bytes != seg.size {
        return Err(Error::Remote(format!("{key}: describes another segment")));
    }
    let idx = Rc::new(idx);
    let mut kept = remote.indexes.borrow_mut();
    kept.push_back((seg.id, idx.clone()));
    if kept.len() > REMOTE_INDEXES_KEPT {
        kept.pop_front();
    }
    Ok(idx)
}

/// Drops what the remote tier keeps in memory for readers (an idle log).
pub(in crate::log) fn release_remote_reads(inner: &Inner) {
    if let Some(r) = inner.remote() {
        r.chunks.borrow_mut().clear();
        r.indexes.borrow_mut().clear();
    }
}

/// `len` bytes of `seg`'s data from `pos`, through the log's chunk cache: a slice of one
/// chunk, or (a batch across a chunk boundary) a copy of just those bytes.
async fn remote_bytes(remote: &Remote, seg: &RemoteSegment, pos: u64, len: u64) -> Result<Bytes> {
    let short = || corrupt(seg, pos, "the object is shorter than the manifest says");
    let end = pos + len;
    let first = pos / REMOTE_CHUNK_BYTES;
    let last = (end - 1) / REMOTE_CHUNK_BYTES;
    if first == last {
        let chunk = remote_chunk(remote, seg, first).await?;
        let from = (pos - first * REMOTE_CHUNK_BYTES) as usize;
        return match chunk.get(from..from + len as usize) {
            Some(_) => Ok(chunk.slice(from..from + len as usize)),
            None => Err(short()),
        };
    }
    let mut joined = BytesMut::with_capacity(len as usize);
    for c in first..=last {
        let chunk = remote_chunk(remote, seg, c).await?;
        let base = c * REMOTE_CHUNK_BYTES;
        let from = (pos.max(base) - base) as usize;
        let to = (end.min(base + REMOTE_CHUNK_BYTES) - base) as usize;
        joined.extend_from_slice(chunk.get(from..to).ok_or_else(short)?);
    }
    Ok(joined.freeze())
}

async fn remote_chunk(remote: &Remote, seg: &RemoteSegment, chunk: u64) -> Result<Bytes> {
    let hit = remote
        .chunks
        .borrow()
        .iter()
        .find(|(id, c, _)| *id == seg.id && *c == chunk)
        .map(|(_, _, b)| b.clone());
    if let Some(b) = hit {
        return Ok(b);
    }
    let start = chunk * REMOTE_CHUNK_BYTES;
    let end = (start + REMOTE_CHUNK_BYTES).min(seg.size);
    let key = seg.key(&remote.prefix, "log");
    let bytes = remote.store.get_range(&key, start..end).await?;
    if bytes.len() as u64 != end - start {
        return Err(Error::Remote(format!(
            "{key}: {} bytes at {start}, {} expected (the object is shorter than the manifest says)",
            bytes.len(),
            end - start
        )));
    }
    let mut kept = remote.chunks.borrow_mut();
    kept.push_back((seg.id, chunk, bytes.clone()));
    if kept.len() > REMOTE_CHUNKS_KEPT {
        kept.pop_front();
    }
    Ok(bytes)
}

fn corrupt(seg: &RemoteSegment, pos: u64, why: &str) -> Error {
    Error::Remote(format!(
        "remote segment {} (upload {:016x}) at byte {pos}: {why}",
        seg.base_offset, seg.id
    ))
}
