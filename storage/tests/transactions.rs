//! Transactions in the log: an open transaction holds the last stable offset at its first
//! record; a commit or abort marker (a control batch) releases it; aborted transactions are
//! listed for read_committed readers; a marker with a newer epoch fences the old producer;
//! all of it survives a clean close, a crash, and rolls followed by a crash.

mod common;

use bytes::Bytes;
use weir_storage::batch::{self, RecordBatchBuilder, TRANSACTIONAL_FLAG};
use weir_storage::{AbortedTxn, Error, Log, LogConfig};

fn txn_batch(pid: i64, epoch: i16, seq: i32, n: usize) -> Bytes {
    let mut b = RecordBatchBuilder::new(1_000)
        .producer(pid, epoch, seq)
        .attributes(TRANSACTIONAL_FLAG);
    for i in 0..n {
        let v = format!("p{pid} s{} {}", seq + i as i32, "x".repeat(300));
        b = b.record(None, Some(v.as_bytes()), &[]);
    }
    b.build()
}

fn plain(n: usize) -> Bytes {
    let mut b = RecordBatchBuilder::new(1_000);
    for _ in 0..n {
        b = b.record(None, Some(b"plain"), &[]);
    }
    b.build()
}

async fn marker(log: &Log, pid: i64, epoch: i16, commit: bool) -> u64 {
    let m = batch::marker_batch(pid, epoch, commit, 0, 2_000);
    assert_eq!(batch::marker_type(&m), Some(commit));
    log.append(m).await.expect("marker").base_offset
}

/// Offsets of the batches a read_committed read from 0 returns.
async fn committed_offsets(log: &Log) -> Vec<u64> {
    let out = log.read_committed(0, 1 << 20, 1 << 20).await.expect("read");
    out.batches()
        .map(|(h, _)| h.base_offset.get() as u64)
        .collect()
}

#[test]
fn open_transactions_bound_reads_and_aborts_are_listed_across_restarts() {
    let dir = common::tempdir();
    let path = dir.path().join("t");
    common::run(dir.path(), move || async move {
        let cfg = LogConfig {
            segment_bytes: 16 << 10,
            ..common::small_config()
        };
        let log = Log::open(&path, cfg.clone()).await.expect("open");
        log.append(plain(2)).await.expect("plain"); // 0-1
        log.append(txn_batch(7, 0, 0, 3)).await.expect("txn"); // 2-4
        log.append(plain(1)).await.expect("plain"); // 5
        let w = log.watermarks();
        assert_eq!((w.high_watermark, w.last_stable_offset), (6, 2));
        assert_eq!(
            committed_offsets(&log).await,
            vec![0],
            "stops at the open transaction"
        );
        let abort_at = marker(&log, 7, 0, false).await;
        assert_eq!(abort_at, 6);
        assert_eq!(log.watermarks().last_stable_offset, 7);
        assert_eq!(committed_offsets(&log).await, vec![0, 2, 5, 6]);
        let aborted = AbortedTxn {
            producer_id: 7,
            first_offset: 2,
            last_offset: 6,
        };
        assert_eq!(
            log.aborted_transactions(0, 7).await.expect("aborted"),
            vec![aborted]
        );

        // A second transaction, committed, across rolls; a third left open.
        let mut seq = 3;
        for _ in 0..40 {
            log.append(txn_batch(7, 0, seq, 2)).await.expect("txn");
            seq += 2;
        }
        let commit_at = marker(&log, 7, 0, true).await;
        log.append(txn_batch(8, 0, 0, 1)).await.expect("open txn");
        let open_at = commit_at + 1;
        assert_eq!(log.watermarks().last_stable_offset, open_at);
        assert_eq!(
            log.aborted_transactions(7, open_at).await.expect("aborted"),
            vec![]
        );
        log.close().await.expect("close");

        for phase in ["clean close", "crash", "rolls then a crash"] {
            let log = Log::open(&path, cfg.clone()).await.expect(phase);
            let w = log.watermarks();
            assert_eq!(
                w.last_stable_offset, open_at,
                "{phase}: the open transaction"
            );
            assert_eq!(
                log.aborted_transactions(0, u64::MAX)
                    .await
                    .expect("aborted"),
                vec![aborted],
                "{phase}"
            );
            if phase == "rolls then a crash" {
                // Ends it with a fencing abort (epoch 1): producer 8's epoch 0 is refused.
                let at = marker(&log, 8, 1, false).await;
                assert!(matches!(
                    log.append(txn_batch(8, 0, 1, 1)).await,
                    Err(Error::InvalidProducerEpoch { .. })
                ));
                assert_eq!(log.watermarks().last_stable_offset, at + 1);
                assert_eq!(
                    log.aborted_transactions(open_at, at + 1)
                        .await
                        .expect("aborted")
                        .len(),
                    1
                );
                log.close().await.expect("close");
                break;
            }
            if phase == "crash" {
                for _ in 0..40 {
                    log.append(plain(4)).await.expect("plain");
                }
            }
            drop(log); // no clean close
        }
        let log = Log::open(&path, cfg).await.expect("last open");
        assert_eq!(
            log.aborted_transactions(0, u64::MAX)
                .await
                .expect("aborted")
                .len(),
            2
        );
        let w = log.watermarks();
        assert_eq!(w.last_stable_offset, w.high_watermark);
        log.close().await.expect("close");
    });
}

