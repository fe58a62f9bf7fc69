//! Recovery and the two header fields outside the batch CRC: `base_offset` and
//! `partition_leader_epoch`.
//!
//! What broke: `crash.rs`'s power-loss property (seed 3311443207740379476) found a batch served
//! at the wrong offset. A bit flipped in an unflushed write changed a batch's base offset from
//! 361 to 377; the CRC does not cover it, and recovery accepted offset gaps everywhere
//! (compacted segments legitimately have them), so the batch was kept and served at 377. A
//! flipped epoch would have gone into the leader-epoch list the same way.
//!
//! These tests flip exactly those bits in unflushed batches and check that recovery cuts the
//! log at that batch (it is never served; nothing flushed is lost), and that the gaps of
//! segments compaction rewrote — the one place they are legitimate — never cause a cut,
//! including after a truncation into such a segment and appends after it.

mod common;

use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;
use weir_storage::batch::{assign_offset, validate_stored, RecordBatchBuilder};
use weir_storage::io::{CrashFate, SimDisk};
use weir_storage::log::CleanOptions;
use weir_storage::{BatchCache, Error, Log, LogConfig};

/// Header byte of the low byte of `base_offset` (bytes 0..8, big-endian).
const BASE_OFFSET_LOW_BYTE: u64 = 7;
/// Header byte of the low byte of `partition_leader_epoch` (bytes 12..16, big-endian).
const EPOCH_LOW_BYTE: u64 = 15;

/// One record; its key is unique for even `i` (kept by compaction) and the same for every
/// odd one (only the latest kept), so a compacted segment has gaps between its batches.
fn batch(i: u32, size: usize) -> Bytes {
    let key = if i.is_multiple_of(2) { i as u8 } else { 255 };
    RecordBatchBuilder::new(1_000 + i64::from(i))
        .record(Some(&[key]), Some(&vec![i as u8; size]), &[])
        .build()
}

/// (base offset, position) of every batch in a segment file's bytes, up to the first
/// position that holds no batch (the zeros past the data).
fn batch_positions(file: &[u8]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos + 61 <= file.len() {
        let len = i32::from_be_bytes(file[pos + 8..pos + 12].try_into().unwrap());
        if len <= 0 {
            break;
        }
        let base = u64::from_be_bytes(file[pos..pos + 8].try_into().unwrap());
        out.push((base, pos as u64));
        pos += 12 + len as usize;
    }
    out
}

/// The segment `.log` files in `dir` on `disk`, oldest first.
fn segment_files(disk: &SimDisk, dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = disk
        .paths()
        .into_iter()
        .filter(|p| p.parent() == Some(dir) && p.extension().is_some_and(|e| e == "log"))
        .collect();
    v.sort();
    v
}

async fn file_bytes(disk: &Rc<SimDisk>, path: &Path) -> Vec<u8> {
    disk.vfs()
        .read_small(path)
        .await
        .expect("read")
        .expect("exists")
}

/// Every batch the log serves, CRC-checked: (base offset, bytes). A read can come back
/// empty below the high watermark only in offsets compaction removed at the log's end (a
/// truncation to a batch after such a gap); the callers compare what was read with what
/// must be there.
async fn read_all(log: &Log) -> Vec<(u64, Vec<u8>)> {
    let wm = log.watermarks();
    let mut out = Vec::new();
    let mut off = wm.log_start_offset;
    while off < wm.high_watermark {
        let r = log.read(off, 64 << 10).await.expect("read");
        if r.is_empty() {
            break;
        }
        for (h, bytes) in r.batches() {
            validate_stored(bytes).expect("a served batch passes its CRC");
            out.push((h.base_offset.get() as u64, bytes.to_vec()));
            off = h.last_offset() as u64 + 1;
        }
    }
    out
}

async fn open(disk: &Rc<SimDisk>, dir: &Path, cfg: &LogConfig) -> Log {
    Log::open_in(disk.vfs(), dir, cfg.clone(), BatchCache::new(1 << 20))
        .await
        .expect("open")
}

