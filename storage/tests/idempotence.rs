//! Idempotent producers (Kafka's semantics, without transactions): a retried batch is not
//! written twice and is answered with its original offsets; a sequence gap and an old epoch
//! are refused; the state survives a clean close, a crash, and rolls followed by a crash.

mod common;

use bytes::Bytes;
use weir_storage::batch::RecordBatchBuilder;
use weir_storage::{Error, Log, LogConfig};

fn batch(pid: i64, epoch: i16, seq: i32, n: usize) -> Bytes {
    let mut b = RecordBatchBuilder::new(1_000).producer(pid, epoch, seq);
    for i in 0..n {
        b = b.record(
            None,
            Some(format!("p{pid} s{} {}", seq + i as i32, "x".repeat(200)).as_bytes()),
            &[],
        );
    }
    b.build()
}

/// Appends `seq..seq+n` for `pid` and returns (base, last).
async fn send(log: &Log, pid: i64, epoch: i16, seq: i32, n: usize) -> (u64, u64, bool) {
    let info = log.append(batch(pid, epoch, seq, n)).await.expect("append");
    (info.base_offset, info.last_offset, info.duplicate)
}

#[test]
fn retries_are_answered_with_their_offsets_gaps_and_old_epochs_refused() {
    let dir = common::tempdir();
    let path = dir.path().join("p");
    common::run(dir.path(), move || async move {
        let log = Log::open(&path, common::small_config())
            .await
            .expect("open");
        assert_eq!(send(&log, 7, 0, 0, 3).await, (0, 2, false));
        assert_eq!(send(&log, 8, 0, 0, 1).await, (3, 3, false));
        assert_eq!(send(&log, 7, 0, 3, 2).await, (4, 5, false));
        // The retry of either earlier batch of producer 7: original offsets, nothing written.
        assert_eq!(send(&log, 7, 0, 0, 3).await, (0, 2, true));
        assert_eq!(send(&log, 7, 0, 3, 2).await, (4, 5, true));
        assert_eq!(log.watermarks().log_end_offset, 6);
        // A gap, and a sequence already passed that is no retry.
        let gap = log.append(batch(7, 0, 9, 1)).await.expect_err("gap");
        assert!(
            matches!(
                gap,
                Error::OutOfOrderSequence {
                    expected: 5,
                    got: 9,
                    ..
                }
            ),
            "{gap}"
        );
        // A new epoch starts at 0 and fences the old one.
        assert!(matches!(
            log.append(batch(7, 1, 4, 1)).await,
            Err(Error::OutOfOrderSequence { expected: 0, .. })
        ));
        assert_eq!(send(&log, 7, 1, 0, 1).await, (6, 6, false));
        assert!(matches!(
            log.append(batch(7, 0, 5, 1)).await,
            Err(Error::InvalidProducerEpoch {
                epoch: 0,
                current: 1,
                ..
            })
        ));
        // Batches without a producer id are not checked.
        let plain = RecordBatchBuilder::new(1)
            .record(None, Some(b"plain"), &[])
            .build();
        assert!(!log.append(plain.clone()).await.expect("plain").duplicate);
        assert!(!log.append(plain).await.expect("plain again").duplicate);
        assert_eq!(log.watermarks().log_end_offset, 9);
        log.close().await.expect("close");
    });
}

/// Checks what a reopened log must know: producer 1's last batch (written early, so in a
/// sealed segment) and producer 2's last batch are duplicates, producer 1's gap is refused,
/// and producer 2's next batch is accepted. Returns producer 2's next sequence.
async fn check_known(log: &Log, seq2: i32, phase: &str) -> i32 {
    assert_eq!(
        send(log, 1, 0, 2, 2).await,
        (2, 3, true),
        "{phase}: producer 1's retry"
    );
    assert!(
        matches!(
            log.append(batch(1, 0, 7, 1)).await,
            Err(Error::OutOfOrderSequence { expected: 4, .. })
        ),
        "{phase}: producer 1's gap"
    );
    let (b, l, dup) = send(log, 2, 0, seq2 - 2, 2).await;
    assert!(dup && l == b + 1, "{phase}: producer 2's retry");
    assert!(
        !send(log, 2, 0, seq2, 2).await.2,
        "{phase}: producer 2's next batch"
    );
    seq2 + 2
}

fn segment_count(path: &std::path::Path) -> usize {
    std::fs::read_dir(path)
        .expect("list")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "log"))
        })
        .count()
}

/// After a clean close, after a crash, and after rolls then a crash, the producers' last
/// batches are still known.
#[test]
fn producer_state_survives_close_crash_and_rolls() {
    let dir = common::tempdir();
    let path = dir.path().join("p");
    common::run(dir.path(), move || async move {
        let cfg = LogConfig {
            segment_bytes: 8 << 10,
            ..common::small_config()
        };
        let log = Log::open(&path, cfg.clone()).await.expect("open");
        assert_eq!(send(&log, 1, 0, 0, 2).await, (0, 1, false));
        assert_eq!(send(&log, 1, 0, 2, 2).await, (2, 3, false));
        let mut seq2 = 0;
        for _ in 0..60 {
            send(&log, 2, 0, seq2, 2).await;
            seq2 += 2;
        }
        assert!(segment_count(&path) > 3, "the test rolls");
        log.close().await.expect("close");

        let log = Log::open(&path, cfg.clone())
            .await
            .expect("reopen after a clean close");
        seq2 = check_known(&log, seq2, "clean close").await;
        drop(log); // a crash: no clean close

        let log = Log::open(&path, cfg.clone())
            .await
            .expect("reopen after a crash");
        seq2 = check_known(&log, seq2, "crash").await;
        let before = segment_count(&path);
        for _ in 0..40 {
            send(&log, 2, 0, seq2, 2).await;
            seq2 += 2;
        }
        assert!(segment_count(&path) > before + 2, "more rolls");
        drop(log);

        let log = Log::open(&path, cfg.clone())
            .await
            .expect("reopen after rolls and a crash");
        check_known(&log, seq2, "rolls then a crash").await;
        log.close().await.expect("close");
    });
}
