//! Reads of a log's remote tier: batches of a remote segment through chunks of
//! [`REMOTE_CHUNK_BYTES`] (ranged GETs, every batch CRC-checked before it is served), the
//! remote segments' offset indexes, and the timestamp lookups below the local log start.
//!
//! The chunks are held by the core's read budget (`ReadBudget`, the one local reads use), so
//! memory for remote reads is bounded per core however many partitions are read; a log keeps
//! weak references to find them again. A read starts GETs of the chunks after the one it
//! needs — read-ahead of `read_ahead_bytes`, into the next remote segment at a segment's end —
//! so a catch-up consumer's next fetch finds its bytes in memory and the store streams
//! while the consumer works.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::{Rc, Weak};

use bytes::{Bytes, BytesMut};

use super::aux_state::get_small;
use super::{Remote, REMOTE_CHUNK_BYTES, REMOTE_INDEXES_KEPT};
use crate::batch::{self, BatchHeader, HEADER_BYTES};
use crate::cache::BatchCache;
use crate::error::{Error, Result};
use crate::log::Inner;
use crate::offset_index::OffsetIndex;
use crate::producer_state::AbortedTxn;
use crate::read_budget::Slot;
use crate::tier::{txn_index, RemoteSegment};

/// One log's chunks of remote segments: weak references into the core's read budget, by
/// (upload id, chunk index).
pub(super) struct RemoteReads {
    cache: Rc<BatchCache>,
    /// Chunks read ahead of the one a reader needs.
    ahead_chunks: u64,
    slots: RefCell<HashMap<(u64, u64), Weak<Slot>>>,
}

impl RemoteReads {
    pub(super) fn new(cache: Rc<BatchCache>, read_ahead_bytes: usize) -> RemoteReads {
        // As for local reads: read-ahead never takes more than a quarter of the core's budget.
        let budget_chunks = cache.reads.capacity_bytes() as u64 / REMOTE_CHUNK_BYTES / 4;
        let ahead_chunks = (read_ahead_bytes as u64).div_ceil(REMOTE_CHUNK_BYTES);
        RemoteReads {
            ahead_chunks: ahead_chunks.min(budget_chunks),
            cache,
            slots: RefCell::default(),
        }
    }

    /// The chunk's slot, read or being read; not one whose GET failed (asked again).
    fn live(&self, key: (u64, u64)) -> Option<Rc<Slot>> {
        let slot = self.slots.borrow().get(&key).and_then(Weak::upgrade)?;
        let failed = matches!(*slot.data.borrow(), Some(Err(_)));
        (!failed).then_some(slot)
    }

    /// Forgets the chunks of one remote segment (a bad batch in them: read them again).
    fn forget(&self, id: u64) {
        self.slots.borrow_mut().retain(|k, _| k.0 != id);
    }
}

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
            remote.reads.forget(seg.id);
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

/// The object of `seg` a kept list holds, by upload id.
fn kept<T>(list: &RefCell<VecDeque<(u64, Rc<T>)>>, seg: &RemoteSegment) -> Option<Rc<T>> {
    let list = list.borrow();
    list.iter()
        .find(|(id, _)| *id == seg.id)
        .map(|(_, v)| v.clone())
}

/// Keeps `v` for `seg` in a kept list, the oldest dropped past [`REMOTE_INDEXES_KEPT`].
fn keep<T>(list: &RefCell<VecDeque<(u64, Rc<T>)>>, seg: &RemoteSegment, v: &Rc<T>) {
    let mut list = list.borrow_mut();
    list.push_back((seg.id, v.clone()));
    if list.len() > REMOTE_INDEXES_KEPT {
        list.pop_front();
    }
}

async fn remote_index(remote: &Remote, seg: &RemoteSegment) -> Result<Rc<OffsetIndex>> {
    if let Some(idx) = kept(&remote.indexes, seg) {
        return Ok(idx);
    }
    let key = seg.key(&remote.prefix, "index");
    let bytes = get_small(remote, &key).await?;
    let (summary, idx) = OffsetIndex::decode(&bytes)
        .ok_or_else(|| Error::Remote(format!("{key}: not a valid offset index")))?;
    if summary.base_offset != seg.base_offset || summary.segment_bytes != seg.size {
        return Err(Error::Remote(format!("{key}: describes another segment")));
    }
    let idx = Rc::new(idx);
    keep(&remote.indexes, seg, &idx);
    Ok(idx)
}

/// Adds to `out` (sorted by marker offset, without duplicates) the aborted transactions the
/// `.txnindex` objects of the remote segments below the local log start that `[from, to)`
/// overlaps list: markers at or after `from`, first records before `to`.
pub(in crate::log) async fn add_remote_aborted(
    inner: &Inner,
    from: u64,
    to: u64,
    out: &mut Vec<AbortedTxn>,
) -> Result<()> {
    let Some(remote) = inner.remote() else {
        return Ok(());
    };
    let local = inner.log_start.get();
    let segs: Vec<RemoteSegment> = remote
        .segments()
        .into_iter()
        .filter(|s| s.next_offset > from && s.base_offset < to.min(local))
        .collect();
    for seg in segs {
        for a in remote_aborted(&remote, &seg).await?.iter() {
            let meets = a.last_offset >= from && a.first_offset < to;
            let known = out
                .iter()
                .any(|b| b.producer_id == a.producer_id && b.first_offset == a.first_offset);
            if meets && !known {
                out.push(*a);
            }
        }
    }
    out.sort_by_key(|a| a.last_offset);
    Ok(())
}

