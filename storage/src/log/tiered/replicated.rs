//! The remote tier of a replicated log (the broker's partition Raft groups): only the leader
//! uploads, and the manifest changes only as the Raft log says, on every replica alike. The
//! leader uploads a segment's objects (`upload_next`) and replicates the entry; every replica
//! lists it when it applies the entry (`list_segment`). Upload ids carry the leader's epoch
//! (term) in their high 32 bits, so a leader collecting orphans deletes only unlisted objects
//! of earlier epochs (`collect_orphans_before`): a deposed leader still uploading never has its
//! objects listed, and never deletes what a later leader listed. The steps themselves and their
//! crash safety are the parent module's (`log/tiered.rs`).

use std::cell::Cell;

use super::{
    delete_unlisted, load_manifest, retention_cut, save_manifest, update_manifest,
    upload_candidates, upload_id, upload_objects,
};
use crate::error::{Error, Result};
use crate::log::Inner;
use crate::tier::manifest::Manifest;
use crate::tier::RemoteSegment;

/// [`super::Log::upload_next_segment`].
pub(in crate::log) async fn upload_next(
    inner: &Inner,
    epoch: u32,
) -> Result<Option<RemoteSegment>> {
    inner.check_usable()?;
    let Some(remote) = inner.remote() else {
        return Ok(None);
    };
    if !inner.config.borrow().remote_storage || remote.busy.replace(true) {
        return Ok(None);
    }
    let r = async {
        let _tick = remote.tick_lock.lock().await.ok_or(Error::Closed)?;
        let end = remote.manifest.borrow().end();
        let Some(seg) = upload_candidates(inner, end).into_iter().next() else {
            return Ok(None);
        };
        let id = epoch_upload_id(epoch);
        upload_objects(inner, &remote, &seg, id).await.map(Some)
    }
    .await;
    remote.busy.set(false);
    match &r {
        Ok(Some(_)) => remote.failing.set(false),
        Ok(None) => {}
        Err(_) => {
            remote.failing.set(true);
            remote.stats.borrow_mut().errors += 1;
        }
    }
    r
}

/// [`super::Log::list_remote_segment`].
pub(in crate::log) async fn list_segment(inner: &Inner, seg: RemoteSegment) -> Result<bool> {
    // `seg` continues the list: it begins at or before its end and ends past it, and it is
    // not wholly below the list's start. Listed segments from its base on (a replica that
    // cut its segments elsewhere uploaded them) are wholly inside it: it replaces them, and
    // their objects are left for the leader to collect (`collect_orphans_before`).
    let add = |m: &mut Manifest| {
        let extends = m
            .end()
            .is_none_or(|end| seg.base_offset <= end && end < seg.next_offset);
        if !extends || seg.next_offset <= m.start {
            return None;
        }
        let covered: Vec<u64> = m
            .segments
            .range(seg.base_offset..)
            .map(|(b, _)| *b)
            .collect();
        for b in covered {
            m.segments.remove(&b);
        }
        m.segments.insert(seg.base_offset, seg);
        Some(())
    };
    let Some(remote) = inner.remote() else {
        // No store attached here (yet): the file alone, which attaching loads.
        let mut m = load_manifest(inner).await?;
        if add(&mut m).is_none() {
            return Ok(false);
        }
        save_manifest(inner, &m).await?;
        if let Some(remote) = inner.remote() {
            // Attached meanwhile, from the file before this change.
            update_manifest(inner, &remote, add).await?;
        }
        return Ok(true);
    };
    // A replica reopening applies every upload again: most are listed already.
    if remote
        .manifest
        .borrow()
        .end()
        .is_some_and(|end| seg.next_offset <= end)
    {
        return Ok(false);
    }
    let listed = update_manifest(inner, &remote, add).await?.is_some();
    if listed {
        super::aux_state::forget_producers_below(inner, seg.next_offset);
    }
    Ok(listed)
}

/// [`super::Log::collect_remote_orphans`].
pub(in crate::log) async fn collect_orphans_before(inner: &Inner, epoch: u32) -> Result<usize> {
    inner.check_usable()?;
    let Some(remote) = inner.remote() else {
        return Ok(0);
    };
    let _tick = remote.tick_lock.lock().await.ok_or(Error::Closed)?;
    delete_unlisted(inner, &remote, |id| id >> 32 < u64::from(epoch)).await
}

/// [`super::Log::remote_retention_point`].
pub(in crate::log) fn retention_point(inner: &Inner, now_ms: i64) -> Option<u64> {
    let remote = inner.remote()?;
    retention_cut(inner, &remote, now_ms)
}

/// [`super::Log::remote_manifest`].
pub(in crate::log) fn manifest_bytes(inner: &Inner) -> Option<Vec<u8>> {
    Some(inner.remote()?.manifest.borrow().encode())
}

/// [`super::Log::install_remote_manifest`].
pub(in crate::log) async fn install_manifest(inner: &Inner, bytes: &[u8]) -> Result<()> {
    let m = Manifest::decode(bytes)
        .ok_or_else(|| Error::Remote("a remote segment manifest that fails its checks".into()))?;
    match inner.remote() {
        Some(remote) => {
            update_manifest(inner, &remote, |old| {
                *old = m;
                Some(())
            })
            .await?;
        }
        None => save_manifest(inner, &m).await?,
    }
    Ok(())
}

/// An upload id of a replicated log's leader: its epoch in the high 32 bits, a count of this
/// thread's uploads in the low ones (starting from the clock). One process leads an epoch
/// (a restarted broker leads only after an election, in a new one), so ids never repeat.
fn epoch_upload_id(epoch: u32) -> u64 {
    thread_local!(static NEXT: Cell<u32> = Cell::new(upload_id() as u32));
    let low = NEXT.with(|n| {
        let v = n.get();
        n.set(v.wrapping_add(1));
        v
    });
    (u64::from(epoch) << 32) | u64::from(low)
}
