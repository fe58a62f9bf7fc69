//! `Log::truncate_fully_and_start_at` (issue 19: a follower behind its leader's log start
//! installs a Raft snapshot and restarts its log empty at the leader's start). What a user of
//! the engine would notice: after the call nothing of the old log can be read, the offsets all
//! say the new start, appends continue there and survive a reopen and a crash; the epoch list
//! and the producers' state describe the new log only. With the crash tests' method: the disk
//! is stopped after each of the operation's changes in turn, crashes (kill -9, or power loss
//! with every unflushed write kept, lost, torn or flipped) and the log is reopened: it holds
//! only original batches (some of the old segments) or nothing, a finished call is never
//! undone, and calling again on the reopened log always ends in the one new state.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use weir_storage::batch::{assign_offset, RecordBatchBuilder};
use weir_storage::io::{CrashFate, SimDisk};
use weir_storage::{Error, Log};

use common::{
    inspect_config, open_sim as open, read_all, replicated_config as config, tagged_batch as batch,
};

/// An idempotent producer's batch of `n` records (producer 7, epoch 0, from `sequence`).
fn idempotent(n: usize, sequence: i32) -> Bytes {
    let mut b = RecordBatchBuilder::new(1_000).producer(7, 0, sequence);
    for i in 0..n {
        b = b.record(None, Some(format!("idempotent {i}").as_bytes()), &[]);
    }
    b.build()
}

/// A batch as a follower receives it: offsets from `base`, stamped with `epoch`.
fn assigned(base: u64, n: usize, epoch: i32) -> Bytes {
    let mut b = batch(5, n, 200).to_vec();
    assign_offset(&mut b, base as i64, epoch);
    Bytes::from(b)
}

/// 30 batches over several segments: epochs 1 and 2, every fifth batch an idempotent
/// producer's; the last 5 not flushed. Returns the batches' (base, next) offsets.
async fn fill(log: &Log) -> Vec<(u64, u64)> {
    let mut offsets = Vec::new();
    let mut seq = 0;
    for i in 0..30 {
        if i == 0 || i == 15 {
            log.set_leader_epoch(if i == 0 { 1 } else { 2 })
                .expect("epoch");
        }
        let n = 1 + i % 4;
        let b = if i % 5 == 0 {
            seq += n as i32;
            idempotent(n, seq - n as i32)
        } else {
            batch(1, n, 300 + 97 * (i % 7))
        };
        let info = log.append(b).await.expect("append");
        offsets.push((info.base_offset, info.last_offset + 1));
        if i == 24 {
            log.flush().await.expect("flush");
        }
    }
    offsets
}

/// The `.log` files on the simulated disk under `dir`, by base offset.
fn segment_files(disk: &Rc<SimDisk>, dir: &Path) -> Vec<u64> {
    let mut v: Vec<u64> = disk
        .paths()
        .iter()
        .filter(|p| p.parent() == Some(dir))
        .filter_map(|p| p.file_name()?.to_str()?.strip_suffix(".log")?.parse().ok())
        .collect();
    v.sort_unstable();
    v
}

/// The log is empty at `at`: every offset says so and nothing below it reads.
async fn assert_empty_at(log: &Log, at: u64) {
    let wm = log.watermarks();
    assert_eq!(
        (
            wm.log_start_offset,
            wm.log_end_offset,
            wm.written_offset,
            wm.flushed_offset
        ),
        (at, at, at, at),
        "{wm:?}"
    );
    assert_eq!(wm.high_watermark, at, "{wm:?}");
    assert!(log.leader_epochs().is_empty());
    assert_eq!(log.leader_epoch(), 0);
    assert!(log.active_producers().is_empty());
    assert_eq!(log.size(), (1, 0), "one empty segment");
    if at > 0 {
        let e = log
            .read(at - 1, 1 << 10)
            .await
            .expect_err("below the start");
        assert!(matches!(e, Error::OffsetOutOfRange { .. }), "{e}");
    }
}

