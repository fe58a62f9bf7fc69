//! Chunks read from disk are held under one budget per core, shared by all its logs.
//!
//! What broke: each log kept its own chunk cache (up to twice its read-ahead, 34 MiB with the
//! defaults), so a core whose many partitions were read from disk — consumers catching up on
//! thousands of partitions — held memory in proportion to the partition count.

mod common;

use weir_storage::batch::{self, RecordBatchBuilder};
use weir_storage::{BatchCache, Log, LogConfig};

const LOGS: usize = 24;
const BATCHES: usize = 200;
const BUDGET: usize = 256 << 10;

#[test]
fn read_chunks_of_many_logs_stay_within_the_core_budget() {
    let dir = common::tempdir();
    let root = dir.path().to_owned();
    common::run(dir.path(), move || async move {
        // A tiny write cache, so that reads go to disk; a 256 KiB read budget for 24 logs
        // whose read-ahead alone would want 32 KiB each, and chunk caches 80 KiB each.
        let cache = BatchCache::with_read_budget(16 << 10, BUDGET);
        let cfg = LogConfig {
            segment_bytes: 1 << 20,
            ..common::small_config()
        };
        let mut logs = Vec::new();
        for l in 0..LOGS {
            let log = Log::open_with_cache(root.join(format!("p{l}")), cfg.clone(), cache.clone())
                .await
                .expect("open");
            for i in 0..BATCHES {
                let value = format!("log {l} batch {i} {}", "x".repeat(900));
                log.append(
                    RecordBatchBuilder::new(i as i64)
                        .record(None, Some(value.as_bytes()), &[])
                        .build(),
                )
                .await
                .expect("append");
            }
            logs.push(log);
        }
        let mut peak = 0;
        // Every log read through from offset 0, twice (the second pass after eviction).
        for pass in 0..2 {
            for (l, log) in logs.iter().enumerate() {
                let mut offset = 0u64;
                while offset < BATCHES as u64 {
                    let out = log.read(offset, 20 << 10).await.expect("read");
                    for (_, b) in out.batches() {
                        let records = batch::decode_records(b).expect("records");
                        for r in records {
                            let want = format!("log {l} batch {} {}", r.offset, "x".repeat(900));
                            assert_eq!(
                                r.value.as_deref(),
                                Some(want.as_bytes()),
                                "pass {pass} log {l} offset {}",
                                r.offset
                            );
                            offset = r.offset as u64 + 1;
                        }
                    }
                    peak = peak.max(cache.stats().read_used_bytes);
                }
            }
        }
        let stats = cache.stats();
        assert_eq!(stats.read_capacity_bytes, BUDGET);
        assert!(
            peak <= BUDGET,
            "read chunks held {peak} bytes, over the core's budget of {BUDGET}"
        );
        assert!(
            peak > BUDGET / 2,
            "the reads went through the budget ({peak} bytes)"
        );
        for log in logs {
            log.close().await.expect("close");
        }
    });
}
