//! Opening a log: its segments are loaded and, where their indexes cannot be trusted,
//! recovered; then the log start, the producers' state and the appender are set up.
//!
//! After a clean shutdown every segment was sealed with its indexes, and they are loaded
//! as they are. After an unclean one, the last segment (and any whose indexes are missing,
//! damaged or do not match its file) is scanned batch by batch (`recovery.rs`) and cut after
//! its last valid batch; segments that no longer follow a cut one are deleted, so the log
//! stays a prefix of what was written. `DESIGN.md` ("Recovery") says why each crash case is
//! safe.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;

use super::markers::{self, CLEAN_SHUTDOWN_FILE, LOG_START_FILE};
use super::{FlushStats, Inner, Log};
use crate::appender::Appender;
use crate::cache::BatchCache;
use crate::config::{LogConfig, SEGMENT_BYTES_MAX};
use crate::error::{Error, Result};
use crate::io::{align_down, align_up, Vfs};
use crate::offset_index::{OffsetIndex, SegmentSummary, TimeIndex};
use crate::producer_state::{ProducerBatch, ProducerState, SNAPSHOT_FILE};
use crate::reader::ReadCache;
use crate::recovery::ScanRules;
use crate::segment::{parse_log_name, segment_path, Segment};
use crate::watermark::{FifoLock, Watch};

impl Log {
    /// Opens (creating if needed) the log in `dir` with a private cache.
    pub async fn open(dir: impl AsRef<Path>, config: LogConfig) -> Result<Log> {
        Self::open_with_cache(dir, config, BatchCache::new(64 << 20)).await
    }

    /// Opens the log in `dir`, serving recent data from `cache` (shared by the logs of a core).
    pub async fn open_with_cache(
        dir: impl AsRef<Path>,
        config: LogConfig,
        cache: Rc<BatchCache>,
    ) -> Result<Log> {
        Self::open_on(Vfs::Real, dir.as_ref(), config, cache).await
    }

    /// Opens the log in `dir` on the given file layer: `SimDisk::vfs()` in crash tests
    /// (the `sim` feature).
    #[cfg(feature = "sim")]
    pub async fn open_in(
        vfs: Vfs,
        dir: &Path,
        config: LogConfig,
        cache: Rc<BatchCache>,
    ) -> Result<Log> {
        Self::open_on(vfs, dir, config, cache).await
    }

