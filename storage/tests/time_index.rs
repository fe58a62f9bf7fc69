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
