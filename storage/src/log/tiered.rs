//! The remote tier of a log (`tier/`): [`Log::attach_remote`] (loading the manifest and
//! collecting orphans), [`Log::tier_tick`] (uploading closed segments, deleting remote ones
//! past the whole log's retention) and the reads of offsets below the local log start.
//!
//! Which offsets live where: the manifest's segments cover `[remote start, remote end)`;
//! local segments cover `[local start, log end)`. Uploads go oldest first from the remote
//! end, so the two ranges overlap or touch, and the log's start is the smaller start.
//! Local retention (`local.retention.*`) deletes a local segment only once it is below the
//! remote end; the whole log's retention (`retention.*`) deletes remote segments oldest
//! first. Everything runs on the log's core; the store's futures are awaited here, its
//! client does its work elsewhere.
//!
//! Here: attaching, orphans, uploads, manifest changes and retention of a single broker's log,
//! whose steps share one crash-safety argument and one `Remote` state. The reads are in
//! `tiered/read.rs`, a replicated log's leader-driven uploads in `tiered/replicated.rs`.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

use bytes::Bytes;

mod aux_state;
mod read;
mod replicated;

pub(super) use aux_state::{keep_producers_at_end, restore_at};
use read::RemoteReads;
pub(super) use read::{
    add_remote_aborted, read_remote, release_remote_reads, remote_max_timestamp,
    remote_offset_for_timestamp,
};
pub(super) use replicated::{
    collect_orphans_before, install_manifest, list_segment, manifest_bytes, retention_point,
    upload_next,
};

use super::Inner;
use crate::error::{Error, Result};
use crate::offset_index::OffsetIndex;
use crate::producer_state::AbortedTxn;
use crate::segment::Segment;
use crate::tier::manifest::{Manifest, MANIFEST_TMP_FILE};
use crate::tier::{ObjectStore, RemoteSegment, TierStats, MANIFEST_FILE};
use crate::watermark::FifoLock;

/// Bytes fetched from the store per ranged GET: a catch-up consumer's next fetches are served
/// from memory.
const REMOTE_CHUNK_BYTES: u64 = 4 << 20;
/// Offset indexes of remote segments kept per log.
const REMOTE_INDEXES_KEPT: usize = 8;
/// The most bytes read of an object read whole (an index, a snapshot): a damaged or foreign
/// object is refused before it is all in memory.
const SMALL_OBJECT_MAX_BYTES: u64 = 64 << 20;
/// Bytes read from a local segment file per part of an upload.
const UPLOAD_PART_BYTES: usize = 8 << 20;

/// The remote tier of one log.
pub(super) struct Remote {
    store: Rc<dyn ObjectStore>,
    prefix: String,
    manifest: RefCell<Manifest>,
    /// The chunks read from the store, and read ahead, under the core's read budget.
    reads: RemoteReads,
    /// The newest offset indexes read from the store: (upload id, index).
    indexes: RefCell<VecDeque<(u64, Rc<OffsetIndex>)>>,
    /// The newest `.txnindex` objects read from the store: (upload id, aborted transactions).
    txn_indexes: RefCell<VecDeque<(u64, Rc<Vec<AbortedTxn>>)>>,
    /// A tick is uploading (ticks do not overlap).
    busy: Cell<bool>,
    /// The first tick has deleted the orphans.
    orphans_collected: Cell<bool>,
    /// The last tick failed and no upload has succeeded since: with the backlog past
    /// `remote_backlog_max_bytes`, client appends are refused (`check_backlog`).
    failing: Cell<bool>,
    /// Orders changes to the manifest (`update_manifest`).
    manifest_lock: FifoLock,
    /// Held by a tick from start to end: `Log::delete` takes it to wait for one in flight.
    tick_lock: FifoLock,
    stats: RefCell<TierStats>,
}

impl Remote {
    /// The remote segment holding `offset`.
    pub(super) fn find(&self, offset: u64) -> Option<RemoteSegment> {
        self.manifest.borrow().find(offset)
    }

    /// The remote segment that ends just before `offset`.
    pub(super) fn ending_at(&self, offset: u64) -> Option<RemoteSegment> {
        let m = self.manifest.borrow();
        m.segments
            .values()
            .find(|s| s.next_offset == offset)
            .copied()
    }

    /// The first offset it serves (`None`: no segment).
    pub(super) fn first(&self) -> Option<u64> {
        self.manifest.borrow().first()
    }