    /// Opens the log in `dir` on `vfs`: recovers the segments, the log start and the
    /// producers' state, and makes what it keeps durable.
    async fn open_on(
        vfs: Vfs,
        dir: &Path,
        config: LogConfig,
        cache: Rc<BatchCache>,
    ) -> Result<Log> {
        vfs.create_dir_all(dir).await?;
        let marker_path = dir.join(CLEAN_SHUTDOWN_FILE);
        let clean = vfs
            .read_small(&marker_path)
            .await?
            .is_some_and(|m| markers::decode_clean_shutdown(&m).is_some());
        if vfs.exists(&marker_path) {
            // From here on the directory may change: the marker must go first.
            vfs.remove(&marker_path).await?;
            vfs.sync_dir(dir).await?;
        }
        let interval = config.index_interval_bytes;
        super::clean_files::complete_swaps(&vfs, dir, interval).await?;
        let checkpoint = vfs
            .read_small(&dir.join(super::CLEANER_CHECKPOINT_FILE))
            .await?
            .and_then(|b| super::clean_files::Checkpoint::decode(&b))
            .unwrap_or(super::clean_files::Checkpoint {
                offset: 0,
                tombstones_due_ms: None,
            });
        let (mut segments, scanned) =
            recover_segments(&vfs, dir, interval, clean, checkpoint.offset).await?;
        remove_stale_compaction_markers(&vfs, dir, &segments).await?;

        let persisted_start = vfs
            .read_small(&dir.join(LOG_START_FILE))
            .await?
            .and_then(|b| markers::decode_log_start(&b));
        let (active, created) = match segments.values().next_back() {
            Some(s) => (s.clone(), false),
            None => {
                let base = persisted_start.unwrap_or(0);
                let path = segment_path(dir, base);
                let file = vfs.open(&path, true).await?;
                let seg = Rc::new(Segment::new(base, file, path, interval));
                segments.insert(base, seg.clone());
                (seg, true)
            }
        };
        if created {
            vfs.sync_dir(dir).await?;
        }
        let (size, next_offset) = {
            let st = active.state.borrow();
            (st.size, st.next_offset)
        };
        // Appends go after `size`: a compaction marker of the active segment must not claim
        // bytes past it (recovery cut into the cleaned bytes), or offset gaps would be
        // allowed where appends write.
        if let Some(m) = markers::read_compacted(&vfs, &active.log_path).await? {
            if m.bytes > size {
                let m = markers::Compacted {
                    bytes: size,
                    next_offset,
                };
                markers::write_compacted(&vfs, &active.log_path, m).await?;
            }
        }
        let producers =
            recover_producers(&vfs, dir, clean, &segments, next_offset, &scanned, interval).await?;
        let epochs = super::epochs::load(&vfs, dir, &segments, next_offset).await?;
        let tail_pos = align_down(size);
        let tail = if size > tail_pos {
            active
                .file
                .read_at(tail_pos, (size - tail_pos) as usize)
                .await?
        } else {
            Bytes::new()
        };
        if tail.len() as u64 != size - tail_pos {
            return Err(Error::CorruptFile {
                path: active.log_path.clone(),
                reason: format!("could not read back the tail block at {tail_pos}"),
            });
        }
        // Capped like `ensure_preallocated`: a log with small segments (or many partitions on a
        // small disk) must not reserve more than a segment's worth on open.
        // Only the next chunk's room: an idle log (of thousands) reserves little; appends grow
        // the reservation in steps (`ensure_preallocated`).
        // An empty log reserves nothing until its first append: creating thousands of
        // partitions must not reserve a chunk of disk each (issue 35: 2,000 new partitions
        // took 2 GB).
        let prealloc = if size == 0 {
            0
        } else {
            align_up(size + config.write_chunk_bytes as u64)
                .min(align_up(config.effective_segment_bytes() + (1 << 20)).max(align_up(size)))
        };
        // On a full disk the log still opens: what it holds stays readable, and appends
        // preallocate before writing (`ensure_preallocated`), so they fail with ENOSPC, and
        // succeed again once space is freed, without a reopen.
        let reserved = if prealloc == 0 {
            Ok(())
        } else {
            active.file.pre_allocate(prealloc).await
        };
        let prealloc = match reserved {
            Ok(()) => prealloc,
            Err(e) if e.is_no_space() => {
                tracing::warn!(dir = %dir.display(), error = %e, "disk full: log opened without preallocated room");
                align_up(size)
            }
            Err(e) => return Err(e),
        };
        // Whatever recovery kept is made durable now, so `flushed_offset` can start at the end.
        active.file.fdatasync().await?;
        let appender = Appender::new(
            active.file.clone(),
            active.base_offset,
            config.write_chunk_bytes,
            size,
            &tail,
            next_offset,
            prealloc,
        );
        // A checkpoint never vouches for more than the log holds (the tombstone rule relies
        // on it: see `clean.rs`).
        let checkpoint = super::clean_files::Checkpoint {
            offset: checkpoint.offset.min(next_offset),
            ..checkpoint
        };
        let first_base = segments.keys().next().copied().unwrap_or(0);
        let log_start = persisted_start.map_or(first_base, |p| p.clamp(first_base, next_offset));
        let reader = ReadCache::new(
            config.read_chunk_bytes,
            config.read_ahead_bytes,
            cache.clone(),
        );
        tracing::debug!(dir = %dir.display(), clean, segments = segments.len(), log_start, next_offset, "log opened");
        let committed_reads = config.committed_reads;
        let inner = Rc::new(Inner {
            dir: dir.to_owned(),
            vfs,
            config: RefCell::new(config),
            segments: RefCell::new(segments),
            appender: RefCell::new(appender),
            append_lock: FifoLock::default(),
            log_start: Cell::new(log_start),
            log_end: Cell::new(next_offset),
            hw: Watch::new(next_offset),
            flushed: Watch::new(next_offset),
            // Replicated: nothing is known committed after a restart until the caller says so
            // (the Raft state is not the engine's); a single-node log shows what it holds.
            visible: Watch::new(if committed_reads {
                log_start
            } else {
                next_offset
            }),
            committed_reads,
            committed: Cell::new(log_start),
            leader_epoch: Cell::new(epochs.latest().unwrap_or(0)),
            epochs: RefCell::new(epochs),
            writes: RefCell::new(VecDeque::new()),
            next_write_seq: Cell::new(0),
            partials_in_flight: Cell::new(0),
            writes_completed: Watch::new(0),
            kick_scheduled: Cell::new(false),
            sync_running: Cell::new(false),
            syncs_completed: Watch::new(0),
            flush_stats: RefCell::new(FlushStats::default()),
            failed: RefCell::new(None),
            listeners: RefCell::new(Vec::new()),
            cache: cache.register(),
            reader,
            closed: Cell::new(false),
            producers: RefCell::new(producers),
            idle_mark: Cell::new(next_offset),
            layout_lock: FifoLock::default(),
            checkpoint: Cell::new(checkpoint),
            cleaning: Cell::new(false),
            remote: RefCell::new(None),
        });
        Ok(Log { inner })
    }
}

