//! `Log::truncate_to` (issue 19: a follower cuts the uncommitted suffix its leader does not
//! have). With the crash tests' method: the disk is stopped after each of the truncation's
//! changes in turn, crashes (kill -9, or power loss with every unflushed write kept, lost,
//! torn or flipped), and the log is reopened: a cut batch never comes back, a finished
//! truncation keeps everything below the cut, an unfinished one leaves a prefix of the old
//! log. Then appends after a truncation, the producers' state, the committed floor, and reads
//! (cache and read-ahead) that must not return cut bytes.

mod common;

use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use weir_storage::batch::RecordBatchBuilder;
use weir_storage::io::{CrashFate, SimDisk};
use weir_storage::{BatchCache, Error, Log};

use common::{
    inspect_config, open_sim as open, read_all, replicated_config as config, tagged_batch as batch,
};

/// The first value byte of every record of a batch.
fn tags(bytes: &[u8]) -> Vec<u8> {
    weir_storage::batch::decode_records(bytes)
        .expect("decode")
        .iter()
        .map(|r| r.value.as_ref().expect("value")[0])
        .collect()
}

/// `fill` starts leader epoch `k + 1` at batch `EPOCH_AT[k]`.
const EPOCH_AT: [usize; 3] = [0, 20, 35];

/// The leader-epoch list `fill` makes, for a log ending at `end`.
fn epochs_below(offsets: &[(u64, u64)], end: u64) -> Vec<(i32, u64)> {
    EPOCH_AT
        .iter()
        .enumerate()
        .filter(|(_, &at)| at < offsets.len() && offsets[at].0 < end)
        .map(|(k, &at)| (k as i32 + 1, offsets[at].0))
        .collect()
}

/// Fills a log with `count` batches of 1..4 records tagged 1 across several segments;
/// flushes only the first `flushed` of them. Returns the batches' (base, next) offsets.
async fn fill(log: &Log, count: usize, flushed: usize) -> Vec<(u64, u64)> {
    let mut offsets = Vec::new();
    for i in 0..count {
        if let Some(epoch) = EPOCH_AT.iter().position(|&at| at == i) {
            log.set_leader_epoch(epoch as i32 + 1).expect("epoch");
        }
        let n = 1 + i % 4;
        let info = log
            .append(batch(1, n, 300 + 97 * (i % 7)))
            .await
            .expect("append");
        offsets.push((info.base_offset, info.last_offset + 1));
        if i + 1 == flushed {
            log.flush().await.expect("flush");
        }
    }
    offsets
}

/// One run: a log of 40 batches (several segments; the last 10 not flushed), committed up to
/// batch `committed_batch`, truncated at batch `cut_batch` with the disk stopped after
/// `stop` changes, then crashed. Returns whether the truncation finished.
fn crash_during_truncate(stop: u64, cut_batch: usize, power_loss: bool, seed: u64) -> bool {
    let tmp = common::tempdir();
    let finished = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = finished.clone();
    common::run(tmp.path(), move || async move {
        let dir = Path::new("/sim/t");
        let disk = SimDisk::new();
        let log = open(&disk, dir, config()).await;
        let offsets = fill(&log, 40, 30).await;
        assert!(log.size().0 >= 3, "the test wants several segments");
        let before = read_all_written(&disk, dir).await;
        assert_eq!(before.len(), 40);
        let cut = offsets[cut_batch].0;
        log.set_committed(offsets[cut_batch / 2].0).expect("commit");
        disk.stop_after(stop);
        let r = log.truncate_to(cut).await;
        done.store(r.is_ok(), std::sync::atomic::Ordering::SeqCst);
        if r.is_ok() {
            // Nothing the truncation did is left in flight, and nothing is appended after it.
            assert_eq!(log.watermarks().log_end_offset, cut);
        }
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
        let end = log.watermarks().log_end_offset;
        for (i, g) in got.iter().enumerate() {
            assert_eq!(
                g, &before[i],
                "stop {stop}: batch {i} after recovery is not the original"
            );
        }
        assert_eq!(
            log.leader_epochs(),
            epochs_below(&offsets, end),
            "stop {stop}: the epoch list does not match the recovered log"
        );
        if r.is_ok() {
            assert_eq!(
                end, cut,
                "stop {stop}: a finished truncation must keep exactly what is below the cut"
            );
        } else {
            // Unfinished: a prefix of the old log that still holds what was flushed.
            assert!(
                end >= offsets[29].1.min(cut),
                "stop {stop}: flushed data below the cut lost (end {end})"
            );
        }
        // Appends continue from the end recovery found, with new data, and survive a crash.
        let log = {
            drop(log);
            open(&after, dir, config()).await
        };
        let info = log.append(batch(9, 2, 100)).await.expect("append after");
        assert_eq!(info.base_offset, end);
        log.flush().await.expect("flush");
        drop(log);
        let again = after.process_crash();
        let log = open(&again, dir, inspect_config()).await;
        let got = read_all(&log).await;
        let (last_base, last) = got.last().expect("data");
        assert_eq!(*last_base, end);
        assert_eq!(tags(last), vec![9, 9]);
        if r.is_ok() {
            assert!(
                got.iter().all(|(b, _)| *b < cut || *b == end),
                "a cut batch came back"
            );
        }
    });
    finished.load(std::sync::atomic::Ordering::SeqCst)
}