#[derive(Clone, Copy, Debug)]
enum Field {
    BaseOffset,
    Epoch,
}

/// Appends batches (stamped with `epoch` if above 0), flushes part of them, flips a bit that
/// makes `field` of one unflushed batch larger (the victim: the first batch of the last
/// segment if `first_of_segment`, else one in its middle), crashes and reopens. Recovery
/// must cut the log exactly at the victim, keep everything before it and never serve it.
fn flip_case(field: Field, epoch: i32, first_of_segment: bool) {
    let tmp = common::tempdir();
    common::run(tmp.path(), move || async move {
        let dir = Path::new("/sim/flip");
        let disk = SimDisk::new();
        let cfg = LogConfig {
            segment_bytes: 16 << 10,
            ..common::small_config()
        };
        let log = open(&disk, dir, &cfg).await;
        if epoch > 0 {
            log.set_leader_epoch(epoch).expect("epoch");
        }
        let mut appended = Vec::new();
        for i in 0..40u32 {
            let b = batch(i, 700 + (i as usize * 37) % 300);
            let info = log.append(b.clone()).await.expect("append");
            let mut m = b.to_vec();
            assign_offset(&mut m, info.base_offset as i64, epoch);
            appended.push((info.base_offset, m));
            if i == 10 {
                log.flush().await.expect("flush");
            }
        }
        let flushed = log.watermarks().flushed_offset;
        drop(log);
        // Every write reached the disk (a power loss that kept them all), but one bit of the
        // victim's header is wrong.
        let disk = disk.crash(|_, _, _| CrashFate::Kept);
        let segs = segment_files(&disk, dir);
        assert!(segs.len() >= 3, "the log rolled: {segs:?}");
        let last = segs.last().expect("a segment").clone();
        let positions = batch_positions(&file_bytes(&disk, &last).await);
        let (victim, pos) = if first_of_segment {
            positions[0]
        } else {
            positions[positions.len() / 2]
        };
        assert!(
            victim >= flushed,
            "the victim {victim} is unflushed (flushed to {flushed})"
        );
        let (byte, value) = match field {
            Field::BaseOffset => (BASE_OFFSET_LOW_BYTE, victim as u8),
            Field::Epoch => (EPOCH_LOW_BYTE, epoch as u8),
        };
        // A bit that is 0, so the field grows: a smaller base offset was always refused.
        let bit = (0..8u8)
            .find(|b| value & (1 << b) == 0)
            .expect("a zero bit");
        assert!(disk.flip_bit(&last.to_string_lossy(), pos + byte, bit));

        let log = open(&disk, dir, &cfg).await;
        let wm = log.watermarks();
        assert_eq!(
            wm.log_end_offset, victim,
            "{field:?}: recovery must cut at the batch whose {field:?} was flipped"
        );
        let kept: Vec<_> = appended
            .iter()
            .filter(|(o, _)| *o < victim)
            .cloned()
            .collect();
        assert_eq!(
            read_all(&log).await,
            kept,
            "everything before the cut, as appended"
        );
        assert!(
            matches!(
                log.read(victim, 1 << 20).await,
                Err(Error::OffsetOutOfRange { .. })
            ) || log.read(victim, 1 << 20).await.is_ok_and(|r| r.is_empty()),
            "the damaged batch is never served"
        );
        let want_epochs: Vec<(i32, u64)> = if epoch > 0 { vec![(epoch, 0)] } else { vec![] };
        assert_eq!(
            log.leader_epochs(),
            want_epochs,
            "no epoch from a damaged batch"
        );
        assert_eq!(log.leader_epoch(), epoch);
        // The log goes on from the cut: the next append takes the victim's offset.
        let info = log
            .append(batch(99, 10))
            .await
            .expect("append after the cut");
        assert_eq!(info.base_offset, victim);
        log.close().await.expect("close");
    });
}