/// Loads the segments of the log in `dir`, oldest first. A segment's indexes are trusted
/// after a clean shutdown (`clean`), and for every segment but the last otherwise, when
/// `load_indexes` accepts them; any other segment is scanned and cut after its last valid
/// batch, and the segments after a cut one are deleted. Returns the segments and the
/// idempotent producers' batches found by the scans, in offset order.
async fn recover_segments(
    vfs: &Vfs,
    dir: &Path,
    interval: u32,
    clean: bool,
    cleaned_to: u64,
) -> Result<(BTreeMap<u64, Rc<Segment>>, Vec<(ProducerBatch, u64, u64)>)> {
    // The leader-epoch list as it was left: the epochs scanned batches must carry.
    let stored_epochs = super::epochs::StoredEpochs::read(vfs, dir).await?;
    let mut bases: Vec<u64> = vfs
        .list(dir)?
        .iter()
        .filter_map(|n| parse_log_name(n))
        .collect();
    bases.sort_unstable();

    let mut segments: BTreeMap<u64, Rc<Segment>> = BTreeMap::new();
    let mut expected_base: Option<u64> = None;
    let mut cut = false;
    // Set when recovery deletes segment files: the directory is fsync'ed once at the end,
    // so a power loss cannot bring a removed segment back behind a cut.
    let mut removed_any = false;
    // Idempotent producers' batches in the segments recovery scans, in offset order.
    let mut scanned: Vec<(ProducerBatch, u64, u64)> = Vec::new();
    for (i, &base) in bases.iter().enumerate() {
        let path = segment_path(dir, base);
        if cut {
            tracing::warn!(path = %path.display(), "removing segment after a corrupt one");
            let seg = Segment::new(base, vfs.open(&path, false).await?, path, interval);
            seg.remove_files(vfs).await?;
            removed_any = true;
            continue;
        }
        if let Some(exp) = expected_base {
            if base != exp {
                tracing::warn!(path = %path.display(), expected = exp, "segment does not follow its predecessor; cutting the log here");
                cut = true;
                let seg = Segment::new(base, vfs.open(&path, false).await?, path, interval);
                seg.remove_files(vfs).await?;
                removed_any = true;
                continue;
            }
        }
        let file = vfs.open(&path, false).await?;
        let file_size = file.file_size().await?;
        let is_last = i + 1 == bases.len();
        let seg = match load_indexes(vfs, &path, base, file_size).await? {
            // A summary without a max timestamp on a segment with data was written from
            // headers that said -1 (sarama before 2025; the validator now computes it from
            // the records): rescanned, so that retention goes by the records' age
            // (`batch::max_timestamp`), not delete it at the next pass.
            Some((summary, oi, ti))
                if (clean || !is_last) && !(summary.max_timestamp < 0 && file_size > 0) =>
            {
                Segment::from_parts(base, file, path, interval, summary, oi, ti)
            }
            _ => {
                let compacted = markers::read_compacted(vfs, &path).await?;
                // A sealed segment wholly below the cleaner checkpoint may have been cleaned
                // by a build that wrote no markers: offsets there only go up, as before. (Not
                // the last segment: sealed means fdatasync'ed whole, so no unflushed tail
                // whose damage this would let through.)
                let legacy_cleaned =
                    compacted.is_none() && bases.get(i + 1).is_some_and(|&next| next <= cleaned_to);
                let rules = ScanRules {
                    compacted_bytes: if legacy_cleaned {
                        u64::MAX
                    } else {
                        compacted.map_or(0, |m| m.bytes)
                    },
                    compacted_next: compacted.map_or(base, |m| m.next_offset),
                    epochs: stored_epochs.rule(),
                };
                let seg = Segment::new(base, file, path, interval);
                let stop = crate::recovery::scan_segment(
                    &seg,
                    u64::from(interval.max(1)),
                    rules,
                    &mut scanned,
                )
                .await?;
                let valid = seg.state.borrow().size;
                if stop.reason.is_some() && !is_zeros_or_end(&seg, valid, file_size).await {
                    tracing::warn!(
                        path = %seg.log_path.display(),
                        valid_bytes = valid,
                        file_bytes = file_size,
                        reason = ?stop.reason,
                        "recovery cut the segment after its last valid batch"
                    );
                }
                if valid < file_size {
                    seg.file.truncate(valid).await?;
                    // The cut must hold: stale batches past it may not come back.
                    seg.file.fdatasync().await?;
                }
                if !is_last && valid < file_size {
                    cut = true;
                }
                if !is_last && valid == file_size {
                    // A whole sealed segment whose indexes could not be trusted: written
                    // anew, so that the next open loads them instead of scanning again.
                    seg.seal(vfs).await?;
                }
                // Later segments no longer follow if this one was cut short.
                seg
            }
        };
        expected_base = Some(seg.state.borrow().next_offset);
        segments.insert(base, Rc::new(seg));
    }

    if removed_any {
        vfs.sync_dir(dir).await?;
    }
    Ok((segments, scanned))
}