/// The 40 batches as a log opened without committed reads shows them (kill -9 image).
async fn read_all_written(disk: &Rc<SimDisk>, dir: &Path) -> Vec<(u64, Vec<u8>)> {
    let image = disk.process_crash();
    let log = open(&image, dir, inspect_config()).await;
    let all = read_all(&log).await;
    drop(log);
    all
}

fn every_step(cut_batch: usize, power_loss: bool) {
    let mut stop = 0;
    loop {
        let finished = crash_during_truncate(stop, cut_batch, power_loss, 0x9e37 + stop * 31);
        if finished {
            break;
        }
        stop += 1;
        assert!(stop < 100, "the truncation never finished");
    }
    assert!(stop > 0, "a truncation changes the disk");
}

#[test]
fn truncate_in_the_active_segment_then_crash_at_every_step() {
    every_step(37, false);
    every_step(37, true);
}

#[test]
fn truncate_across_segment_rolls_then_crash_at_every_step() {
    every_step(21, false);
    every_step(21, true);
}

#[test]
fn truncate_to_a_segment_base_then_crash_at_every_step() {
    // The first batch of a segment: that segment is emptied, the later ones deleted.
    let tmp = common::tempdir();
    let base_batch = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let b2 = base_batch.clone();
    common::run(tmp.path(), move || async move {
        let disk = SimDisk::new();
        let dir = Path::new("/sim/b");
        let log = open(&disk, dir, config()).await;
        let offsets = fill(&log, 40, 30).await;
        drop(log);
        // The batch that starts the second segment.
        let bases: Vec<u64> = offsets.iter().map(|o| o.0).collect();
        let names: Vec<u64> = disk
            .paths()
            .iter()
            .filter_map(|p| {
                let n = p.file_name()?.to_str()?;
                n.strip_suffix(".log")?.parse().ok()
            })
            .collect();
        let seg_base = names.iter().copied().filter(|b| *b > 0).min().expect("2nd");
        let i = bases.iter().position(|b| *b == seg_base).expect("boundary");
        b2.store(i, std::sync::atomic::Ordering::SeqCst);
    });
    let cut_batch = base_batch.load(std::sync::atomic::Ordering::SeqCst);
    every_step(cut_batch, false);
    every_step(cut_batch, true);
}

#[test]
fn truncate_below_committed_is_refused_at_the_end_is_a_no_op_inside_a_batch_is_an_error() {
    let tmp = common::tempdir();
    common::run(tmp.path(), || async {
        let disk = SimDisk::new();
        let dir = Path::new("/sim/r");
        let log = open(&disk, dir, config()).await;
        let offsets = fill(&log, 10, 10).await;
        let end = log.watermarks().log_end_offset;
        log.set_committed(offsets[5].0).expect("commit");
        let e = log
            .truncate_to(offsets[4].0)
            .await
            .expect_err("below committed");
        assert!(matches!(e, Error::BelowCommitted { .. }), "{e}");
        assert_eq!(log.watermarks().log_end_offset, end, "nothing changed");
        let syncs = disk.sync_count();
        log.truncate_to(end).await.expect("at the end");
        assert_eq!(log.watermarks().log_end_offset, end);
        assert_eq!(disk.sync_count(), syncs, "a no-op touches nothing");
        let e = log.truncate_to(end + 1).await.expect_err("past the end");
        assert!(matches!(e, Error::OffsetOutOfRange { .. }), "{e}");
        // Batch 7 holds several offsets: its second one is no boundary.
        let (b7, n7) = offsets[7];
        assert!(n7 - b7 >= 2);
        let e = log.truncate_to(b7 + 1).await.expect_err("inside a batch");
        assert!(
            matches!(e, Error::NotBatchBoundary { batch_base_offset, .. } if batch_base_offset == b7),
            "{e}"
        );
        assert_eq!(log.watermarks().log_end_offset, end, "nothing changed");
        // The log still works after the refusals.
        log.truncate_to(offsets[6].0)
            .await
            .expect("at committed or above");
        assert_eq!(log.watermarks().log_end_offset, offsets[6].0);
    });
}

