//! A partition log: the segments of one partition, their watermarks, and the append, flush,
//! read, retention and recovery operations on them.
//!
//! Append path: [`Log::append`] validates the batches (CRC included), takes the append
//! lock, rolls the segment if needed, assigns offsets in place, indexes and caches the
//! batches, copies them into the appender's chunk ([`crate::appender`]) and launches direct
//! writes; it then waits (without the lock) until its batches are written, which is when
//! the high watermark passes them.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::{Bytes, BytesMut};

use crate::appender::{Appender, WriteOp};
use crate::batch::{self, BatchHeader, HEADER_BYTES};
use crate::cache::{BatchCache, LogCache};
use crate::config::{LogConfig, MAX_SEGMENT_BYTES};
use crate::error::{Error, Result};
use crate::io::{align_down, align_up, Vfs};
use crate::offset_index::{OffsetIndex, TimeIndex};
use crate::producer_state::{Check, ProducerBatch, ProducerState, SNAPSHOT_FILE};
use crate::reader::ReadCache;
use crate::segment::{parse_log_name, segment_path, Segment};
use crate::watermark::{FifoLock, Watch, Watermarks};

/// Name of the clean-shutdown marker in a log directory.
pub const CLEAN_SHUTDOWN_FILE: &str = "clean_shutdown";
/// Name of the file that records a log start offset set inside a segment.
pub const LOG_START_FILE: &str = "log_start_offset";
const MARKER_MAGIC: &[u8; 8] = b"WEIRCLN1";
const LOG_START_MAGIC: &[u8; 8] = b"WEIRLSO1";

/// Offsets assigned to one `append`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset of the first record appended.
    pub base_offset: u64,
    /// Offset of the last record appended.
    pub last_offset: u64,
    /// Log start offset at the time of the append (Kafka returns it in produce responses).
    pub log_start_offset: u64,
    /// The batch was a retry of an idempotent producer's batch already in the log: nothing
    /// was written, the offsets are the original ones.
    pub duplicate: bool,
}

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
    pub fn len(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }
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

/// A callback run when the high watermark moves.
type Listener = Rc<dyn Fn(Watermarks)>;

struct WriteSlot {
    seq: u64,
    covered_offset: u64,
    covered_pos: u64,
    segment_base: u64,
    partial: bool,
    done: bool,
}

struct Inner {
    dir: PathBuf,
    vfs: Vfs,
    config: RefCell<LogConfig>,
    segments: RefCell<BTreeMap<u64, Rc<Segment>>>,
    appender: RefCell<Appender>,
    /// Orders appends (and rolls, close, delete) first-come-first-served.
    append_lock: FifoLock,
    log_start: Cell<u64>,
    log_end: Cell<u64>,
    hw: Watch,
    flushed: Watch,
    writes: RefCell<VecDeque<WriteSlot>>,
    next_write_seq: Cell<u64>,
    partials_in_flight: Cell<usize>,
    writes_completed: Watch,
    kick_scheduled: Cell<bool>,
    sync_running: Cell<bool>,
    syncs_completed: Watch,
    flush_stats: RefCell<FlushStats>,
    failed: RefCell<Option<String>>,
    listeners: RefCell<Vec<Listener>>,
    cache: Rc<LogCache>,
    reader: ReadCache,
    closed: Cell<bool>,
    /// The log end offset at the previous retention check: unchanged means idle since then.
    idle_mark: Cell<u64>,
    /// Idempotent producers' last batches (`producer_state.rs`).
    producers: RefCell<ProducerState>,
}

/// One partition's log. Lives on one glommio executor (it is `!Send`).
pub struct Log {
    inner: Rc<Inner>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Upper bounds (seconds) of the flush latency buckets in `FlushStats::buckets`.
pub const FLUSH_BUCKETS: [f64; 10] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.1,
];

/// Flushes (fdatasync) of one log: a count, their total time, and a latency histogram
/// (`buckets[i]`: flushes that took at most `FLUSH_BUCKETS[i]`, not cumulative).
#[derive(Debug, Clone, Default)]
pub struct FlushStats {
    pub count: u64,
    pub seconds: f64,
    pub buckets: [u64; FLUSH_BUCKETS.len()],
}

