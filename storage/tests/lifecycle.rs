//! Segment lifecycle on real files: roll by size and by age, retention by time and by
//! size, log start offset, timestamp lookup, index rebuild, clean vs unclean reopen, and
//! the notification of new data.

mod common;

use std::cell::Cell;
use std::rc::Rc;

use weir_storage::batch::RecordBatchBuilder;
use weir_storage::log::CLEAN_SHUTDOWN_FILE;
use weir_storage::{Error, Log, LogConfig};

fn batch_at(ts: i64, bytes: usize) -> bytes::Bytes {
    RecordBatchBuilder::new(ts)
        .record(None, Some(&vec![1u8; bytes]), &[])
        .build()
}

fn log_files(dir: &std::path::Path, ext: &str) -> usize {
    std::fs::read_dir(dir)
        .expect("list")
        .filter(|e| {
            e.as_ref()
                .expect("entry")
                .path()
                .extension()
                .is_some_and(|x| x == ext)
        })
        .count()
}

#[test]
fn retention_by_size_and_time_deletes_whole_old_segments() {
    let dir = common::tempdir();
    let path = dir.path().join("p");
    common::run(dir.path(), move || async move {
        let cfg = LogConfig {
            segment_bytes: 16 << 10,
            ..common::small_config()
        };
        let log = Log::open(&path, cfg.clone()).await.expect("open");
        // 100 batches of ~1 KiB with old timestamps, then 100 recent ones.
        for i in 0..200 {
            let ts = if i < 100 { 1_000 } else { 10_000_000 };
            log.append(batch_at(ts, 1000)).await.expect("append");
        }
        let (segments, bytes) = log.size();
        assert!(
            segments >= 10,
            "expected many 16 KiB segments, got {segments}"
        );
        // Time: everything with timestamps below now - 1000 goes, in whole segments.
        log.set_config(LogConfig {
            retention_ms: Some(1000),
            ..cfg.clone()
        });
        let deleted = log.enforce_retention(10_000_500).await.expect("retention");
        assert!(deleted > 0);
        let start = log.watermarks().log_start_offset;
        assert!(
            start > 0 && start <= 100,
            "old data deleted up to a segment boundary, start {start}"
        );
        assert!(matches!(
            log.read(0, 100).await,
            Err(Error::OffsetOutOfRange { .. })
        ));
        let r = log.read(start, 100).await.expect("read at new start");
        assert_eq!(
            r.batches().next().expect("batch").0.base_offset.get() as u64,
            start
        );
        // Size: keep at most ~40 KiB.
        log.set_config(LogConfig {
            retention_ms: None,
            retention_bytes: Some(40 << 10),
            ..cfg.clone()
        });
        log.enforce_retention(10_000_500).await.expect("retention");
        let (segments2, bytes2) = log.size();
        assert!(
            bytes2 <= (40 << 10) + (16 << 10) && bytes2 < bytes,
            "size {bytes2} of {bytes}"
        );
        assert!(segments2 < segments);
        assert_eq!(log_files(&path, "log"), segments2);
        log.close().await.expect("close");
        let log = Log::open(&path, cfg).await.expect("reopen");
        assert!(
            log.watermarks().log_start_offset > start,
            "log start survives reopen"
        );
        assert_eq!(log.watermarks().log_end_offset, 200);
    });
}

#[test]
fn roll_by_age_and_delete_records() {
    let dir = common::tempdir();
    let path = dir.path().join("p");
    common::run(dir.path(), move || async move {
        let cfg = LogConfig {
            segment_ms: Some(10),
            ..common::small_config()
        };
        let log = Log::open(&path, cfg.clone()).await.expect("open");
        log.append(batch_at(1, 10)).await.expect("append");
        assert_eq!(log.size().0, 1);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as i64;
        log.enforce_retention(now + 1_000).await.expect("age roll");
        assert_eq!(log.size().0, 2, "an aged segment rolls");
        for _ in 0..5 {
            log.append(batch_at(2, 10)).await.expect("append");
        }
        log.set_log_start_offset(3).await.expect("delete records");
        assert_eq!(log.watermarks().log_start_offset, 3);
        assert_eq!(log.size().0, 1, "the segment wholly below 3 is gone");
        assert!(matches!(
            log.read(2, 100).await,
            Err(Error::OffsetOutOfRange { .. })
        ));
        drop(log);
        let log = Log::open(&path, cfg).await.expect("reopen");
        assert_eq!(
            log.watermarks().log_start_offset,
            3,
            "log start set inside a segment survives a crash"
        );
    });
}