/// Removes compaction markers (`<base>.compacted`) whose segment is gone — retention,
/// a truncation or a recovery cut deleted it; they are left behind then so that no crash can
/// leave a cleaned segment without its marker — and half-written ones (`.compacted.tmp`).
/// A segment created later at that base must not inherit one (`Inner::roll` checks too).
async fn remove_stale_compaction_markers(
    vfs: &Vfs,
    dir: &Path,
    segments: &BTreeMap<u64, Rc<Segment>>,
) -> Result<()> {
    let mut removed = false;
    for name in vfs.list(dir)? {
        let stale = if name.ends_with(markers::COMPACTED_TMP_SUFFIX) {
            true
        } else if let Some(stem) = name.strip_suffix(markers::COMPACTED_SUFFIX) {
            parse_log_name(&format!("{stem}.log")).is_some_and(|b| !segments.contains_key(&b))
        } else {
            false
        };
        if stale {
            vfs.remove(&dir.join(&name)).await?;
            removed = true;
        }
    }
    if removed {
        vfs.sync_dir(dir).await?;
    }
    Ok(())
}

/// The producers' state of a log (`segments`, the last one active) which ends at
/// `next_offset`, from the snapshot file and the batches recovery scanned (`scanned`, in
/// offset order).
async fn recover_producers(
    vfs: &Vfs,
    dir: &Path,
    clean: bool,
    segments: &BTreeMap<u64, Rc<Segment>>,
    next_offset: u64,
    scanned: &[(ProducerBatch, u64, u64)],
    interval: u32,
) -> Result<ProducerState> {
    let active_base = segments.keys().next_back().copied().unwrap_or(0);
    // Producer state: the snapshot is complete up to the offset it records (`covers`,
    // the log end when it was written: at a roll or a clean close). It is used when that
    // offset is the log end, or — after a crash — lies in the active segment, which
    // recovery scanned: the scan's batches from there on are replayed over it. Anything
    // else (recovery cut the log below it; a crash during a roll) is stale: then only the
    // scanned batches are known, and other producers start over unknown (accepted at any
    // sequence, as Kafka does). A snapshot that is not exactly the log end is rewritten
    // now, so it never describes batches a later recovery could replace.
    let snapshot_path = dir.join(SNAPSHOT_FILE);
    let snapshot = vfs
        .read_small(&snapshot_path)
        .await?
        .and_then(|b| ProducerState::decode(&b));
    let mut producers = ProducerState::default();
    let mut replay_from = 0;
    let mut rewrite = vfs.exists(&snapshot_path);
    match snapshot {
        Some((state, covers)) if covers == next_offset => {
            producers = state;
            replay_from = covers;
            rewrite = false;
        }
        Some((state, covers)) if !clean && active_base <= covers && covers < next_offset => {
            producers = state;
            replay_from = covers;
        }
        // A crash during a roll: the snapshot describes the log up to an earlier segment.
        // Those sealed segments (from the one holding `covers` to the active one) were not
        // scanned; they are read now for their producer batches, so that open transactions
        // and aborted ones known only from there are not lost.
        Some((state, covers))
            if !clean
                && covers < active_base
                && segments.keys().next().is_some_and(|&first| first <= covers) =>
        {
            let mut earlier = Vec::new();
            for seg in segments
                .range(..active_base)
                .filter(|(_, s)| s.state.borrow().next_offset > covers)
                .map(|(_, s)| s)
            {
                earlier.extend(crate::recovery::producer_batches(seg, interval).await?);
            }
            producers = state;
            // Segments recovery scanned itself before the active one were read again
            // above (after their cut): only the active segment's batches are left to replay.
            replay_from = active_base;
            for (b, base, last) in earlier.iter().filter(|s| s.1 >= covers) {
                producers.update(b, *base, *last);
            }
        }
        _ => {}
    }
    for (b, base, last) in scanned.iter().filter(|s| s.1 >= replay_from) {
        producers.update(b, *base, *last);
    }
    if rewrite {
        vfs.write_small(&snapshot_path, &producers.encode(next_offset))
            .await?;
    }
    Ok(producers)
}

