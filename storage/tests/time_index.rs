//! The time index holds one entry per `index.interval.bytes` of log (Kafka's rule), not one
//! per batch, and timestamp lookups stay exact.
//!
//! What broke: every batch that raised a segment's max timestamp added a 12-byte entry, so
//! a partition receiving small batches with rising timestamps (the common case) kept one
//! entry per batch in memory for every segment: with many partitions the indexes grew
//! without bound.

mod common;

use weir_storage::batch::RecordBatchBuilder;
use weir_storage::{Log, LogConfig};

/// Every timestamp is answered by the first batch (in offset order) reaching it.
async fn check(log: &Log, batches: &[(u64, i64)]) {
    for target in (900..21_100).step_by(7) {
        let want = batches.iter().find(|&&(_, t)| t >= target);
        let got = log.offset_for_timestamp(target).await.expect("lookup");
        assert_eq!(got.map(|g| g.0), want.map(|w| w.0), "target {target}");
    }
}

#[test]
fn one_time_index_entry_per_interval_and_lookups_stay_exact() {
    let dir = common::tempdir();
    let path = dir.path().join("p");
    common::run(dir.path(), move || async move {
        let cfg = LogConfig {
            segment_bytes: 1 << 30,
            index_interval_bytes: 4096,
            ..common::small_config()
        };
        let log = Log::open(&path, cfg.clone()).await.expect("open");
        // 2,000 small batches, timestamps mostly rising with some going back.
        let mut batches = Vec::new(); // (base offset, max timestamp)
        let mut bytes = 0u64;
        for i in 0..2000i64 {
            let ts = 1_000 + i * 10 - if i % 7 == 3 { 55 } else { 0 };
            let b = RecordBatchBuilder::new(ts)
                .record(None, Some(&[i as u8; 40]), &[])
                .build();
            bytes += b.len() as u64;
            let info = log.append(b).await.expect("append");
            batches.push((info.base_offset, ts));
        }
        check(&log, &batches).await;
        log.close().await.expect("close");
        let ti = std::fs::metadata(path.join(format!("{:020}.timeindex", 0)))
            .expect("stat")
            .len();
        let entries = (ti - 48) / 12;
        let bound = bytes / 4096 + 2;
        assert!(
            entries <= bound,
            "{entries} time-index entries for {bytes} bytes of log (at most {bound})"
        );
        let log = Log::open(&path, cfg.clone()).await.expect("reopen");
        check(&log, &batches).await;
        drop(log);
        // Unclean: the index is rebuilt by the scan, with the same rule.
        let log = Log::open(&path, cfg).await.expect("reopen unclean");
        check(&log, &batches).await;
        log.close().await.expect("close");
    });
}

/// The model's answer: the earliest record (from `start`) with the largest timestamp.
fn model_max(records: &[(u64, i64)], start: u64) -> Option<(u64, i64)> {
    records
        .iter()
        .filter(|r| r.0 >= start)
        .fold(None, |acc: Option<(u64, i64)>, &r| match acc {
            Some((_, ts)) if r.1 <= ts => acc,
            _ => Some(r),
        })
}

/// ListOffsets MAX_TIMESTAMP (KIP-734): the offset of the record with the largest timestamp,
/// the earliest of equals, across segments, inside a batch, after the log start moved into a
/// segment, and after a reopen (the time index is used to skip the scan's start).
#[test]
fn max_timestamp_is_the_earliest_record_with_the_largest_timestamp() {
    let dir = common::tempdir();
    let path = dir.path().join("p");
    common::run(dir.path(), move || async move {
        let cfg = LogConfig {
            segment_bytes: 16 << 10,
            index_interval_bytes: 512,
            ..common::small_config()
        };
        let log = Log::open(&path, cfg.clone()).await.expect("open");
        assert_eq!(log.max_timestamp_offset().await.expect("empty"), None);
        let mut records: Vec<(u64, i64)> = Vec::new();
        let mut next = 0u64;
        // Pseudo-random timestamps in a narrow range, so maxima repeat and move around.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for i in 0..600u64 {
            let mut b = RecordBatchBuilder::new(10_000);
            let n = 1 + i % 4;
            for _ in 0..n {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let ts = 10_000 + (x % 500) as i64 + i as i64 / 3;
                b = b.record_at(ts, None, Some(&[7u8; 60]), &[]);
                records.push((next, ts));
                next += 1;
            }
            log.append(b.build()).await.expect("append");
            if i % 97 == 0 {
                let got = log.max_timestamp_offset().await.expect("max");
                assert_eq!(got, model_max(&records, 0), "after batch {i}");
            }
        }
        let got = log.max_timestamp_offset().await.expect("max");
        let want = model_max(&records, 0);
        assert!(want.is_some());
        assert_eq!(got, want);
        let segments = std::fs::read_dir(&path)
            .expect("list")
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "log"))
            })
            .count();
        assert!(segments > 3, "the test spans segments ({segments})");

        // Move the log start past the record holding the maximum (into its segment): the
        // answer is the best record that is still readable.
        let start = want.unwrap().0 + 1;
        log.set_log_start_offset(start)
            .await
            .expect("delete records");
        assert_eq!(
            log.max_timestamp_offset().await.expect("max"),
            model_max(&records, start)
        );
        log.close().await.expect("close");

        let log = Log::open(&path, cfg).await.expect("reopen");
        assert_eq!(
            log.max_timestamp_offset().await.expect("max"),
            model_max(&records, start)
        );
        log.close().await.expect("close");
    });
}