    /// The offset after its last segment (`None`: no segment).
    pub(super) fn end(&self) -> Option<u64> {
        self.manifest.borrow().end()
    }

    /// Its segments, oldest first.
    pub(super) fn segments(&self) -> Vec<RemoteSegment> {
        self.manifest.borrow().segments.values().copied().collect()
    }
}

/// Attaches the object store that holds this log's remote segments, under the keys
/// `<prefix>/...`. Loads the manifest (the remote segments this log knows), then deletes
/// every object under the prefix that the manifest does not list: what a crash in the
/// middle of an upload or a remote deletion left. Returns the number of such orphans.
pub(super) async fn attach(
    inner: &Inner,
    store: Rc<dyn ObjectStore>,
    prefix: String,
) -> Result<()> {
    inner.check_usable()?;
    let manifest = load_manifest(inner).await?;
    let tmp = inner.dir.join(MANIFEST_TMP_FILE);
    if inner.vfs.exists(&tmp) {
        inner.vfs.remove(&tmp).await?;
    }
    let remote = Rc::new(Remote {
        store,
        prefix,
        manifest: RefCell::new(manifest),
        reads: RemoteReads::new(
            inner.reader.core_cache().clone(),
            inner.config.borrow().read_ahead_bytes,
        ),
        indexes: RefCell::default(),
        txn_indexes: RefCell::default(),
        busy: Cell::new(false),
        orphans_collected: Cell::new(false),
        failing: Cell::new(false),
        manifest_lock: FifoLock::default(),
        tick_lock: FifoLock::default(),
        stats: RefCell::default(),
    });
    // Remote segments that end before the local log starts (uploads were stopped while
    // local retention went on) would leave a hole: forget them.
    let local_start = inner.log_start.get();
    let stale: Vec<u64> = {
        let m = remote.manifest.borrow();
        match m.end() {
            Some(end) if end < local_start => m.segments.keys().copied().collect(),
            _ => Vec::new(),
        }
    };
    if !stale.is_empty() {
        let mut m = remote.manifest.borrow().clone();
        m.segments.clear();
        save_manifest(inner, &m).await?;
        *remote.manifest.borrow_mut() = m;
        tracing::warn!(dir = %inner.dir.display(), segments = stale.len(), "remote segments end before the local log: dropped");
    }
    *inner.remote.borrow_mut() = Some(remote);
    Ok(())
}

/// The manifest file's content (empty if there is none).
async fn load_manifest(inner: &Inner) -> Result<Manifest> {
    let path = inner.dir.join(MANIFEST_FILE);
    match inner.vfs.read_small(&path).await? {
        None => Ok(Manifest::default()),
        Some(b) => Manifest::decode(&b).ok_or_else(|| Error::CorruptFile {
            path: path.clone(),
            reason: "remote segment manifest fails its checks".into(),
        }),
    }
}

/// Deletes every object under the prefix that the manifest does not list (what a crash in
/// the middle of an upload or a remote deletion left). Runs in the first tick, before any
/// upload of this process: nothing unlisted is in progress then.
async fn collect_orphans(inner: &Inner, remote: &Remote) -> Result<()> {
    delete_unlisted(inner, remote, |_| true).await?;
    remote.orphans_collected.set(true);
    Ok(())
}

/// Deletes the objects under the prefix that the manifest does not list and whose upload id
/// `deletable` allows (a key that names none is deleted). Returns how many.
async fn delete_unlisted(
    inner: &Inner,
    remote: &Remote,
    deletable: impl Fn(u64) -> bool,
) -> Result<usize> {
    let keep: std::collections::HashSet<String> = remote
        .manifest
        .borrow()
        .segments
        .values()
        .flat_map(|s| RemoteSegment::OBJECTS.map(|e| s.key(&remote.prefix, e)))
        .collect();
    let mut orphans = 0;
    for obj in remote.store.list(&format!("{}/", remote.prefix)).await? {
        let id = RemoteSegment::id_in_key(&remote.prefix, &obj.key);
        if !keep.contains(&obj.key) && id.is_none_or(&deletable) {
            remote.store.delete(&obj.key).await?;
            orphans += 1;
        }
    }
    if orphans > 0 {
        tracing::info!(dir = %inner.dir.display(), orphans, "deleted remote objects no manifest lists");
    }
    remote.stats.borrow_mut().orphans_deleted += orphans;
    Ok(orphans)
}