#[test]
fn restart_past_the_end_empties_the_log_and_appends_continue_there() {
    let tmp = common::tempdir();
    common::run(tmp.path(), || async {
        let disk = SimDisk::new();
        let dir = Path::new("/sim/past");
        let log = open(&disk, dir, config()).await;
        let offsets = fill(&log).await;
        let end = log.watermarks().log_end_offset;
        log.set_committed(offsets[10].0).expect("commit");
        assert!(segment_files(&disk, dir).len() >= 3, "several segments");
        assert!(!log.active_producers().is_empty());
        let at = end + 1_000;
        log.truncate_fully_and_start_at(at).await.expect("restart");
        assert_empty_at(&log, at).await;
        assert_eq!(segment_files(&disk, dir), vec![at], "only the new segment");
        // A follower's appends continue at the new start, with a new epoch.
        log.append_assigned(assigned(at, 3, 4))
            .await
            .expect("append");
        log.append_assigned(assigned(at + 3, 2, 4))
            .await
            .expect("append");
        assert_eq!(log.leader_epochs(), vec![(4, at)]);
        log.set_committed(at + 5).expect("commit");
        let got = read_all(&log).await;
        assert_eq!(
            got.iter().map(|g| g.0).collect::<Vec<_>>(),
            vec![at, at + 3]
        );
        // The idempotent producer is unknown now: its next batch at any sequence is new data.
        log.set_leader_epoch(4).expect("epoch");
        let info = log
            .append(idempotent(1, 500))
            .await
            .expect("unknown producer");
        assert_eq!(info.base_offset, at + 5);
        log.flush().await.expect("flush");
        // It all survives a clean close and a kill -9.
        log.close().await.expect("close");
        let log = open(&disk, dir, inspect_config()).await;
        let wm = log.watermarks();
        assert_eq!((wm.log_start_offset, wm.log_end_offset), (at, at + 6));
        let reopened = read_all(&log).await;
        assert_eq!(reopened.len(), 3);
        assert_eq!(reopened[..2], got[..]);
        assert_eq!(reopened[2].0, at + 5);
        assert_eq!(log.leader_epochs(), vec![(4, at)]);
        drop(log);
        let image = disk.process_crash();
        let log = open(&image, dir, inspect_config()).await;
        let wm = log.watermarks();
        assert_eq!((wm.log_start_offset, wm.log_end_offset), (at, at + 6));
        assert_eq!(read_all(&log).await.len(), 3);
    });
}

#[test]
fn restart_inside_the_old_log_drops_the_uncommitted_rest() {
    let tmp = common::tempdir();
    common::run(tmp.path(), || async {
        let disk = SimDisk::new();
        let dir = Path::new("/sim/inside");
        let log = open(&disk, dir, config()).await;
        let offsets = fill(&log).await;
        log.set_committed(offsets[10].0).expect("commit");
        // Inside batch 23 (any offset at or above the committed one is allowed).
        let at = offsets[23].0 + 1;
        assert!(offsets[23].1 > at);
        log.truncate_fully_and_start_at(at).await.expect("restart");
        assert_empty_at(&log, at).await;
        // The batch cache and the read-ahead hold nothing of the old log: the new batch at
        // `at` is what reads return.
        log.append_assigned(assigned(at, 2, 3))
            .await
            .expect("append");
        log.set_committed(at + 2).expect("commit");
        let got = read_all(&log).await;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1, assigned(at, 2, 3).to_vec());
        drop(log);
        let log = open(&disk.process_crash(), dir, inspect_config()).await;
        assert_eq!(read_all(&log).await, got);
    });
}

#[test]
fn restart_below_committed_data_or_on_a_single_node_log_is_refused() {
    let tmp = common::tempdir();
    common::run(tmp.path(), || async {
        let disk = SimDisk::new();
        let dir = Path::new("/sim/refused");
        let log = open(&disk, dir, config()).await;
        let offsets = fill(&log).await;
        let before = log.watermarks();
        log.set_committed(offsets[10].0).expect("commit");
        let e = log
            .truncate_fully_and_start_at(offsets[9].0)
            .await
            .expect_err("committed data above the new start");
        assert!(matches!(e, Error::BelowCommitted { .. }), "{e}");
        assert_eq!(log.watermarks().log_end_offset, before.log_end_offset);
        assert_eq!(
            log.size().0,
            segment_files(&disk, dir).len(),
            "nothing changed"
        );
        // At the committed offset exactly: allowed.
        log.truncate_fully_and_start_at(offsets[10].0)
            .await
            .expect("at committed");
        assert_empty_at(&log, offsets[10].0).await;
        drop(log);
        // A reopened log knows nothing committed: it may restart below its start (the redo
        // of an install a crash interrupted, whose log start may have moved anywhere).
        let log = open(&disk, dir, config()).await;
        log.truncate_fully_and_start_at(3)
            .await
            .expect("below the start");
        assert_empty_at(&log, 3).await;
        drop(log);
        // A single-node log never throws its data away.
        let dir = Path::new("/sim/single");
        let log = open(&disk, dir, inspect_config()).await;
        log.append(batch(1, 2, 10)).await.expect("append");
        let e = log
            .truncate_fully_and_start_at(100)
            .await
            .expect_err("no committed_reads");
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        assert_eq!(read_all(&log).await.len(), 1);
    });
}

