//! Crash tests over the fault-injecting simulated disk (`weir_storage::io::SimDisk`).
//!
//! A log is filled with random appends and flushes, then the disk "crashes": every write not
//! yet fdatasync'ed is kept, lost, torn at a random byte, or kept with a byte flipped. After
//! reopening, the log must be a prefix of what was appended, hold every flushed batch, and
//! never return a batch that fails its CRC. A process crash (kill -9) keeps every completed
//! write, so then every *appended* batch must be there. Seeds are printed by proptest on
//! failure and replayed from `proptest-regressions/`.

mod common;

use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use proptest::prelude::*;
use weir_storage::batch::RecordBatchBuilder;
use weir_storage::io::{CrashFate, SimDisk, SimFault, SimOp};
use weir_storage::{BatchCache, Error, Log};

use common::read_all;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn batch(rng: &mut Rng, ts: i64) -> Bytes {
    let n = 1 + rng.below(8) as u8;
    let mut b = RecordBatchBuilder::new(ts);
    for i in 0..n {
        let v = vec![i ^ (ts as u8); rng.below(2500) as usize];
        b = b.record(Some(&[i]), Some(&v), &[]);
    }
    b.build()
}

fn crash_case(seed: u64, power_loss: bool) {
    let dir = Path::new("/sim/log");
    let tmp = common::tempdir();
    common::run(tmp.path(), move || async move {
        let mut rng = Rng(seed | 1);
        let disk = SimDisk::new();
        let cfg = common::small_config();
        let mut appended: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut flushed_to = 0u64;
        let mut disk_now = disk.clone();
        // Several crash/recover rounds on the same disk.
        for round in 0..3 {
            let log = Log::open_in(disk_now.vfs(), dir, cfg.clone(), BatchCache::new(1 << 20))
                .await
                .expect("open");
            let ops = 5 + rng.below(60);
            for _ in 0..ops {
                if rng.below(6) == 0 {
                    flushed_to = log.flush().await.expect("flush");
                } else {
                    let b = batch(&mut rng, 1000 + round);
                    let info = log.append(b.clone()).await.expect("append");
                    let mut m = b.to_vec();
                    weir_storage::batch::assign_offset(&mut m, info.base_offset as i64, 0);
                    appended.push((info.base_offset, m));
                }
            }
            let acked_end = log.watermarks().high_watermark;
            drop(log);
            disk_now = if power_loss {
                let mut r2 = Rng(rng.next() | 1);
                disk_now.crash(move |_, _, len| match r2.below(4) {
                    0 => CrashFate::Kept,
                    1 => CrashFate::Lost,
                    2 => CrashFate::Torn(r2.below(len as u64 + 1) as usize),
                    _ => CrashFate::Flipped(r2.below(len.max(1) as u64) as usize),
                })
            } else {
                disk_now.process_crash()
            };
            let log = Log::open_in(disk_now.vfs(), dir, cfg.clone(), BatchCache::new(1 << 20))
                .await
                .expect("recover");
            let got = read_all(&log).await;
            let end = log.watermarks().high_watermark;
            assert!(
                got.len() <= appended.len(),
                "recovered more batches than appended"
            );
            for (i, g) in got.iter().enumerate() {
                assert_eq!(
                    g, &appended[i],
                    "seed {seed}: batch {i} after recovery is not what was appended"
                );
            }
            assert!(
                end >= flushed_to,
                "seed {seed}: flushed data lost: end {end} < flushed {flushed_to}"
            );
            if !power_loss {
                assert_eq!(end, acked_end, "seed {seed}: kill -9 lost written data");
            }
            // The recovered log is the truth from here on.
            appended.truncate(got.len());
            flushed_to = end;
            log.close().await.expect("close after recovery");
        }
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn power_loss_keeps_a_prefix_with_every_flushed_batch(seed in any::<u64>()) {
        crash_case(seed, true);
    }

    #[test]
    fn process_crash_keeps_every_appended_batch(seed in any::<u64>()) {
        crash_case(seed, false);
    }
}

/// Bit rot in the middle of flushed data: recovery cuts the log before the damaged batch
/// (only when the segment is rescanned: the last segment after an unclean shutdown), and a
/// damaged batch is never served.
#[test]
fn flipped_bit_in_flushed_data_is_cut_not_served() {
    let tmp = common::tempdir();
    common::run(tmp.path(), || async {
        let dir = Path::new("/sim/rot");
        let disk = SimDisk::new();
        let mut cfg = common::small_config();
        cfg.segment_bytes = 1 << 30;
        let log = Log::open_in(disk.vfs(), dir, cfg.clone(), BatchCache::new(1 << 20))
            .await
            .expect("open");
        let mut sizes = Vec::new();
        for i in 0..50 {
            let b = RecordBatchBuilder::new(i)
                .record(None, Some(&[7u8; 300]), &[])
                .build();
            sizes.push(b.len() as u64);
            log.append(b).await.expect("append");
        }
        log.flush().await.expect("flush");
        drop(log);
        // Flip a bit inside batch 20's records.
        let pos: u64 = sizes[..20].iter().sum::<u64>() + 70;
        assert!(disk.flip_bit("00000000000000000000.log", pos, 3));
        let log = Log::open_in(disk.vfs(), dir, cfg, BatchCache::new(1 << 20))
            .await
            .expect("recover");
        assert_eq!(
            log.watermarks().log_end_offset,
            20,
            "recovery must cut at the damaged batch"
        );
        let got = read_all(&log).await;
        assert_eq!(got.len(), 20);
    });
}

/// An injected write error fails the log: the append in progress and later ones get an
/// error (never a panic), reads of data already written still work.
#[test]
fn write_error_fails_appends_not_reads() {
    let tmp = common::tempdir();
    common::run(tmp.path(), || async {
        let dir = Path::new("/sim/eio");
        let disk = SimDisk::new();
        let log = Rc::new(
            Log::open_in(
                disk.vfs(),
                dir,
                common::small_config(),
                BatchCache::new(1 << 20),
            )
            .await
            .expect("open"),
        );
        let b = RecordBatchBuilder::new(1)
            .record(None, Some(b"ok"), &[])
            .build();
        log.append(b.clone()).await.expect("append");
        disk.inject(SimFault {
            op: SimOp::Write,
            path_contains: ".log".into(),
            errno: 5,
        });
        let e = log.append(b.clone()).await.expect_err("write fails");
        assert!(e.is_storage_error(), "{e}");
        let e = log.append(b.clone()).await.expect_err("log stays failed");
        assert!(matches!(e, Error::LogFailed(_)), "{e}");
        let r = log.read(0, 1 << 20).await.expect("old data still readable");
        assert_eq!(r.batches().count(), 1);
        disk.clear_faults();
    });
}

/// Concurrent flushes share fdatasyncs (group commit): 200 concurrent appenders each
/// flushing cause far fewer than 200 syncs.
#[test]
fn concurrent_flushes_share_fdatasync() {
    let tmp = common::tempdir();
    common::run(tmp.path(), || async {
        let dir = Path::new("/sim/group");
        let disk = SimDisk::new();
        let log = Rc::new(
            Log::open_in(
                disk.vfs(),
                dir,
                common::small_config(),
                BatchCache::new(1 << 20),
            )
            .await
            .expect("open"),
        );
        let before = disk.sync_count();
        let mut tasks = Vec::new();
        for i in 0..200 {
            let log = log.clone();
            tasks.push(glommio::spawn_local(async move {
                let b = RecordBatchBuilder::new(i)
                    .record(None, Some(b"x"), &[])
                    .build();
                let info = log.append(b).await.expect("append");
                let flushed = log.flush().await.expect("flush");
                assert!(flushed > info.last_offset);
            }));
        }
        for t in tasks {
            t.await;
        }
        let syncs = disk.sync_count() - before;
        assert!(
            (1..=10).contains(&syncs),
            "200 flushes issued {syncs} fdatasyncs"
        );
        assert_eq!(log.watermarks().flushed_offset, 200);
    });
}

/// A full disk shows first when a segment is preallocated, before anything is written: the
/// append fails with ENOSPC, the log stays usable, and appends work again once space is
/// freed (nothing to reopen).
#[test]
fn full_disk_refuses_appends_until_space_is_freed() {
    let tmp = common::tempdir();
    common::run(tmp.path(), || async {
        let dir = Path::new("/sim/full");
        let disk = SimDisk::new();
        let log = Log::open_in(
            disk.vfs(),
            dir,
            common::small_config(),
            BatchCache::new(1 << 20),
        )
        .await
        .expect("open");
        let b = RecordBatchBuilder::new(1)
            .record(None, Some(&[1u8; 4000]), &[])
            .build();
        disk.inject(SimFault {
            op: SimOp::Allocate,
            path_contains: ".log".into(),
            errno: 28,
        });
        let mut refused = None;
        for i in 0..100 {
            match log.append(b.clone()).await {
                Ok(_) => {}
                Err(e) => {
                    assert!(e.is_no_space(), "{e}");
                    refused = Some(i);
                    break;
                }
            }
        }
        let refused = refused.expect("the preallocated space runs out");
        assert_eq!(
            log.watermarks().log_end_offset,
            refused,
            "a refused append assigns nothing"
        );
        disk.clear_faults();
        let info = log
            .append(b.clone())
            .await
            .expect("append after space is freed");
        assert_eq!(info.base_offset, refused);
        let r = log.read(0, 1 << 20).await.expect("read");
        assert!(r.batches().count() >= 1);
    });
}

/// A log reopened on a full disk (a restart after the disk filled) still opens: its records
/// are served, appends are refused with ENOSPC, and work again once space is freed.
#[test]
fn log_reopens_on_a_full_disk() {
    let tmp = common::tempdir();
    common::run(tmp.path(), || async {
        let dir = Path::new("/sim/reopen-full");
        let disk = SimDisk::new();
        let b = RecordBatchBuilder::new(1)
            .record(None, Some(&[7u8; 3000]), &[])
            .build();
        let log = Log::open_in(
            disk.vfs(),
            dir,
            common::small_config(),
            BatchCache::new(1 << 20),
        )
        .await
        .expect("open");
        for _ in 0..5 {
            log.append(b.clone()).await.expect("append");
        }
        log.close().await.expect("close");

        disk.inject(SimFault {
            op: SimOp::Allocate,
            path_contains: ".log".into(),
            errno: 28,
        });
        let log = Log::open_in(
            disk.vfs(),
            dir,
            common::small_config(),
            BatchCache::new(1 << 20),
        )
        .await
        .expect("a full disk must not stop the log from opening");
        let r = log.read(0, 1 << 20).await.expect("read");
        assert_eq!(r.batches().count(), 5, "every record is still served");
        let mut refused = false;
        for _ in 0..50 {
            match log.append(b.clone()).await {
                Ok(_) => {}
                Err(e) => {
                    assert!(e.is_no_space(), "{e}");
                    refused = true;
                    break;
                }
            }
        }
        assert!(refused, "appends on a full disk are refused");
        let end = log.watermarks().log_end_offset;
        disk.clear_faults();
        let info = log
            .append(b.clone())
            .await
            .expect("append after space is freed");
        assert_eq!(info.base_offset, end);
    });
}

/// Regression, the property above with the seed that found it: a bit flipped in an unflushed
/// write moved a batch's base offset from 361 to 377 (the base offset is outside the batch
/// CRC), and recovery, which then allowed offset gaps anywhere, kept it and served it at 377.
/// Recovery now requires contiguous offsets outside the bytes compaction wrote
/// (`tests/recovery_contiguity.rs` flips those bits on purpose). An explicit case rather than
/// a `crash.proptest-regressions` line: this is the `seed` argument of `crash_case`, not
/// proptest's own RNG seed, so it replays the same way whatever the proptest version.
#[test]
fn power_loss_seed_3311443207740379476_flipped_base_offset_is_cut() {
    crash_case(3311443207740379476, true);
}