#[test]
fn timestamp_lookup_finds_first_record_at_or_after() {
    let dir = common::tempdir();
    let path = dir.path().join("p");
    common::run(dir.path(), move || async move {
        let log = Log::open(&path, common::small_config())
            .await
            .expect("open");
        for i in 0..100i64 {
            let b = RecordBatchBuilder::new(i * 10)
                .record_at(i * 10, None, Some(b"a"), &[])
                .record_at(i * 10 + 5, None, Some(b"b"), &[])
                .build();
            log.append(b).await.expect("append");
        }
        assert_eq!(log.offset_for_timestamp(0).await.expect("ts"), Some((0, 0)));
        assert_eq!(
            log.offset_for_timestamp(503).await.expect("ts"),
            Some((101, 505))
        );
        assert_eq!(
            log.offset_for_timestamp(505).await.expect("ts"),
            Some((101, 505))
        );
        assert_eq!(
            log.offset_for_timestamp(506).await.expect("ts"),
            Some((102, 510))
        );
        assert_eq!(log.offset_for_timestamp(10_000).await.expect("ts"), None);
    });
}

#[test]
fn damaged_indexes_are_rebuilt_and_clean_reopen_trusts_them() {
    let dir = common::tempdir();
    let path = dir.path().join("p");
    common::run(dir.path(), move || async move {
        let cfg = common::small_config();
        let log = Log::open(&path, cfg.clone()).await.expect("open");
        for i in 0..300 {
            log.append(batch_at(i, 700)).await.expect("append");
        }
        log.close().await.expect("close");
        assert!(
            path.join(CLEAN_SHUTDOWN_FILE).exists(),
            "close leaves the marker"
        );
        // Damage one sealed index and delete another.
        let mut idx: Vec<_> = std::fs::read_dir(&path)
            .expect("ls")
            .map(|e| e.expect("e").path())
            .filter(|p| p.extension().is_some_and(|x| x == "index"))
            .collect();
        idx.sort();
        assert!(idx.len() >= 3);
        let mut bytes = std::fs::read(&idx[0]).expect("read index");
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&idx[0], bytes).expect("damage");
        std::fs::remove_file(&idx[1]).expect("delete index");
        let log = Log::open(&path, cfg.clone()).await.expect("reopen");
        assert!(
            !path.join(CLEAN_SHUTDOWN_FILE).exists(),
            "open removes the marker"
        );
        assert_eq!(log.watermarks().log_end_offset, 300);
        for off in [0u64, 1, 17, 150, 299] {
            let r = log.read(off, 1).await.expect("read");
            assert_eq!(
                r.batches().next().expect("batch").0.base_offset.get() as u64,
                off
            );
        }
        log.close().await.expect("close");
        let log = Log::open(&path, cfg).await.expect("reopen again");
        assert_eq!(log.watermarks().log_end_offset, 300);
    });
}

#[test]
fn readers_are_told_when_data_arrives() {
    let dir = common::tempdir();
    let path = dir.path().join("p");
    common::run(dir.path(), move || async move {
        let log = Rc::new(
            Log::open(&path, common::small_config())
                .await
                .expect("open"),
        );
        let calls = Rc::new(Cell::new(0u64));
        let c = calls.clone();
        log.on_append(move |wm| c.set(wm.high_watermark));
        let l2 = log.clone();
        let waiter = glommio::spawn_local(async move {
            l2.wait_for_data(0).await.expect("wait");
            l2.read(0, 100).await.expect("read").batches().count()
        });
        glommio::yield_if_needed().await;
        log.append(batch_at(1, 10)).await.expect("append");
        assert_eq!(waiter.await, 1);
        assert_eq!(calls.get(), 1, "the callback saw the new high watermark");
    });
}

#[test]
fn bad_batches_are_refused_and_nothing_is_written() {
    let dir = common::tempdir();
    let path = dir.path().join("p");
    common::run(dir.path(), move || async move {
        let log = Log::open(&path, common::small_config())
            .await
            .expect("open");
        let good = batch_at(1, 10);
        let mut bad = good.to_vec();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(matches!(
            log.append(bad.into()).await,
            Err(Error::InvalidBatch(_))
        ));
        assert!(matches!(
            log.append(bytes::Bytes::from_static(&[0; 10])).await,
            Err(Error::InvalidBatch(_))
        ));
        let big = batch_at(1, 9 << 20);
        assert!(matches!(
            log.append(big).await,
            Err(Error::BatchTooLarge { .. })
        ));
        assert_eq!(log.watermarks().log_end_offset, 0);
        log.append(good).await.expect("good batch after bad ones");
        assert_eq!(log.watermarks().log_end_offset, 1);
    });
}