/// One run: the 30-batch log, committed to batch 10, restarted at `at` with the disk stopped
/// after `stop` changes, then crashed. Returns whether the call finished.
fn crash_during_restart(stop: u64, past_end: bool, power_loss: bool, seed: u64) -> bool {
    let tmp = common::tempdir();
    let finished = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = finished.clone();
    common::run(tmp.path(), move || async move {
        let dir = Path::new("/sim/c");
        let disk = SimDisk::new();
        let log = open(&disk, dir, config()).await;
        let offsets = fill(&log).await;
        let end = log.watermarks().log_end_offset;
        let at = if past_end { end + 500 } else { offsets[22].0 };
        log.set_committed(offsets[10].0).expect("commit");
        let original: BTreeMap<u64, Vec<u8>> = {
            let image = disk.process_crash();
            let l = open(&image, dir, inspect_config()).await;
            let all = read_all(&l).await.into_iter().collect();
            drop(l);
            all
        };
        assert_eq!(original.len(), 30);
        disk.stop_after(stop);
        let r = log.truncate_fully_and_start_at(at).await;
        done.store(r.is_ok(), std::sync::atomic::Ordering::SeqCst);
        drop(log);
        let after = if power_loss {
            let mut x = seed | 1;
            disk.crash(move |_, _, len| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                match x % 4 {
                    0 => CrashFate::Kept,
                    1 => CrashFate::Lost,
                    2 => CrashFate::Torn((x >> 8) as usize % (len + 1)),
                    _ => CrashFate::Flipped((x >> 8) as usize % len.max(1)),
                }
            })
        } else {
            disk.process_crash()
        };
        let log = open(&after, dir, inspect_config()).await;
        let got = read_all(&log).await;
        let wm = log.watermarks();
        // Only original batches, contiguous: some of the old segments.
        for (i, (base, bytes)) in got.iter().enumerate() {
            assert_eq!(
                original.get(base),
                Some(bytes),
                "stop {stop}: batch at {base} is not an original one"
            );
            if i > 0 {
                let (prev, _) = original.range(..*base).next_back().expect("prev");
                assert_eq!(
                    *prev,
                    got[i - 1].0,
                    "stop {stop}: a gap in the recovered log"
                );
            }
        }
        if r.is_ok() {
            assert_eq!(
                (wm.log_start_offset, wm.log_end_offset, got.len()),
                (at, at, 0),
                "stop {stop}: a finished restart was undone"
            );
        }
        drop(log);
        // Calling it again on whatever was found ends in the one new state, for good.
        let log = open(&after, dir, config()).await;
        log.truncate_fully_and_start_at(at).await.expect("redo");
        assert_empty_at(&log, at).await;
        assert_eq!(segment_files(&after, dir), vec![at], "stop {stop}");
        log.append_assigned(assigned(at, 2, 3))
            .await
            .expect("append");
        log.flush().await.expect("flush");
        drop(log);
        let again = after.process_crash();
        let log = open(&again, dir, inspect_config()).await;
        let got = read_all(&log).await;
        assert_eq!(
            got,
            vec![(at, assigned(at, 2, 3).to_vec())],
            "stop {stop}: after the redo and a crash"
        );
        assert_eq!(log.leader_epochs(), vec![(3, at)]);
        assert!(log.active_producers().is_empty());
    });
    finished.load(std::sync::atomic::Ordering::SeqCst)
}

fn every_step(past_end: bool, power_loss: bool) {
    let mut stop = 0;
    loop {
        if crash_during_restart(stop, past_end, power_loss, 0x51ed + stop * 17) {
            break;
        }
        stop += 1;
        assert!(stop < 200, "the restart never finished");
    }
    assert!(
        stop > 3,
        "a restart changes the disk several times ({stop})"
    );
}

#[test]
fn restart_past_the_end_then_crash_at_every_step() {
    every_step(true, false);
    every_step(true, true);
}

#[test]
fn restart_inside_the_old_log_then_crash_at_every_step() {
    every_step(false, false);
    every_step(false, true);
}