#[test]
fn a_flipped_base_offset_in_an_unflushed_batch_is_cut_not_served() {
    flip_case(Field::BaseOffset, 0, false);
}

/// The first batch of a segment must carry the base offset in the segment's file name.
#[test]
fn a_flipped_base_offset_in_a_segments_first_batch_is_cut() {
    flip_case(Field::BaseOffset, 0, true);
}

/// A replicated log (a `leader_epochs` file): the epoch must be the one the file gives.
#[test]
fn a_flipped_leader_epoch_in_an_unflushed_batch_is_cut_not_served() {
    flip_case(Field::Epoch, 3, false);
}

/// A single-node log (no `leader_epochs` file): every batch carries epoch 0.
#[test]
fn a_flipped_epoch_in_a_single_node_log_is_cut() {
    flip_case(Field::Epoch, 0, true);
}

fn compact_config() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        cleanup_compact: true,
        cleanup_delete: false,
        min_cleanable_dirty_ratio: 0.0,
        delete_retention_ms: u64::MAX / 4,
        committed_reads: true,
        ..common::small_config()
    }
}

/// (base offset, position) of every batch of the segment file `path` whose base offset is
/// not the previous batch's end (for the first batch: the base in the file's name).
fn gaps(path: &Path, file: &[u8]) -> Vec<(u64, u64)> {
    let stem = path.file_stem().expect("a name").to_string_lossy();
    let mut prev_end: u64 = stem.parse().expect("a segment name");
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos + 61 <= file.len() {
        let len = i32::from_be_bytes(file[pos + 8..pos + 12].try_into().unwrap());
        if len <= 0 {
            break;
        }
        let base = u64::from_be_bytes(file[pos..pos + 8].try_into().unwrap());
        let delta = i32::from_be_bytes(file[pos + 23..pos + 27].try_into().unwrap());
        if base != prev_end {
            out.push((base, pos as u64));
        }
        prev_end = base + delta as u64 + 1;
        pos += 12 + len as usize;
    }
    out
}

/// Removes every index file — the next open scans every segment, compacted ones included —
/// and the cleaner checkpoint (below which sealed segments are allowed gaps without a
/// marker, for logs cleaned before markers existed): only the markers allow the gaps then.
async fn drop_indexes(disk: &Rc<SimDisk>) {
    for p in disk.paths() {
        let s = p.to_string_lossy();
        if s.ends_with(".index") || s.ends_with(".timeindex") || s.ends_with("cleaner_checkpoint") {
            disk.vfs().remove(&p).await.expect("remove index");
        }
    }
}