/// Regression: appends were ordered by a glommio `Semaphore`, which is not first-come-first-
/// served: an append arriving while a woken waiter had not run yet could take the lock
/// first, so pipelined produce requests to one partition got offsets out of arrival order
/// (found by the Python suite's pipelined-producer test). Appends issued one after another
/// (each started before the previous finished) must get offsets in that order.
#[test]
fn pipelined_appends_get_offsets_in_arrival_order() {
    let dir = common::tempdir();
    let path = dir.path().join("p");
    common::run(dir.path(), move || async move {
        let cfg = LogConfig {
            segment_bytes: 32 << 10,
            ..common::small_config()
        };
        let log = Rc::new(Log::open(&path, cfg).await.expect("open"));
        let mut tasks = Vec::new();
        for i in 0..600u32 {
            let log = log.clone();
            let b = RecordBatchBuilder::new(1)
                .record(None, Some(&i.to_be_bytes()), &[])
                .record(None, Some(&[0u8; 300]), &[])
                .build();
            tasks.push(glommio::spawn_local(async move {
                log.append(b).await.expect("append").base_offset
            }));
            if i % 3 == 0 {
                // Let earlier appends run (and queue) while more arrive.
                futures_lite::future::yield_now().await;
            }
        }
        for (i, t) in tasks.into_iter().enumerate() {
            assert_eq!(t.await, 2 * i as u64, "append {i} got the wrong offset");
        }
    });
}

/// Deleting a log (DeleteTopics, retention) unlinks its files on glommio's blocking pool: the
/// core goes on running its other tasks meanwhile. Before, `remove_dir_all` ran on the reactor
/// thread itself, and a delete of a large log stalled every partition of that core; here a
/// ticker task on the same core must get to run while the delete is in progress.
#[test]
fn deleting_a_log_does_not_stall_the_core() {
    let dir = common::tempdir();
    let path = dir.path().join("p");
    common::run(dir.path(), move || async move {
        let log = Log::open(&path, common::small_config())
            .await
            .expect("open");
        for _ in 0..64 {
            log.append(batch_at(1_000, 4000)).await.expect("append");
        }
        let ticks = Rc::new(Cell::new(0u32));
        let stop = Rc::new(Cell::new(false));
        let ticker = glommio::spawn_local({
            let (ticks, stop) = (ticks.clone(), stop.clone());
            async move {
                while !stop.get() {
                    ticks.set(ticks.get() + 1);
                    glommio::yield_if_needed().await;
                    futures_lite::future::yield_now().await;
                }
            }
        });
        futures_lite::future::yield_now().await; // the ticker is running
        let before = ticks.get();
        log.delete().await.expect("delete");
        let during = ticks.get() - before;
        stop.set(true);
        ticker.await;
        assert!(!path.exists(), "the log directory is gone");
        assert!(
            during > 0,
            "no other task ran while the log was being deleted: the delete blocked the core"
        );
    });
}

/// A catch-up read for a fetch (`Log::read_available`) answers with what the device has
/// delivered once `min_bytes` are there, plus what the read-ahead already holds — it does not
/// wait for `max_bytes` of disk reads. Before, every read waited for all of `max_bytes`
/// (64 MiB for a librdkafka consumer configured that way), so each response took a long disk
/// read with the device idle between fetches, and librdkafka's queue overflowed into its
/// 1 s `fetch.queue.backoff.ms`. `Log::read` (everything up to `max_bytes`) is unchanged.
#[test]
fn catch_up_reads_answer_with_what_is_read_not_max_bytes() {
    let dir = common::tempdir();
    let path = dir.path().join("p");
    common::run(dir.path(), move || async move {
        let cfg = LogConfig {
            segment_bytes: 64 << 20,
            read_chunk_bytes: 64 << 10,
            read_ahead_bytes: 256 << 10,
            ..common::small_config()
        };
        let log = Log::open(&path, cfg.clone()).await.expect("open");
        for _ in 0..512 {
            log.append(batch_at(1_000, 4000)).await.expect("append");
        }
        let end = log.watermarks().high_watermark;
        log.close().await.expect("close");
        // Reopened: nothing in memory, every read goes to the disk.
        let log = Log::open(&path, cfg.clone()).await.expect("reopen");
        let all = 8 << 20;
        let bytes = |r: &weir_storage::ReadOutcome| r.chunks.iter().map(|c| c.len()).sum::<usize>();

        let quick = log.read_available(0, 1, all).await.expect("read_available");
        let got = bytes(&quick);
        assert!(got > 0, "at least one batch");
        assert!(
            got <= (64 << 10) + (256 << 10) + 8192,
            "read {got} bytes: more than the first chunk plus the read-ahead window"
        );

        let want = 1 << 20;
        let enough = log
            .read_available(0, want, all)
            .await
            .expect("read_available");
        assert!(bytes(&enough) >= want, "min_bytes is waited for");

        let full = log.read(0, all).await.expect("read");
        let batches = full.batches().count() as u64;
        assert_eq!(batches, end, "read() returns everything up to max_bytes");
        // 4 KiB batches in 64 KiB read chunks: some span two chunks and come in two pieces
        // (no copy to join them), which concatenate to the same bytes.
        assert!(
            full.chunks.len() as u64 > end,
            "batches spanning chunks stay in pieces"
        );
    });
}