/// [`super::Log::tier_stats`].
pub(super) fn stats(inner: &Inner) -> Option<TierStats> {
    let remote = inner.remote()?;
    let mut s = *remote.stats.borrow();
    let m = remote.manifest.borrow();
    s.remote_segments = m.segments.len();
    s.remote_bytes = m.segments.values().map(|s| s.size).sum();
    s.remote_end = m.end().unwrap_or(0);
    s.lag_bytes = pending_bytes(inner, m.end());
    Some(s)
}

/// With `remote_storage` on and a store attached: uploads the closed segments that are
/// not in the store yet (oldest first, each whole and below the high watermark), then
/// deletes the remote segments past `retention.ms` / `retention.bytes`. Returns the
/// segments uploaded. A failure stops the tick; the next one goes on from there.
pub(super) async fn tick(inner: &Inner, now_ms: i64) -> Result<usize> {
    inner.check_usable()?;
    let Some(remote) = inner.remote() else {
        return Ok(0);
    };
    if !inner.config.borrow().remote_storage || remote.busy.replace(true) {
        return Ok(0);
    }
    let r = async {
        let _tick = remote.tick_lock.lock().await.ok_or(Error::Closed)?;
        if !remote.orphans_collected.get() {
            collect_orphans(inner, &remote).await?;
        }
        let mut uploaded = 0;
        loop {
            // A closed log (being deleted) stops after the upload in flight: `Log::delete`
            // waits for it, then deletes every object under the prefix.
            inner.check_usable()?;
            let end = remote.manifest.borrow().end();
            let Some(seg) = upload_candidates(inner, end).into_iter().next() else {
                break;
            };
            upload(inner, &remote, &seg).await?;
            remote.failing.set(false);
            uploaded += 1;
        }
        remote_retention(inner, &remote, now_ms).await?;
        Ok(uploaded)
    }
    .await;
    remote.busy.set(false);
    remote.failing.set(r.is_err());
    if r.is_err() {
        remote.stats.borrow_mut().errors += 1;
    }
    r
}

/// Refuses a client's append while the store fails and the closed segments waiting for
/// upload exceed `remote_backlog_max_bytes` ([`Error::UploadBacklog`]); a working store, or
/// a backlog within the bound, lets it through.
pub(super) fn check_backlog(inner: &Inner) -> Result<()> {
    let max = {
        let config = inner.config.borrow();
        match config.remote_backlog_max_bytes {
            Some(max) if config.remote_storage => max,
            _ => return Ok(()),
        }
    };
    let Some(remote) = inner.remote() else {
        return Ok(());
    };
    if !remote.failing.get() {
        return Ok(());
    }
    let pending = pending_bytes(inner, remote.manifest.borrow().end());
    if pending > max {
        return Err(Error::UploadBacklog { pending, max });
    }
    Ok(())
}

/// Bytes of the closed local segments not uploaded yet (what `upload_candidates` lists).
fn pending_bytes(inner: &Inner, remote_end: Option<u64>) -> u64 {
    let segs = inner.segments.borrow();
    not_uploaded(&segs, inner.visible.get(), remote_end)
        .map(|s| s.state.borrow().size)
        .sum()
}

/// For `Log::delete` (the log is closed): waits for a tick in flight to end (it stops after
/// its current upload), then deletes every object under the log's prefix — the segments the
/// manifest lists and what an upload cut short left.
pub(super) async fn delete_all(remote: &Remote) -> Result<()> {
    let _tick = remote.tick_lock.lock().await;
    for obj in remote.store.list(&format!("{}/", remote.prefix)).await? {
        remote.store.delete(&obj.key).await?;
    }
    Ok(())
}

/// The offset below which local retention may delete: the remote end with remote
/// storage on (`None`: no limit from the remote tier).
pub(super) fn local_retention_limit(inner: &Inner) -> Option<u64> {
    if !inner.config.borrow().remote_storage {
        return None;
    }
    let remote = inner.remote()?;
    let end = remote.manifest.borrow().end();
    Some(end.unwrap_or(0))
}

