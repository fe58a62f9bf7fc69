//! What a remote segment carries besides its batches and indexes, so that a replica whose log
//! continues at a remote segment's end knows what its leader knew there (Kafka's
//! "auxiliary state" of KIP-405, `buildRemoteLogAuxState`): the idempotent and transactional
//! producers' state (`.snapshot`) and the leader-epoch list (`.epochs`) as of the segment's
//! end. A follower that installs its leader's Raft snapshot restarts its log empty at the
//! leader's local log start ([`super::super::Log::truncate_fully_and_start_at`]) and then
//! takes both from the remote segment that ends there ([`restore_at`]): without them its
//! producers would start unknown (a retried batch of theirs written twice once it leads) and
//! OffsetForLeaderEpoch would not know the epochs of the remote tier.
//!
//! Objects, written by the upload (`upload_objects` in `log/tiered.rs`):
//! - `.snapshot`: the producer-state snapshot format (`producer_state.rs`) whose `covers` is
//!   the segment's end, taken in memory when the log rolled past the segment
//!   ([`crate::segment::Segment::producers_at_end`]); for a segment closed before this process
//!   opened the log, the state at its base (the `.snapshot` of the remote segment ending
//!   there) with its batches replayed over it; where that is not known either, the 8 bytes
//!   `WEIRPSUN` (unknown: a replica restoring from it starts its producers unknown, as Kafka
//!   does without a snapshot — accepted at any sequence).
//! - `.epochs`: the `leader_epochs` file format (`epochs.rs`), the entries that start below
//!   the segment's end.

use std::rc::Rc;

use bytes::Bytes;

use super::super::epochs::LeaderEpochs;
use super::{Remote, SMALL_OBJECT_MAX_BYTES};
use crate::error::{Error, Result};
use crate::log::Inner;
use crate::producer_state::ProducerState;
use crate::segment::Segment;
use crate::tier::{RemoteSegment, RestoredState};

/// The `.snapshot` object of a segment whose producer state at its end is not known.
const UNKNOWN_PRODUCERS: &[u8; 8] = b"WEIRPSUN";

/// At a roll past `seg` (under the append lock, the producer state as of its end; `written`:
/// the snapshot the roll saved, if it saved one): keeps that state for its upload, if the log
/// has remote storage on.
pub(in crate::log) fn keep_producers_at_end(inner: &Inner, seg: &Segment, written: Option<Bytes>) {
    if inner.config.borrow().remote_storage {
        let end = seg.state.borrow().next_offset;
        let bytes = written.unwrap_or_else(|| Bytes::from(inner.producers.borrow().encode(end)));
        *seg.producers_at_end.borrow_mut() = Some((end, bytes));
    }
}

/// The `.snapshot` object of `seg`, which ends at `end`: the state kept at the roll past it;
/// for a segment closed before this process opened the log, the state at its base (the
/// `.snapshot` of the remote segment ending there, or none before offset 0) with its batches
/// replayed over it; else unknown.
pub(super) async fn producers_object(
    inner: &Inner,
    remote: &Remote,
    seg: &Segment,
    end: u64,
) -> Bytes {
    let kept = seg.producers_at_end.borrow().clone();
    match kept {
        Some((covers, b)) if covers == end => return b,
        _ => {}
    }
    match replayed(inner, remote, seg, end).await {
        Ok(Some(state)) => Bytes::from(state),
        Ok(None) => Bytes::from_static(UNKNOWN_PRODUCERS),
        Err(e) => {
            // The `.snapshot` before it could not be read (the store failed, or the segment
            // before was uploaded by a weir that wrote none): this one says unknown; segments
            // the log rolls past from now on are known again.
            tracing::warn!(path = %seg.log_path.display(), error = %e,
                "the producer state at a segment's end could not be derived; uploading it as unknown");
            Bytes::from_static(UNKNOWN_PRODUCERS)
        }
    }
}

/// The producer state at `seg`'s end, from the state at its base and its batches (`None`:
/// the state at its base is not known).
async fn replayed(
    inner: &Inner,
    remote: &Remote,
    seg: &Segment,
    end: u64,
) -> Result<Option<Vec<u8>>> {
    let mut state = if seg.base_offset == 0 {
        ProducerState::default()
    } else {
        let Some(before) = remote.ending_at(seg.base_offset) else {
            return Ok(None);
        };
        let Some(state) = fetch_producers(remote, &before).await? else {
            return Ok(None);
        };
        state
    };
    replay(inner, seg, &mut state).await?;
    Ok(Some(state.encode(end)))
}

/// Applies the producer batches of `seg`'s file to `state`, as recovery reads them.
async fn replay(inner: &Inner, seg: &Segment, state: &mut ProducerState) -> Result<()> {
    let interval = inner.config.borrow().index_interval_bytes;
    for (b, base, last) in crate::recovery::producer_batches(seg, interval).await? {
        state.update(&b, base, last);
    }
    Ok(())
}