#[test]
fn a_single_node_log_refuses_to_truncate_written_data() {
    let tmp = common::tempdir();
    common::run(tmp.path(), || async {
        let disk = SimDisk::new();
        let dir = Path::new("/sim/s");
        let log = open(&disk, dir, inspect_config()).await;
        let offsets = fill(&log, 5, 5).await;
        let e = log
            .truncate_to(offsets[3].0)
            .await
            .expect_err("written = committed without committed_reads");
        assert!(matches!(e, Error::BelowCommitted { .. }), "{e}");
        let e = log.set_committed(1).expect_err("no committed mode");
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        assert_eq!(read_all(&log).await.len(), 5);
    });
}

/// Reads after a truncation return the new batches, never the cut ones: from the batch cache
/// (a large one), and from the files with chunks read before the cut (no cache).
#[test]
fn reads_after_truncate_never_return_cut_data() {
    for cache_bytes in [1usize << 20, 0] {
        let tmp = common::tempdir();
        common::run(tmp.path(), move || async move {
            let disk = SimDisk::new();
            let dir = Path::new("/sim/reads");
            let log = Log::open_in(disk.vfs(), dir, config(), BatchCache::new(cache_bytes))
                .await
                .expect("open");
            let offsets = fill(&log, 30, 0).await;
            let end = log.watermarks().log_end_offset;
            let cut = offsets[25].0;
            log.set_committed(cut).expect("commit");
            let old = read_all(&log).await;
            assert_eq!(old.len(), 25);
            // Warm the read-ahead: its chunks hold the file as written, cut batches included
            // (the batch cache holds them from their appends).
            for (base, _) in &offsets[..25] {
                let _ = log.read(*base, 64 << 10).await.expect("read");
            }
            // New batches over the same offsets, with other values.
            log.truncate_to(cut).await.expect("truncate");
            let mut next = cut;
            while next < end {
                let n = ((end - next) as usize).min(3);
                let info = log.append(batch(7, n, 500)).await.expect("append");
                next = info.last_offset + 1;
            }
            log.set_committed(next).expect("commit");
            let got = read_all(&log).await;
            assert_eq!(&got[..25], &old[..25]);
            for (base, bytes) in &got[25..] {
                assert!(
                    tags(bytes).iter().all(|t| *t == 7),
                    "cut data served at {base}"
                );
            }
            // Every offset read on its own too (a read starting inside the new tail).
            for o in cut..next {
                let r = log.read(o, 1).await.expect("read");
                let (_, b) = r.batches().next().expect("a batch");
                assert!(tags(b).iter().all(|t| *t == 7), "cut data served at {o}");
            }
        });
    }
}