fn keyed(pid: i64, seq: i32, txn: bool, key: &str, value: &str) -> Bytes {
    let mut b = RecordBatchBuilder::new(1_000);
    if pid >= 0 {
        b = b.producer(pid, 0, seq);
    }
    if txn {
        b = b.attributes(TRANSACTIONAL_FLAG);
    }
    b.record(Some(key.as_bytes()), Some(value.as_bytes()), &[])
        .build()
}

/// Compaction keeps a key's committed value over a later aborted one, and does not touch an
/// open transaction's records.
#[test]
fn compaction_removes_aborted_records_and_stops_at_open_transactions() {
    let dir = common::tempdir();
    let path = dir.path().join("c");
    common::run(dir.path(), move || async move {
        let cfg = LogConfig {
            segment_bytes: 4096,
            cleanup_compact: true,
            min_cleanable_dirty_ratio: 0.0,
            min_compaction_lag_ms: 0,
            ..common::small_config()
        };
        let log = Log::open(&path, cfg).await.expect("open");
        log.append(keyed(-1, 0, false, "k", "committed"))
            .await
            .expect("plain");
        log.append(keyed(5, 0, true, "k", "aborted"))
            .await
            .expect("txn");
        marker(&log, 5, 0, false).await;
        log.append(keyed(6, 0, true, "open", "maybe"))
            .await
            .expect("open txn");
        for i in 0..60 {
            log.append(keyed(-1, 0, false, &format!("filler{i}"), &"f".repeat(200)))
                .await
                .expect("filler");
        }
        let stats = log
            .clean(10_000, &weir_storage::log::CleanOptions::default())
            .await
            .expect("clean");
        assert!(
            stats.cleaned_to <= 3,
            "cleaned past the open transaction at offset 3: {stats:?}"
        );
        marker(&log, 6, 0, true).await;
        for i in 0..60 {
            log.append(keyed(-1, 0, false, &format!("more{i}"), &"m".repeat(200)))
                .await
                .expect("filler");
        }
        let stats = log
            .clean(10_000, &weir_storage::log::CleanOptions::default())
            .await
            .expect("clean");
        assert!(stats.records_removed > 0, "{stats:?}");
        let out = log.read(0, 1 << 20).await.expect("read");
        let mut values = Vec::new();
        for (h, batch) in out.batches() {
            if h.is_control() {
                continue;
            }
            for r in batch::decode_records(batch).unwrap_or_default() {
                if r.key.as_deref() == Some(b"k") || r.key.as_deref() == Some(b"open") {
                    values.push(String::from_utf8(r.value.unwrap_or_default().to_vec()).unwrap());
                }
            }
        }
        assert_eq!(
            values,
            vec!["committed", "maybe"],
            "key k keeps its committed value"
        );
        log.close().await.expect("close");
    });
}

/// A crash during a roll leaves a snapshot that describes the log only up to an earlier
/// segment: the segments after it are read again, so an abort and an open transaction
/// recorded only there are still known.
#[test]
fn a_stale_snapshot_is_completed_from_the_sealed_segments() {
    let dir = common::tempdir();
    let path = dir.path().join("s");
    common::run(dir.path(), move || async move {
        let cfg = LogConfig {
            segment_bytes: 8 << 10,
            ..common::small_config()
        };
        let snapshot = path.join("producer_state");
        let log = Log::open(&path, cfg.clone()).await.expect("open");
        let mut seq = 0;
        for _ in 0..20 {
            log.append(txn_batch(1, 0, seq, 2)).await.expect("txn");
            seq += 2;
        }
        let stale = std::fs::read(&snapshot).expect("a roll wrote the snapshot");
        let aborted_at = marker(&log, 1, 0, false).await;
        let open_at = log
            .append(txn_batch(2, 0, 0, 1))
            .await
            .expect("open")
            .base_offset;
        let segments = |p: &std::path::Path| {
            std::fs::read_dir(p)
                .expect("list")
                .filter(|e| {
                    e.as_ref()
                        .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "log"))
                })
                .count()
        };
        let before = segments(&path);
        for i in 0..40 {
            log.append(keyed(-1, 0, false, &format!("f{i}"), &"f".repeat(400)))
                .await
                .expect("filler");
        }
        assert!(
            segments(&path) > before,
            "the test rolls past the stale snapshot"
        );
        drop(log); // a crash ...
        std::fs::write(&snapshot, &stale).expect("... that left the snapshot of an earlier roll");
        let log = Log::open(&path, cfg).await.expect("reopen");
        let aborted = log
            .aborted_transactions(0, u64::MAX)
            .await
            .expect("aborted");
        assert_eq!(aborted.len(), 1, "the abort at {aborted_at} is known");
        assert_eq!(
            (aborted[0].producer_id, aborted[0].last_offset),
            (1, aborted_at)
        );
        assert_eq!(
            log.watermarks().last_stable_offset,
            open_at,
            "the open transaction"
        );
        log.close().await.expect("close");
    });
}