/// Drops the producer states kept for the uploads of local segments that end at or below
/// `end` (uploaded: by this log, or — a replica — by its leader).
pub(super) fn forget_producers_below(inner: &Inner, end: u64) {
    for seg in inner.segments.borrow().values() {
        if seg.state.borrow().next_offset <= end {
            seg.producers_at_end.take();
        }
    }
}

/// The `.epochs` object of a segment that ends at `end`.
pub(super) fn epochs_object(inner: &Inner, end: u64) -> Bytes {
    let mut epochs = inner.epochs.borrow().clone();
    epochs.truncate_from(end);
    Bytes::from(epochs.encode())
}

/// Reads a small object whole (an index, a snapshot), refusing one past
/// [`SMALL_OBJECT_MAX_BYTES`] before it is all in memory.
pub(super) async fn get_small(remote: &Remote, key: &str) -> Result<Bytes> {
    let bytes = remote
        .store
        .get_range(key, 0..SMALL_OBJECT_MAX_BYTES + 1)
        .await?;
    if bytes.len() as u64 > SMALL_OBJECT_MAX_BYTES {
        return Err(Error::Remote(format!(
            "{key}: larger than {SMALL_OBJECT_MAX_BYTES} bytes"
        )));
    }
    Ok(bytes)
}

/// [`super::super::Log::restore_from_remote`].
pub(in crate::log) async fn restore_at(
    inner: &Rc<Inner>,
    offset: u64,
) -> Result<Option<RestoredState>> {
    inner.check_usable()?;
    let Some(remote) = inner.remote() else {
        return Ok(None);
    };
    let Some(seg) = remote.ending_at(offset) else {
        return Ok(None);
    };
    let (producers, epochs) = fetch(&remote, &seg).await?;
    let _permit = inner.append_lock.lock().await.ok_or(Error::Closed)?;
    inner.check_usable()?;
    if inner.log_start.get() != offset {
        return Err(Error::InvalidArgument(format!(
            "restoring the state at {offset} into a log that starts at {}",
            inner.log_start.get()
        )));
    }
    let restored = RestoredState {
        producers: producers.as_ref().map(ProducerState::len),
        leader_epochs: epochs.entries().len(),
    };
    if let Some(mut state) = producers {
        // The batches appended since the restart, replayed over the state at the point.
        inner.drain_writes().await?;
        let segs: Vec<Rc<Segment>> = inner.segments.borrow().values().cloned().collect();
        for seg in segs {
            replay(inner, &seg, &mut state).await?;
        }
        *inner.producers.borrow_mut() = state;
        inner.save_producer_state().await?;
    }
    if epochs.latest().is_some() {
        // The epochs below the point, then those of the batches appended since.
        let mut merged = epochs;
        let since = inner.epochs.borrow().entries().to_vec();
        for (epoch, start) in since {
            merged.assign(epoch, start);
        }
        let latest = merged.latest().unwrap_or(0);
        *inner.epochs.borrow_mut() = merged;
        inner.save_epochs().await?;
        // As after a reopen: at least the latest epoch of the list.
        inner.leader_epoch.set(inner.leader_epoch.get().max(latest));
    }
    Ok(Some(restored))
}

/// The producer state (`None`: unknown) a remote segment carries, as of its end; a damaged
/// object is an error.
async fn fetch_producers(remote: &Remote, seg: &RemoteSegment) -> Result<Option<ProducerState>> {
    let key = seg.key(&remote.prefix, "snapshot");
    let bytes = get_small(remote, &key).await?;
    if bytes[..] == UNKNOWN_PRODUCERS[..] {
        return Ok(None);
    }
    match ProducerState::decode(&bytes) {
        Some((state, covers)) if covers == seg.next_offset => Ok(Some(state)),
        _ => Err(Error::Remote(format!(
            "{key}: not a producer snapshot of offset {}",
            seg.next_offset
        ))),
    }
}

/// The producer state (`None`: unknown) and the leader epochs a remote segment carries, as of
/// its end; damaged objects are an error.
async fn fetch(
    remote: &Remote,
    seg: &RemoteSegment,
) -> Result<(Option<ProducerState>, LeaderEpochs)> {
    let producers = fetch_producers(remote, seg).await?;
    let key = seg.key(&remote.prefix, "epochs");
    let bytes = get_small(remote, &key).await?;
    let epochs = LeaderEpochs::decode(&bytes)
        .filter(|e| e.entries().last().is_none_or(|l| l.1 < seg.next_offset))
        .ok_or_else(|| {
            Error::Remote(format!(
                "{key}: not a leader-epoch list ending before {}",
                seg.next_offset
            ))
        })?;
    Ok((producers, epochs))
}