/// The indexes of the segment at `log_path`, if they can be trusted: both decode (CRC
/// included), agree, and describe exactly the `.log` file as it is (`file_size`).
async fn load_indexes(
    vfs: &Vfs,
    log_path: &Path,
    base: u64,
    file_size: u64,
) -> Result<Option<(SegmentSummary, OffsetIndex, TimeIndex)>> {
    let oi = vfs.read_small(&log_path.with_extension("index")).await?;
    let ti = vfs
        .read_small(&log_path.with_extension("timeindex"))
        .await?;
    let (Some(oi), Some(ti)) = (oi, ti) else {
        return Ok(None);
    };
    let (Some((s1, oi)), Some((s2, ti))) = (OffsetIndex::decode(&oi), TimeIndex::decode(&ti))
    else {
        tracing::warn!(path = %log_path.display(), "damaged index; rebuilding it from the log");
        return Ok(None);
    };
    if s1 != s2 || s1.base_offset != base || s1.segment_bytes != file_size {
        return Ok(None);
    }
    if s1.segment_bytes > SEGMENT_BYTES_MAX {
        // Positions past this do not fit the index: rescan, and recovery cuts it there.
        tracing::warn!(path = %log_path.display(), bytes = s1.segment_bytes, "segment larger than an index can address; rescanning it");
        return Ok(None);
    }
    Ok(Some((s1, oi, ti)))
}

/// True if everything from `from` to the end of the file is zeros (a clean end of data in
/// a preallocated file), checked on at most the next 64 KiB.
async fn is_zeros_or_end(seg: &Segment, from: u64, file_size: u64) -> bool {
    if from >= file_size {
        return true;
    }
    let len = (file_size - from).min(64 << 10) as usize;
    match seg.file.read_at(from, len).await {
        Ok(b) => b.iter().all(|&x| x == 0),
        Err(_) => false,
    }
}