async fn remote_aborted(remote: &Remote, seg: &RemoteSegment) -> Result<Rc<Vec<AbortedTxn>>> {
    if let Some(t) = kept(&remote.txn_indexes, seg) {
        return Ok(t);
    }
    let key = seg.key(&remote.prefix, "txnindex");
    let bytes = get_small(remote, &key).await?;
    let txns = txn_index::decode(&bytes)
        .ok_or_else(|| Error::Remote(format!("{key}: not a valid transaction index")))?;
    let txns = Rc::new(txns);
    keep(&remote.txn_indexes, seg, &txns);
    Ok(txns)
}

/// Drops what the remote tier keeps in memory for readers (an idle log).
pub(in crate::log) fn release_remote_reads(inner: &Inner) {
    if let Some(r) = inner.remote() {
        r.reads.slots.borrow_mut().clear();
        r.indexes.borrow_mut().clear();
        r.txn_indexes.borrow_mut().clear();
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

/// Chunk `chunk` of `seg`: from memory, or (after starting its GET) once the store answers;
/// either way the chunks after it are read ahead.
async fn remote_chunk(remote: &Remote, seg: &RemoteSegment, chunk: u64) -> Result<Bytes> {
    let reads = &remote.reads;
    let slot = match reads.live((seg.id, chunk)) {
        Some(s) => {
            reads.cache.reads.taken(&s);
            s
        }
        None => start_get(remote, seg, chunk, false),
    };
    read_ahead(remote, seg, chunk);
    // A failed GET stays in its slot only to tell the readers waiting for it: the next read
    // asks the store again (`RemoteReads::live`).
    slot.wait().await.map_err(Error::Remote)
}

/// Starts the GETs of the [`RemoteReads::ahead_chunks`] chunks after `chunk` of `seg` not in
/// memory yet, going on into the remote segment that follows `seg` (while the core's
/// read-ahead is under half its budget: `ReadBudget::ahead_room`).
fn read_ahead(remote: &Remote, seg: &RemoteSegment, chunk: u64) {
    let reads = &remote.reads;
    let (mut seg, mut next) = (*seg, chunk + 1);
    for _ in 0..reads.ahead_chunks {
        if next * REMOTE_CHUNK_BYTES >= seg.size {
            match remote.find(seg.next_offset) {
                Some(after) if after.id != seg.id && after.base_offset == seg.next_offset => {
                    (seg, next) = (after, 0);
                }
                _ => return,
            }
        }
        if !reads.cache.reads.ahead_room() {
            return;
        }
        if reads.live((seg.id, next)).is_none() {
            start_get(remote, &seg, next, true);
        }
        next += 1;
    }
}

/// Starts the GET of chunk `chunk` of `seg` into a new slot of the core's read budget.
fn start_get(remote: &Remote, seg: &RemoteSegment, chunk: u64, ahead: bool) -> Rc<Slot> {
    let start = chunk * REMOTE_CHUNK_BYTES;
    let end = (start + REMOTE_CHUNK_BYTES).min(seg.size);
    let slot = Rc::new(Slot {
        valid_to: end,
        ..Default::default()
    });
    let key = seg.key(&remote.prefix, "log");
    let store = remote.store.clone();
    let cache = remote.reads.cache.clone();
    let filled = slot.clone();
    glommio::spawn_local(async move {
        let r = match store.get_range(&key, start..end).await {
            Ok(b) if b.len() as u64 == end - start => Ok(b),
            Ok(b) => Err(format!(
                "{key}: {} bytes at {start}, {} expected (the object is shorter than the manifest says)",
                b.len(),
                end - start
            )),
            Err(e) => Err(e.to_string()),
        };
        let failed = r.is_err();
        filled.fill(r);
        if failed {
            cache.reads.release(&filled);
        }
    })
    .detach();
    let reads = &remote.reads;
    reads
        .cache
        .reads
        .admit(slot.clone(), (end - start) as usize, ahead);
    let mut slots = reads.slots.borrow_mut();
    slots.insert((seg.id, chunk), Rc::downgrade(&slot));
    // Evicted chunks leave dead weak references behind: sweep them now and then.
    if slots.len() > 4 * (reads.ahead_chunks as usize + 2) {
        slots.retain(|_, w| w.strong_count() > 0);
    }
    slot
}

fn corrupt(seg: &RemoteSegment, pos: u64, why: &str) -> Error {
    Error::Remote(format!(
        "remote segment {} (upload {:016x}) at byte {pos}: {why}",
        seg.base_offset, seg.id
    ))
}