/// Closed local segments from the remote end on, whole and below the last stable offset: as
/// in Kafka, a segment is uploaded once no transaction with a record in it is still open, so
/// its `.txnindex` lists every aborted one a read of it may meet.
fn upload_candidates(inner: &Inner, remote_end: Option<u64>) -> Vec<Rc<Segment>> {
    let segs = inner.segments.borrow();
    not_uploaded(&segs, inner.last_stable(), remote_end)
        .cloned()
        .collect()
}

/// The closed segments of `segs` that end past `remote_end`, not empty and below `visible`:
/// the one holding the remote end first. (On a single broker the remote end is always a
/// segment's base; a replicated log's new leader may have cut its segments elsewhere than the
/// leader before it, and then uploads its segment holding the remote end whole.)
fn not_uploaded(
    segs: &std::collections::BTreeMap<u64, Rc<Segment>>,
    visible: u64,
    remote_end: Option<u64>,
) -> impl Iterator<Item = &Rc<Segment>> {
    let from = remote_end.unwrap_or(0);
    segs.values()
        .take(segs.len().saturating_sub(1))
        .filter(move |s| {
            let st = s.state.borrow();
            st.next_offset > from && st.size > 0 && st.next_offset <= visible
        })
}

/// Copies `seg` to the store, then lists it in the manifest.
async fn upload(inner: &Inner, remote: &Remote, seg: &Rc<Segment>) -> Result<()> {
    let entry = upload_objects(inner, remote, seg, upload_id()).await?;
    update_manifest(inner, remote, |m| {
        m.segments.insert(entry.base_offset, entry);
        Some(())
    })
    .await?;
    aux_state::forget_producers_below(inner, entry.next_offset);
    tracing::debug!(dir = %inner.dir.display(), base = entry.base_offset, bytes = entry.size, "segment uploaded");
    Ok(())
}

/// Copies `seg` to the store under the upload id `id`: its `.log`, `.index`, `.timeindex`,
/// `.txnindex`, `.snapshot` and `.epochs` objects ([`RemoteSegment::OBJECTS`]). Lists it
/// nowhere: the caller does.
async fn upload_objects(
    inner: &Inner,
    remote: &Remote,
    seg: &Rc<Segment>,
    id: u64,
) -> Result<RemoteSegment> {
    let (summary, oi, ti) = {
        let st = seg.state.borrow();
        let summary = seg.summary();
        (
            summary,
            st.offset_index.encode(&summary),
            st.time_index.encode(&summary),
        )
    };
    let aborted = inner
        .producers
        .borrow()
        .aborted_between(seg.base_offset, summary.next_offset);
    let txns = crate::tier::txn_index::encode(&aborted);
    let producers = aux_state::producers_object(inner, remote, seg, summary.next_offset).await;
    let epochs = aux_state::epochs_object(inner, summary.next_offset);
    let entry = RemoteSegment {
        base_offset: seg.base_offset,
        next_offset: summary.next_offset,
        size: summary.segment_bytes,
        max_timestamp: summary.max_timestamp,
        data_crc: 0,
        id,
    };
    let store = &remote.store;
    let mut up = store.upload(&entry.key(&remote.prefix, "log")).await?;
    let mut crc = 0u32;
    let mut pos = 0u64;
    let copied: Result<()> = async {
        while pos < summary.segment_bytes {
            let len = UPLOAD_PART_BYTES.min((summary.segment_bytes - pos) as usize);
            let part = seg.file.read_at(pos, len).await?;
            if part.len() != len {
                return Err(Error::Remote(format!(
                    "{}: {} bytes at {pos}, {len} expected",
                    seg.log_path.display(),
                    part.len()
                )));
            }
            crc = crc32c::crc32c_append(crc, &part);
            pos += len as u64;
            up.write(part).await?;
        }
        Ok(())
    }
    .await;
    if let Err(e) = copied {
        let _ = up.abort().await;
        return Err(e);
    }
    up.finish().await?;
    store
        .put(&entry.key(&remote.prefix, "index"), Bytes::from(oi))
        .await?;
    store
        .put(&entry.key(&remote.prefix, "timeindex"), Bytes::from(ti))
        .await?;
    store
        .put(&entry.key(&remote.prefix, "txnindex"), Bytes::from(txns))
        .await?;
    store
        .put(&entry.key(&remote.prefix, "snapshot"), producers)
        .await?;
    store
        .put(&entry.key(&remote.prefix, "epochs"), epochs)
        .await?;
    let entry = RemoteSegment {
        data_crc: crc,
        ..entry
    };
    let mut stats = remote.stats.borrow_mut();
    stats.uploaded_segments += 1;
    stats.uploaded_bytes += entry.size;
    Ok(entry)
}