impl FlushStats {
    fn record(&mut self, took: std::time::Duration) {
        let s = took.as_secs_f64();
        self.count += 1;
        self.seconds += s;
        if let Some(i) = FLUSH_BUCKETS.iter().position(|&b| s <= b) {
            self.buckets[i] += 1;
        }
    }
}

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
        Self::open_in(Vfs::Real, dir.as_ref(), config, cache).await
    }

    /// Opens the log in `dir` on the given file layer (a simulated disk in crash tests).
    pub async fn open_in(
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
            .is_some_and(|m| decode_marker(&m).is_some());
        if vfs.exists(&marker_path) {
            // From here on the directory may change: the marker must go first.
            vfs.remove(&marker_path).await?;
            vfs.sync_dir(dir).await?;
        }
        let mut bases: Vec<u64> = vfs
            .list(dir)?
            .iter()
            .filter_map(|n| parse_log_name(n))
            .collect();
        bases.sort_unstable();

        let interval = config.index_interval_bytes;
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
                seg.remove_files(&vfs).await?;
                removed_any = true;
                continue;
            }
            if let Some(exp) = expected_base {
                if base != exp {
                    tracing::warn!(path = %path.display(), expected = exp, "segment does not follow its predecessor; cutting the log here");
                    cut = true;
                    let seg = Segment::new(base, vfs.open(&path, false).await?, path, interval);
                    seg.remove_files(&vfs).await?;
                    removed_any = true;
                    continue;
                }
            }
            let file = vfs.open(&path, false).await?;
            let file_size = file.file_size().await?;
            let is_last = i + 1 == bases.len();
            let seg = match load_indexes(&vfs, &path, base, file_size).await? {
                Some((summary, oi, ti)) if clean || !is_last => {
                    Segment::from_parts(base, file, path, interval, summary, oi, ti)
                }
                _ => {
                    let seg = Segment::new(base, file, path, interval);
                    let stop = crate::recovery::scan_segment(
                        &seg,
                        u64::from(interval.max(1)),
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

        let persisted_start = vfs
            .read_small(&dir.join(LOG_START_FILE))
            .await?
            .and_then(|b| decode_u64_file(&b, LOG_START_MAGIC));
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
            Some((state, covers))
                if !clean && active.base_offset <= covers && covers < next_offset =>
            {
                producers = state;
                replay_from = covers;
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
        let prealloc = align_up(size + config.write_chunk_bytes as u64)
            .min(align_up(config.effective_segment_bytes() + (1 << 20)).max(align_up(size)));
        // On a full disk the log still opens: what it holds stays readable, and appends
        // preallocate before writing (`ensure_preallocated`), so they fail with ENOSPC, and
        // succeed again once space is freed, without a reopen.
        let prealloc = match active.file.pre_allocate(prealloc).await {
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
        let first_base = segments.keys().next().copied().unwrap_or(0);
        let log_start = persisted_start.map_or(first_base, |p| p.clamp(first_base, next_offset));
        let reader = ReadCache::new(
            config.read_chunk_bytes,
            config.read_ahead_bytes,
            cache.clone(),
        );
        tracing::debug!(dir = %dir.display(), clean, segments = segments.len(), log_start, next_offset, "log opened");
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
        });
        Ok(Log { inner })
    }

    /// Bytes of write buffer (the appender's chunk) this log holds now: one chunk
    /// (`write_chunk_bytes`) while it is being appended to, none once it has been idle for
    /// a retention check (see [`Log::enforce_retention`]).
    pub fn write_buffer_bytes(&self) -> usize {
        self.inner.appender.borrow().buffer_bytes()
    }

    /// The directory this log lives in.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Appends one or more v2 record batches (a produce request's record set). Assigns base
    /// offsets in place. Returns once the data has been written to the segment file (it
    /// survives a crash of the process); see [`Log::flush`] for power loss.
    pub async fn append(&self, records: Bytes) -> Result<AppendInfo> {
        let inner = &self.inner;
        inner.check_usable()?;
        let max = inner.config.borrow().max_batch_bytes;
        let infos = batch::validate_all(&records).map_err(Error::InvalidBatch)?;
        if let Some(big) = infos.iter().find(|i| i.total_bytes > max) {
            return Err(Error::BatchTooLarge {
                size: big.total_bytes,
                max,
            });
        }
        let mut records = match records.try_into_mut() {
            Ok(m) => m,
            Err(shared) => BytesMut::from(&shared[..]),
        };
        let permit = inner.append_lock.lock().await.ok_or(Error::Closed)?;
        inner.check_usable()?;
        // Idempotent producers: sequence checks and retries, under the append lock.
        let mut from_producers: Vec<(usize, ProducerBatch)> = Vec::new();
        {
            let mut pos = 0usize;
            for (i, info) in infos.iter().enumerate() {
                if let Some(b) = BatchHeader::parse(&records[pos..]).and_then(ProducerBatch::of) {
                    from_producers.push((i, b));
                }
                pos += info.total_bytes;
            }
        }
        if let Some((base_offset, last_offset)) = inner.check_producers(&infos, &from_producers)? {
            drop(permit);
            // The original may still be on its way to the disk.
            if !inner.hw.wait_for(last_offset + 1).await {
                return Err(inner.failure());
            }
            return Ok(AppendInfo {
                base_offset,
                last_offset,
                log_start_offset: inner.log_start.get(),
                duplicate: true,
            });
        }
        let offsets: u64 = infos.iter().map(|i| i.last_offset_delta as u64 + 1).sum();
        inner.maybe_roll(records.len() as u64, offsets).await?;
        inner.ensure_preallocated(records.len() as u64).await?;

        // Assign offsets in place and index the batches.
        let base_offset = inner.log_end.get();
        let segment = inner.active();
        let mut offset = base_offset;
        let mut pos = 0usize;
        let start_file_pos = segment.state.borrow().size;
        let mut producer_batches = from_producers.iter().peekable();
        for (i, info) in infos.iter().enumerate() {
            batch::assign_offset(&mut records[pos..], offset as i64, 0);
            let last = offset + info.last_offset_delta as u64;
            if let Some((_, b)) = producer_batches.next_if(|(j, _)| *j == i) {
                inner.producers.borrow_mut().update(b, offset, last);
            }
            segment.record_batch(
                start_file_pos + pos as u64,
                info.total_bytes as u64,
                offset,
                last,
                info.max_timestamp,
            );
            offset = last + 1;
            pos += info.total_bytes;
        }
        {
            let mut st = segment.state.borrow_mut();
            st.first_append_ms.get_or_insert_with(now_ms);
        }
        let records = records.freeze();
        let mut pos = 0usize;
        let mut off = base_offset;
        for info in &infos {
            let next = off + info.last_offset_delta as u64 + 1;
            inner
                .cache
                .insert(off, next, records.slice(pos..pos + info.total_bytes));
            off = next;
            pos += info.total_bytes;
        }
        let end_offset = offset;
        inner.log_end.set(end_offset);
        let file_end = inner.appender.borrow().end_pos() + records.len() as u64;
        inner.appender.borrow_mut().mark(file_end, end_offset);
        inner.copy_in(&records).await?;
        inner.schedule_kick();
        drop(permit);

        if !inner.hw.wait_for(end_offset).await {
            return Err(inner.failure());
        }
        Ok(AppendInfo {
            base_offset,
            last_offset: end_offset - 1,
            log_start_offset: inner.log_start.get(),
            duplicate: false,
        })
    }

    /// Makes every batch appended before this call durable (fdatasync). Concurrent calls
    /// share one fdatasync (group commit). Returns the flushed offset.
    pub async fn flush(&self) -> Result<u64> {
        self.inner.flush_to(self.inner.hw.get()).await
    }

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
        let inner = &self.inner;
        let hw = inner.hw.get();
        let start = inner.log_start.get();
        if offset < start || offset > inner.log_end.get() {
            return Err(Error::OffsetOutOfRange {
                offset,
                log_start_offset: start,
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

    pub fn watermarks(&self) -> Watermarks {
        self.inner.watermarks()
    }

    /// Registers a callback run (on this executor) every time the high watermark moves.
    pub fn on_append(&self, f: impl Fn(Watermarks) + 'static) {
        self.inner.listeners.borrow_mut().push(Rc::new(f));
    }

    /// Waits until the high watermark passes `offset` (data at `offset` is readable).
    pub async fn wait_for_data(&self, offset: u64) -> Result<()> {
        if self.inner.hw.wait_for(offset + 1).await {
            Ok(())
        } else {
            Err(self.inner.failure())
        }
    }

    /// First offset whose record timestamp is `>= timestamp_ms`, with that timestamp;
    /// `None` if every record is older. For compressed batches the batch's base offset and
    /// max timestamp are returned (the records are not decompressed).
    pub async fn offset_for_timestamp(&self, timestamp_ms: i64) -> Result<Option<(u64, i64)>> {
        let inner = &self.inner;
        let hw = inner.hw.get();
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
                if base >= inner.log_start.get() && header.max_timestamp.get() >= timestamp_ms {
                    let whole = concat(inner.reader.bytes(&seg, pos, pos + total, limit).await?);
                    if let Some(records) = batch::decode_records(&whole) {
                        if let Some(r) = records.iter().find(|r| r.timestamp >= timestamp_ms) {
                            return Ok(Some((r.offset as u64, r.timestamp)));
                        }
                    }
                    return Ok(Some((base, header.max_timestamp.get())));
                }
                pos += total;
            }
        }
        Ok(None)
    }

    /// The record with the largest timestamp among the readable records (Kafka's
    /// ListOffsets MAX_TIMESTAMP, KIP-734): its offset and timestamp; the earliest such record
    /// if several share it. `None` for an empty log. Segments are visited from the largest
    /// `max_timestamp` down, and a visit stops as soon as no remaining segment can beat the
    /// best found, so usually one segment is scanned. For a compressed batch the batch's base
    /// offset stands for its records (they are not decompressed).
    pub async fn max_timestamp_offset(&self) -> Result<Option<(u64, i64)>> {
        let inner = &self.inner;
        let hw = inner.hw.get();
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
                let batch_max = header.max_timestamp.get();
                let beats = match best {
                    None => true,
                    Some((off, ts)) => batch_max > ts || (batch_max == ts && base < off),
                };
                if last >= start && beats {
                    let whole = concat(inner.reader.bytes(&seg, pos, pos + total, limit).await?);
                    let found = batch::decode_records(&whole).and_then(|records| {
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
        Ok(best)
    }

    /// Applies `retention.ms` / `retention.bytes` and `segment.ms`: rolls an aged active
    /// segment and deletes whole old segments (moving the log start offset). Returns the
    /// number of segments deleted.
    pub async fn enforce_retention(&self, now_ms: i64) -> Result<usize> {
        let inner = &self.inner;
        inner.check_usable()?;
        inner.release_if_idle();
        let config = inner.config.borrow().clone();
        if let Some(age) = config.segment_age_limit() {
            let first = inner.active().state.borrow().first_append_ms;
            if first.is_some_and(|t| now_ms - t >= age.as_millis() as i64) {
                let permit = inner.append_lock.lock().await.ok_or(Error::Closed)?;
                if inner.active().state.borrow().size > 0 {
                    inner.roll().await?;
                }
                drop(permit);
            }
        }
        let mut deleted = 0;
        loop {
            let (oldest, total_bytes, count) = {
                let segs = inner.segments.borrow();
                let total: u64 = segs.values().map(|s| s.state.borrow().size).sum();
                (segs.values().next().cloned(), total, segs.len())
            };
            let Some(oldest) = oldest else { break };
            if count <= 1 {
                break; // the active segment is never deleted
            }
            let (size, max_ts) = {
                let st = oldest.state.borrow();
                (st.size, st.max_timestamp)
            };
            let by_time = config
                .retention_ms
                .is_some_and(|ms| max_ts < now_ms - ms as i64);
            let by_size = config
                .retention_bytes
                .is_some_and(|max| total_bytes - size >= max);
            if !(by_time || by_size) {
                break;
            }
            inner.delete_oldest_segment().await?;
            deleted += 1;
        }
        Ok(deleted)
    }

    /// Deletes whole segments below `offset` and sets the log start offset to `offset`
    /// (Kafka's DeleteRecords). The new start is durable when this returns.
    pub async fn set_log_start_offset(&self, offset: u64) -> Result<()> {
        let inner = &self.inner;
        let hw = inner.hw.get();
        if offset > hw {
            return Err(Error::OffsetOutOfRange {
                offset,
                log_start_offset: inner.log_start.get(),
                log_end_offset: hw,
            });
        }
        if offset <= inner.log_start.get() {
            return Ok(());
        }
        let mut bytes = LOG_START_MAGIC.to_vec();
        bytes.extend_from_slice(&offset.to_be_bytes());
        bytes.extend_from_slice(&crc32c::crc32c(&bytes).to_be_bytes());
        inner
            .vfs
            .write_small(&inner.dir.join(LOG_START_FILE), &bytes)
            .await?;
        inner.vfs.sync_dir(&inner.dir).await?;
        inner.log_start.set(offset);
        loop {
            let deletable = {
                let segs = inner.segments.borrow();
                let mut it = segs.values();
                match (it.next(), it.next()) {
                    (Some(_), Some(second)) => second.base_offset <= offset,
                    _ => false,
                }
            };
            if !deletable {
                break;
            }
            inner.delete_oldest_segment().await?;
            inner.log_start.set(offset);
        }
        Ok(())
    }

    /// Replaces the settings (e.g. a topic's retention changed). Sizes of in-memory
    /// buffers keep their old values until the log is reopened.
    pub fn set_config(&self, config: LogConfig) {
        *self.inner.config.borrow_mut() = config;
    }

    pub fn config(&self) -> LogConfig {
        self.inner.config.borrow().clone()
    }

    /// The fdatasyncs this log has made and how long they took.
    pub fn flush_stats(&self) -> FlushStats {
        self.inner.flush_stats.borrow().clone()
    }

    /// Number of segments and their total bytes.
    pub fn size(&self) -> (usize, u64) {
        let segs = self.inner.segments.borrow();
        (
            segs.len(),
            segs.values().map(|s| s.state.borrow().size).sum(),
        )
    }

    /// Flushes, seals the active segment (truncated, indexes written), writes the
    /// clean-shutdown marker, and closes the files.
    pub async fn close(self) -> Result<()> {
        let inner = &self.inner;
        let permit = inner.append_lock.lock().await.ok_or(Error::Closed)?;
        inner.drain_writes().await?;
        inner.flush_to(inner.hw.get()).await?;
        inner.active().seal(&inner.vfs).await?;
        inner.save_producer_state().await?;
        let marker = encode_marker(inner.log_end.get());
        inner
            .vfs
            .write_small(&inner.dir.join(CLEAN_SHUTDOWN_FILE), &marker)
            .await?;
        inner.vfs.sync_dir(&inner.dir).await?;
        inner.closed.set(true);
        inner.append_lock.close();
        drop(permit);
        let segs: Vec<Rc<Segment>> = std::mem::take(&mut *inner.segments.borrow_mut())
            .into_values()
            .collect();
        for s in segs {
            if let Ok(s) = Rc::try_unwrap(s) {
                let _ = s.file.close().await;
            }
        }
        Ok(())
    }

    /// Closes the log without a clean-shutdown marker and removes its directory.
    pub async fn delete(self) -> Result<()> {
        let inner = &self.inner;
        let permit = inner.append_lock.lock().await.ok_or(Error::Closed)?;
        let _ = inner.drain_writes().await;
        inner.closed.set(true);
        inner.append_lock.close();
        drop(permit);
        inner.segments.borrow_mut().clear();
        inner.vfs.remove_dir_all(&inner.dir).await
    }
}

impl Inner {
    fn watermarks(&self) -> Watermarks {
        Watermarks {
            log_start_offset: self.log_start.get(),
            log_end_offset: self.log_end.get(),
            high_watermark: self.hw.get(),
            flushed_offset: self.flushed.get(),
        }
    }

    fn active(&self) -> Rc<Segment> {
        self.segments
            .borrow()
            .values()
            .next_back()
            .cloned()
            .expect("a log always has an active segment")
    }

    fn check_usable(&self) -> Result<()> {
        if self.closed.get() {
            return Err(Error::Closed);
        }
        if let Some(why) = self.failed.borrow().as_ref() {
            return Err(Error::LogFailed(why.clone()));
        }
        Ok(())
    }

    fn failure(&self) -> Error {
        match self.failed.borrow().as_ref() {
            Some(why) => Error::LogFailed(why.clone()),
            None => Error::Closed,
        }
    }

    fn fail(&self, why: String) {
        if self.failed.borrow().is_none() {
            tracing::error!(dir = %self.dir.display(), error = %why, "log failed; appends refused until it is reopened");
            *self.failed.borrow_mut() = Some(why);
        }
        self.hw.fail();
        self.flushed.fail();
        self.writes_completed.fail();
        self.syncs_completed.fail();
    }

    /// Releases the appender's chunk if nothing was appended since the previous call and no
    /// write is in flight: an idle partition holds no write buffer (bounded memory with many
    /// partitions). The next append allocates a new chunk.
    fn release_if_idle(&self) {
        self.reader.expire_idle();
        let end = self.log_end.get();
        if self.idle_mark.replace(end) != end || !self.writes.borrow().is_empty() {
            return;
        }
        self.appender.borrow_mut().release_buffer();
    }

    /// Rolls to a new segment if the batches would overflow the active one: its size, or
    /// the 32-bit offsets relative to its base that the indexes hold.
    async fn maybe_roll(self: &Rc<Self>, incoming_bytes: u64, incoming_offsets: u64) -> Result<()> {
        let limit = self.config.borrow().effective_segment_bytes();
        let active = self.active();
        let (size, next) = {
            let st = active.state.borrow();
            (st.size, st.next_offset)
        };
        let offsets_after = next - active.base_offset + incoming_offsets;
        if size > 0 && (size + incoming_bytes > limit || offsets_after > u64::from(u32::MAX)) {
            self.roll().await?;
        }
        Ok(())
    }

    /// Makes sure the file is preallocated past the chunk the next `incoming` bytes land in.
    async fn ensure_preallocated(&self, incoming: u64) -> Result<()> {
        let (need, have, file) = {
            let a = self.appender.borrow();
            let need = align_up(a.end_pos() + incoming).max(a.chunk_end());
            (need, a.preallocated_to, a.file.clone())
        };
        if need <= have {
            return Ok(());
        }
        // ext4's fallocate waits for every direct write in flight on the file, so each call
        // drains the write queue: grow by at least `preallocate_bytes` (8 MiB), doubling
        // (hot logs extend rarely, cold ones stay small), up to the segment size.
        let (step, segment_bytes) = {
            let c = self.config.borrow();
            (
                c.preallocate_bytes.max(1 << 20),
                c.effective_segment_bytes(),
            )
        };
        let cap = align_up(segment_bytes + (1 << 20));
        let target = align_up(need.max((need + step).max(have * 2).min(cap)));
        file.pre_allocate(target).await?;
        self.appender.borrow_mut().preallocated_to = target;
        Ok(())
    }

    /// Copies appended bytes into the appender, launching a write for every chunk that fills.
    async fn copy_in(self: &Rc<Self>, data: &[u8]) -> Result<()> {
        let mut rest = data;
        while !rest.is_empty() {
            let n = self.appender.borrow_mut().copy(rest);
            rest = &rest[n..];
            if self.appender.borrow().is_full() {
                let max = self.config.borrow().writes_in_flight.max(1);
                loop {
                    self.check_usable()?;
                    if self.partials_in_flight.get() == 0 && self.writes.borrow().len() < max {
                        break;
                    }
                    let seen = self.writes_completed.get();
                    self.writes_completed.wait_for(seen + 1).await;
                }
                let op = self.appender.borrow_mut().take_full();
                self.launch(op);
            }
        }
        Ok(())
    }

    /// Arranges for [`Inner::kick`] to run once the tasks that are ready now have run: appenders
    /// woken by a completed write (or arriving together) fill the chunk first, so their data
    /// goes out in full chunks instead of a partial write that full chunks would wait for.
    fn schedule_kick(self: &Rc<Self>) {
        if self.kick_scheduled.replace(true) {
            return;
        }
        let inner = self.clone();
        glommio::spawn_local(async move {
            futures_lite::future::yield_now().await;
            inner.kick_scheduled.set(false);
            inner.kick();
        })
        .detach();
    }

    /// Writes whatever is waiting in the chunk, if nothing is in flight.
    fn kick(self: &Rc<Self>) {
        if self.failed.borrow().is_some() || !self.writes.borrow().is_empty() {
            return;
        }
        let op = self.appender.borrow_mut().take_partial();
        if let Some(op) = op {
            self.launch(op);
        }
    }

    fn launch(self: &Rc<Self>, op: WriteOp) {
        let seq = self.next_write_seq.get();
        self.next_write_seq.set(seq + 1);
        let file = {
            let a = self.appender.borrow();
            self.writes.borrow_mut().push_back(WriteSlot {
                seq,
                covered_offset: op.covered_offset,
                covered_pos: op.covered_pos,
                segment_base: a.segment_base,
                partial: op.partial,
                done: false,
            });
            a.file.clone()
        };
        if op.partial {
            self.partials_in_flight
                .set(self.partials_in_flight.get() + 1);
        }
        let inner = self.clone();
        glommio::spawn_local(async move {
            let r = file.write_at(op.buf, op.pos).await;
            inner.write_done(seq, r.map(|_| ()));
        })
        .detach();
    }

    fn write_done(self: &Rc<Self>, seq: u64, result: Result<()>) {
        if let Err(e) = result {
            self.fail(e.to_string());
        }
        let advanced = {
            let mut writes = self.writes.borrow_mut();
            if let Some(slot) = writes.iter_mut().find(|s| s.seq == seq) {
                slot.done = true;
                if slot.partial {
                    self.partials_in_flight
                        .set(self.partials_in_flight.get() - 1);
                }
            }
            let mut advanced = None;
            while writes.front().is_some_and(|s| s.done) {
                let s = writes.pop_front().expect("front exists");
                advanced = Some((s.covered_offset, s.covered_pos, s.segment_base));
            }
            advanced
        };
        self.writes_completed
            .advance(self.writes_completed.get() + 1);
        if self.failed.borrow().is_some() {
            return;
        }
        if let Some((offset, pos, segment_base)) = advanced {
            if let Some(seg) = self.segments.borrow().get(&segment_base) {
                let mut st = seg.state.borrow_mut();
                st.visible_size = st.visible_size.max(pos);
            }
            if offset > self.hw.get() {
                self.hw.advance(offset);
                let wm = self.watermarks();
                let listeners: Vec<Listener> = self.listeners.borrow().clone();
                for l in listeners {
                    l(wm);
                }
            }
        }
        self.schedule_kick();
    }

    /// Waits until every appended byte is written.
    async fn drain_writes(self: &Rc<Self>) -> Result<()> {
        loop {
            self.check_usable()?;
            self.kick();
            let idle = self.writes.borrow().is_empty() && !self.appender.borrow().has_unsubmitted();
            if idle {
                return Ok(());
            }
            let seen = self.writes_completed.get();
            self.writes_completed.wait_for(seen + 1).await;
        }
    }

    /// Seals the active segment and starts a new one at the log end offset. Caller holds
    /// the append lock.
    async fn roll(self: &Rc<Self>) -> Result<()> {
        self.drain_writes().await?;
        let old = self.active();
        old.seal(&self.vfs).await?;
        // Sealing fdatasync'ed everything written so far.
        self.flushed.advance(self.hw.get());
        let base = self.log_end.get();
        let path = segment_path(&self.dir, base);
        let config = self.config.borrow().clone();
        let file = self.vfs.open(&path, true).await?;
        if file.file_size().await? > 0 {
            // A file from a crashed earlier incarnation of this segment: its bytes must not
            // be appended into (recovery would take stale batches that happen to continue
            // the offsets as data). Empty it durably before the new segment is used.
            tracing::warn!(path = %path.display(), "a stale segment file exists at the roll offset; emptying it");
            file.truncate(0).await?;
            file.fdatasync().await?;
        }
        // The first chunk's room only; appends grow it in steps (`ensure_preallocated`).
        let prealloc = align_up(config.write_chunk_bytes as u64)
            .min(align_up(config.effective_segment_bytes() + (1 << 20)));
        file.pre_allocate(prealloc).await?;
        self.vfs.sync_dir(&self.dir).await?;
        let seg = Rc::new(Segment::new(
            base,
            file.clone(),
            path,
            config.index_interval_bytes,
        ));
        self.segments.borrow_mut().insert(base, seg);
        *self.appender.borrow_mut() =
            Appender::new(file, base, config.write_chunk_bytes, 0, &[], base, prealloc);
        // Recovery after a crash scans only the active segment: the producers' state up to
        // its base comes from this snapshot.
        self.save_producer_state().await?;
        tracing::debug!(dir = %self.dir.display(), base, "rolled to a new segment");
        Ok(())
    }

    /// Checks the idempotent producers' batches of a record set (`batches`: index into
    /// `infos` and the batch's producer fields) against the state. `Some(offsets)`: the set
    /// is a retry of a batch already in the log at those offsets.
    fn check_producers(
        &self,
        infos: &[batch::BatchInfo],
        batches: &[(usize, ProducerBatch)],
    ) -> Result<Option<(u64, u64)>> {
        if batches.is_empty() {
            return Ok(None);
        }
        let state = self.producers.borrow();
        // The offsets each batch would get.
        let mut starts = Vec::with_capacity(infos.len());
        let mut next = self.log_end.get();
        for info in infos {
            starts.push(next);
            next += info.last_offset_delta as u64 + 1;
        }
        // A record set with several batches of one producer: each is checked against the
        // state as the earlier ones would leave it.
        let mut scratch = (batches.len() > 1).then(|| state.clone());
        for (i, b) in batches {
            let check = scratch.as_ref().unwrap_or(&state).check(b)?;
            if let Check::Duplicate {
                base_offset,
                last_offset,
            } = check
            {
                return Ok(Some((base_offset, last_offset)));
            }
            if let Some(sc) = scratch.as_mut() {
                sc.update(
                    b,
                    starts[*i],
                    starts[*i] + infos[*i].last_offset_delta as u64,
                );
            }
        }
        Ok(None)
    }

    /// Writes the producer-state snapshot covering everything up to the log end (called
    /// under the append lock, at a roll and at close). Nothing to write when no idempotent
    /// producer ever wrote here and no snapshot exists.
    async fn save_producer_state(&self) -> Result<()> {
        let path = self.dir.join(SNAPSHOT_FILE);
        if self.producers.borrow().len() == 0 && !self.vfs.exists(&path) {
            return Ok(());
        }
        let bytes = self.producers.borrow().encode(self.log_end.get());
        self.vfs.write_small(&path, &bytes).await
    }

    async fn flush_to(&self, target: u64) -> Result<u64> {
        loop {
            if self.flushed.get() >= target {
                return Ok(self.flushed.get());
            }
            self.check_usable()?;
            if self.sync_running.get() {
                let seen = self.syncs_completed.get();
                self.syncs_completed.wait_for(seen + 1).await;
                continue;
            }
            self.sync_running.set(true);
            let covered = self.hw.get();
            let file = self.appender.borrow().file.clone();
            let started = std::time::Instant::now();
            let r = file.fdatasync().await;
            self.flush_stats.borrow_mut().record(started.elapsed());
            self.sync_running.set(false);
            match r {
                Ok(()) => self.flushed.advance(covered),
                Err(e) => self.fail(e.to_string()),
            }
            self.syncs_completed.advance(self.syncs_completed.get() + 1);
        }
    }

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
            let header = match batch::check_framing(&header_bytes) {
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
                [one] => batch::validate(one),
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

    async fn delete_oldest_segment(&self) -> Result<()> {
        let seg = {
            let mut segs = self.segments.borrow_mut();
            if segs.len() <= 1 {
                return Ok(());
            }
            segs.pop_first().map(|(_, s)| s)
        };
        let Some(seg) = seg else { return Ok(()) };
        let next_base = self
            .segments
            .borrow()
            .keys()
            .next()
            .copied()
            .unwrap_or(seg.base_offset);
        self.log_start.set(self.log_start.get().max(next_base));
        self.reader.forget_segment(seg.base_offset);
        seg.remove_files(&self.vfs).await?;
        tracing::debug!(dir = %self.dir.display(), base = seg.base_offset, "retention deleted a segment");
        Ok(())
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

async fn load_indexes(
    vfs: &Vfs,
    log_path: &Path,
    base: u64,
    file_size: u64,
) -> Result<Option<(crate::offset_index::SegmentSummary, OffsetIndex, TimeIndex)>> {
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
    if s1.segment_bytes > MAX_SEGMENT_BYTES {
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

fn encode_marker(log_end: u64) -> Vec<u8> {
    let mut v = MARKER_MAGIC.to_vec();
    v.extend_from_slice(&log_end.to_be_bytes());
    v.extend_from_slice(&crc32c::crc32c(&v).to_be_bytes());
    v
}

fn decode_marker(b: &[u8]) -> Option<u64> {
    decode_u64_file(b, MARKER_MAGIC)
}

/// `magic[8] value u64 crc32c u32`, big-endian.
fn decode_u64_file(b: &[u8], magic: &[u8; 8]) -> Option<u64> {
    if b.len() != 20 || &b[..8] != magic {
        return None;
    }
    let crc = u32::from_be_bytes(b[16..20].try_into().ok()?);
    if crc32c::crc32c(&b[..16]) != crc {
        return None;
    }
    Some(u64::from_be_bytes(b[8..16].try_into().ok()?))
}