/// Appends after a truncation continue at the cut and survive a clean reopen and a crash.
#[test]
fn appends_after_truncate_continue_at_the_cut_and_survive_reopen() {
    let tmp = common::tempdir();
    common::run(tmp.path(), || async {
        let disk = SimDisk::new();
        let dir = Path::new("/sim/a");
        let log = open(&disk, dir, config()).await;
        let offsets = fill(&log, 30, 10).await;
        let cut = offsets[12].0;
        log.set_committed(cut).expect("commit");
        log.truncate_to(cut).await.expect("truncate");
        assert_eq!(log.watermarks().log_end_offset, cut);
        assert_eq!(log.watermarks().written_offset, cut);
        assert_eq!(log.watermarks().flushed_offset, cut);
        let mut new = Vec::new();
        for i in 0..20 {
            let info = log.append(batch(5, 2, 400 + i)).await.expect("append");
            new.push(info.base_offset);
        }
        assert_eq!(new[0], cut);
        let end = log.watermarks().log_end_offset;
        log.close().await.expect("close");
        let log = open(&disk, dir, inspect_config()).await;
        let got = read_all(&log).await;
        assert_eq!(log.watermarks().log_end_offset, end);
        assert_eq!(got.len(), 12 + 20);
        assert!(got[..12]
            .iter()
            .all(|(_, b)| tags(b).iter().all(|t| *t == 1)));
        assert!(got[12..]
            .iter()
            .all(|(_, b)| tags(b).iter().all(|t| *t == 5)));
        // And after kill -9, with a second truncation in a fresh segment.
        drop(log);
        let log = open(&disk, dir, config()).await;
        log.set_committed(cut).expect("commit");
        log.truncate_to(new[3]).await.expect("truncate again");
        log.append(batch(6, 1, 10)).await.expect("append");
        drop(log);
        let log = open(&disk.process_crash(), dir, inspect_config()).await;
        let got = read_all(&log).await;
        assert_eq!(got.len(), 12 + 3 + 1);
        assert_eq!(tags(&got.last().expect("last").1), vec![6]);
    });
}

fn idem(pid: i64, seq: i32, n: usize) -> Bytes {
    let mut b = RecordBatchBuilder::new(1_000).producer(pid, 0, seq);
    for i in 0..n {
        b = b.record(
            None,
            Some(format!("{pid}/{}", seq + i as i32).as_bytes()),
            &[],
        );
    }
    b.build()
}

/// After a truncation a producer's sequence resumes from what remains: the next batch after
/// the last kept one is accepted (a resend of a cut batch is new data, not a duplicate), a
/// retry of a kept batch is a duplicate, a gap is refused. In the active segment (the
/// snapshot covers the cut) and across a roll (the whole log is replayed), and after reopen.
#[test]
fn producer_state_after_truncate_resumes_from_what_remains() {
    for cut_seq in [36, 4] {
        let tmp = common::tempdir();
        common::run(tmp.path(), move || async move {
            let disk = SimDisk::new();
            let dir = Path::new("/sim/p");
            let log = open(&disk, dir, config()).await;
            let mut at = Vec::new();
            // Producer 1: 40 batches of 2 records (seq 0, 2, 4, ...); producer 2 interleaved.
            for i in 0..40 {
                let info = log.append(idem(1, 2 * i, 2)).await.expect("append");
                at.push(info.base_offset);
                if i % 5 == 0 {
                    log.append(idem(2, i / 5, 1)).await.expect("append");
                }
                log.append(batch(1, 1, 1500)).await.expect("filler");
            }
            assert!(log.size().0 >= 3);
            let k = cut_seq as usize / 2; // producer 1's batch index cut
            log.set_committed(at[1]).expect("commit");
            log.truncate_to(at[k]).await.expect("truncate");
            let check = |log: Rc<Log>, at: Vec<u64>| async move {
                // A retry of the last kept batch: a duplicate with its offsets.
                let dup = log.append(idem(1, cut_seq - 2, 2)).await.expect("retry");
                assert!(dup.duplicate, "the last kept batch is remembered");
                assert_eq!(dup.base_offset, at[k - 1]);
                // Skipping the cut batch: a gap.
                let e = log.append(idem(1, cut_seq + 2, 2)).await.expect_err("gap");
                assert!(
                    matches!(e, Error::OutOfOrderSequence { expected, .. } if expected == cut_seq),
                    "{e}"
                );
                // The cut batch sent again: new data, not a duplicate.
                let again = log.append(idem(1, cut_seq, 2)).await.expect("resend");
                assert!(
                    !again.duplicate,
                    "a cut batch must not count as a duplicate"
                );
                assert_eq!(again.base_offset, at[k]);
            };
            let log = Rc::new(log);
            check(log.clone(), at.clone()).await;
            // The same after a truncation and a reopen (snapshot written by the truncation).
            log.set_committed(at[1]).expect("commit");
            log.truncate_to(at[k]).await.expect("truncate again");
            let log = Rc::try_unwrap(log).ok().expect("one owner");
            drop(log);
            let log = Rc::new(open(&disk.process_crash(), dir, config()).await);
            check(log, at).await;
        });
    }
}