/// Changes the manifest with `f` (`None`: no change), durably, one change at a time: an
/// upload listing its segment and a DeleteRecords forgetting others may interleave, each
/// saving the file across awaits, and neither may lose the other's change.
async fn update_manifest<T>(
    inner: &Inner,
    remote: &Remote,
    f: impl FnOnce(&mut Manifest) -> Option<T>,
) -> Result<Option<T>> {
    let _turn = remote.manifest_lock.lock().await.ok_or(Error::Closed)?;
    let mut m = remote.manifest.borrow().clone();
    let Some(out) = f(&mut m) else {
        return Ok(None);
    };
    save_manifest(inner, &m).await?;
    *remote.manifest.borrow_mut() = m;
    Ok(Some(out))
}

/// Replaces the manifest durably: a temporary file, fdatasync'ed, renamed over it.
pub(super) async fn save_manifest(inner: &Inner, m: &Manifest) -> Result<()> {
    let tmp = inner.dir.join(MANIFEST_TMP_FILE);
    inner.vfs.write_small(&tmp, &m.encode()).await?;
    inner
        .vfs
        .rename(&tmp, &inner.dir.join(MANIFEST_FILE))
        .await?;
    inner.vfs.sync_dir(&inner.dir).await
}

/// Deletes remote segments past the whole log's retention, oldest first.
async fn remote_retention(inner: &Inner, remote: &Remote, now_ms: i64) -> Result<()> {
    match retention_cut(inner, remote, now_ms) {
        Some(offset) => delete_remote_below(inner, remote, offset).await,
        None => Ok(()),
    }
}

/// Where the whole log's retention (`retention.ms` / `retention.bytes`) moves the log start
/// inside the remote tier: the end of the last remote segment it deletes (`None`: none).
fn retention_cut(inner: &Inner, remote: &Remote, now_ms: i64) -> Option<u64> {
    let config = inner.config.borrow().clone();
    if !config.cleanup_delete {
        return None;
    }
    let (segments, remote_end) = {
        let m = remote.manifest.borrow();
        (m.segments.values().copied().collect::<Vec<_>>(), m.end())
    };
    // The whole log: the remote segments and the local bytes after them.
    let local_after: u64 = inner
        .segments
        .borrow()
        .values()
        .filter(|s| remote_end.is_none_or(|e| s.base_offset >= e))
        .map(|s| s.state.borrow().size)
        .sum();
    let mut total = local_after + segments.iter().map(|s| s.size).sum::<u64>();
    let mut cut = None;
    for s in &segments {
        let by_time = config
            .retention_ms
            .is_some_and(|ms| s.max_timestamp < now_ms - ms as i64);
        let by_size = config
            .retention_bytes
            .is_some_and(|max| total - s.size >= max);
        if !(by_time || by_size) {
            break;
        }
        total -= s.size;
        cut = Some(s.next_offset);
    }
    cut
}

/// Moves the remote tier's start to `offset`: segments wholly below it leave the
/// manifest (durably), then their objects are deleted.
pub(super) async fn delete_remote_below(inner: &Inner, remote: &Remote, offset: u64) -> Result<()> {
    let gone = update_manifest(inner, remote, |m| {
        if offset <= m.start
            && m.segments
                .values()
                .next()
                .is_none_or(|s| s.next_offset > offset)
        {
            return None;
        }
        m.start = m.start.max(offset);
        let gone: Vec<RemoteSegment> = m
            .segments
            .values()
            .filter(|s| s.next_offset <= offset)
            .copied()
            .collect();
        for s in &gone {
            m.segments.remove(&s.base_offset);
        }
        Some(gone)
    })
    .await?
    .unwrap_or_default();
    for s in &gone {
        for ext in RemoteSegment::OBJECTS {
            remote.store.delete(&s.key(&remote.prefix, ext)).await?;
        }
        remote.stats.borrow_mut().deleted_segments += 1;
    }
    Ok(())
}

/// A unique id for an upload: the wall clock in nanoseconds, bumped past the last one.
fn upload_id() -> u64 {
    thread_local!(static LAST: Cell<u64> = const { Cell::new(0) });
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    LAST.with(|l| {
        let id = now.max(l.get() + 1);
        l.set(id);
        id
    })
}
