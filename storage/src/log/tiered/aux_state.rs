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
//!   opened the log that state is gone, and the object is the 8 bytes `WEIRPSUN` (unknown:
//!   a replica restoring from it starts its producers unknown, as Kafka does without a
//!   snapshot — accepted at any sequence).
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

/// At a roll past `seg` (under the append lock, the producer state as of its end): keeps
/// that state for its upload, if the log has remote storage on.
pub(in crate::log) fn keep_producers_at_end(inner: &Inner, seg: &Segment) {
    if inner.config.borrow().remote_storage {
        let end = seg.state.borrow().next_offset;
        *seg.producers_at_end.borrow_mut() = Some(Rc::new(inner.producers.borrow().encode(end)));
    }
}

/// The `.snapshot` object of `seg`, which ends at `end`.
pub(super) fn producers_object(seg: &Segment, end: u64) -> Bytes {
    match seg.producers_at_end.borrow().as_ref() {
        Some(b) if ProducerState::decode(b).is_some_and(|(_, covers)| covers == end) => {
            Bytes::copy_from_slice(b)
        }
        _ => Bytes::from_static(UNKNOWN_PRODUCERS),
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
    inner: &Inner,
    offset: u64,
) -> Result<Option<RestoredState>> {
    inner.check_usable()?;
    let Some(remote) = inner.remote() else {
        return Ok(None);
    };
    let Some(seg) = remote
        .segments()
        .into_iter()
        .find(|s| s.next_offset == offset)
    else {
        return Ok(None);
    };
    let (producers, epochs) = fetch(&remote, &seg).await?;
    let _permit = inner.append_lock.lock().await.ok_or(Error::Closed)?;
    inner.check_usable()?;
    if inner.log_start.get() != offset || inner.log_end.get() != offset {
        return Err(Error::InvalidArgument(format!(
            "restoring the state at {offset} into a log holding [{}, {})",
            inner.log_start.get(),
            inner.log_end.get()
        )));
    }
    let restored = RestoredState {
        producers: producers.as_ref().map(ProducerState::len),
        leader_epochs: epochs.entries().len(),
    };
    if let Some(p) = producers {
        *inner.producers.borrow_mut() = p;
        inner.save_producer_state().await?;
    }
    if let Some(latest) = epochs.latest() {
        *inner.epochs.borrow_mut() = epochs;
        inner.save_epochs().await?;
        // As after a reopen: the latest epoch of the list.
        inner.leader_epoch.set(inner.leader_epoch.get().max(latest));
    }
    Ok(Some(restored))
}

/// The producer state (`None`: unknown) and the leader epochs a remote segment carries, as of
/// its end; damaged objects are an error.
async fn fetch(
    remote: &Remote,
    seg: &RemoteSegment,
) -> Result<(Option<ProducerState>, LeaderEpochs)> {
    let key = seg.key(&remote.prefix, "snapshot");
    let bytes = get_small(remote, &key).await?;
    let producers = if bytes[..] == UNKNOWN_PRODUCERS[..] {
        None
    } else {
        match ProducerState::decode(&bytes) {
            Some((state, covers)) if covers == seg.next_offset => Some(state),
            _ => {
                return Err(Error::Remote(format!(
                    "{key}: not a producer snapshot of offset {}",
                    seg.next_offset
                )))
            }
        }
    };
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