/// A compacted log (segments with offset gaps) through kill -9, power loss and rescans of
/// every segment, then a truncation into a compacted segment and appends after it: nothing
/// flushed is ever cut, and contiguity is enforced again after the cleaned bytes.
#[test]
fn compacted_segments_with_gaps_survive_recovery_whole() {
    let tmp = common::tempdir();
    common::run(tmp.path(), || async {
        let dir = Path::new("/sim/compacted");
        let disk = SimDisk::new();
        let cfg = compact_config();
        let log = open(&disk, dir, &cfg).await;
        for i in 0..150u32 {
            log.append(batch(i, 40 + (i as usize * 13) % 200))
                .await
                .expect("append");
        }
        log.set_committed(log.watermarks().log_end_offset)
            .expect("commit");
        let stats = log
            .clean(10_000, &CleanOptions::default())
            .await
            .expect("clean");
        assert!(stats.segments_before > 3, "{stats:?}");
        log.flush().await.expect("flush");
        let before = read_all(&log).await;
        drop(log);
        // Gaps at a segment's start (its first batches removed) and between batches.
        let mut all_gaps = Vec::new();
        let mut per_segment = Vec::new();
        for p in segment_files(&disk, dir) {
            let g = gaps(&p, &file_bytes(&disk, &p).await);
            all_gaps.extend(g.iter().copied());
            per_segment.push(g);
        }
        assert!(
            all_gaps.iter().any(|g| g.1 == 0) && all_gaps.iter().any(|g| g.1 > 0),
            "compaction left offset gaps of both kinds: {all_gaps:?}"
        );

        for power_loss in [false, true] {
            let disk = if power_loss {
                disk.crash(|_, _, _| CrashFate::Lost)
            } else {
                disk.process_crash()
            };
            let log = open(&disk, dir, &cfg).await;
            log.set_committed(log.watermarks().log_end_offset)
                .expect("commit");
            assert_eq!(read_all(&log).await, before, "power loss {power_loss}");
            log.close().await.expect("close");
            drop_indexes(&disk).await;
            let log = open(&disk, dir, &cfg).await;
            log.set_committed(log.watermarks().log_end_offset)
                .expect("commit");
            assert_eq!(
                read_all(&log).await,
                before,
                "power loss {power_loss}, every segment rescanned"
            );
            log.close().await.expect("close");
        }

        // A truncation into a compacted segment (allowed after a reopen: the committed offset
        // starts at the log start), at its last gap, so the bytes it keeps have gaps too;
        // then appends. That segment is the last one now, and recovery scans it.
        let (cut_at, _) = *per_segment
            .iter()
            .find(|g| g.len() >= 2)
            .and_then(|g| g.last())
            .expect("a segment with two gaps");
        let log = open(&disk, dir, &cfg).await;
        log.truncate_to(cut_at)
            .await
            .expect("truncate into a compacted segment");
        let prefix: Vec<_> = before.iter().filter(|b| b.0 < cut_at).cloned().collect();
        // The first append lands where the cleaned bytes went on before the cut; unflushed,
        // its base offset pushed forward by a flipped bit. The gap the cleaned bytes allowed
        // is not allowed there any more: recovery cuts it.
        let info = log.append(batch(300, 300)).await.expect("append");
        assert_eq!(info.base_offset, cut_at);
        drop(log);
        let disk = disk.crash(|_, _, _| CrashFate::Kept);
        let last = segment_files(&disk, dir).last().expect("a segment").clone();
        let pos = batch_positions(&file_bytes(&disk, &last).await)
            .iter()
            .find(|b| b.0 == cut_at)
            .expect("the appended batch is in the last segment")
            .1;
        let bit = (0..8u8)
            .find(|b| cut_at as u8 & (1 << b) == 0)
            .expect("a zero bit");
        assert!(disk.flip_bit(&last.to_string_lossy(), pos + BASE_OFFSET_LOW_BYTE, bit));
        let log = open(&disk, dir, &cfg).await;
        log.set_committed(log.watermarks().log_end_offset)
            .expect("commit");
        assert_eq!(
            log.watermarks().log_end_offset,
            cut_at,
            "the flipped batch after the cleaned bytes is cut"
        );
        assert_eq!(
            read_all(&log).await,
            prefix,
            "the compacted prefix survives"
        );

        // Flushed appends after the cleaned bytes survive a power loss and rescans.
        let mut expect = prefix;
        for i in 0..6u32 {
            let b = batch(200 + i, 300);
            let info = log
                .append(b.clone())
                .await
                .expect("append after truncation");
            let mut m = b.to_vec();
            assign_offset(&mut m, info.base_offset as i64, 0);
            expect.push((info.base_offset, m));
        }
        log.flush().await.expect("flush");
        drop(log);
        let disk = disk.crash(|_, _, _| CrashFate::Lost);
        let log = open(&disk, dir, &cfg).await;
        log.set_committed(log.watermarks().log_end_offset)
            .expect("commit");
        assert_eq!(read_all(&log).await, expect, "flushed appends survive");
        log.close().await.expect("close");
        drop_indexes(&disk).await;
        let log = open(&disk, dir, &cfg).await;
        log.set_committed(log.watermarks().log_end_offset)
            .expect("commit");
        assert_eq!(
            read_all(&log).await,
            expect,
            "and again with every segment rescanned"
        );
        log.close().await.expect("close");
    });
}
