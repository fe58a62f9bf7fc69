//! Preallocation grows in steps: a partition that holds little reserves little disk.
//!
//! What broke: every new or reopened segment fallocated `preallocate_bytes` (64 MiB) at
//! once, so 10,000 partitions with one message each reserved 640 GiB of disk (ENOSPC long
//! before the data was anywhere near that). Now a segment reserves one write chunk and grows
//! by doubling steps of at least 8 MiB as appends need it.

mod common;

use std::os::unix::fs::MetadataExt;

use weir_storage::batch::RecordBatchBuilder;
use weir_storage::{Log, LogConfig};

fn allocated(path: &std::path::Path) -> u64 {
    std::fs::metadata(path.join(format!("{:020}.log", 0)))
        .expect("stat")
        .blocks()
        * 512
}

#[test]
fn a_small_log_reserves_one_chunk_and_a_busy_one_grows() {
    let dir = common::tempdir();
    let path = dir.path().join("p");
    common::run(dir.path(), move || async move {
        let cfg = LogConfig {
            segment_bytes: 1 << 30,
            ..LogConfig::default()
        };
        let log = Log::open(&path, cfg.clone()).await.expect("open");
        log.append(
            RecordBatchBuilder::new(1)
                .record(None, Some(b"one"), &[])
                .build(),
        )
        .await
        .expect("append");
        log.close().await.expect("close");
        let log = Log::open(&path, cfg.clone()).await.expect("reopen");
        let small = allocated(&path);
        assert!(
            small <= 2 << 20,
            "a log with one message reserves {small} bytes"
        );
        // 24 MiB of appends: the reservation follows, and everything reads back.
        let value = vec![7u8; 1000];
        let mut n = 1u64;
        for _ in 0..(24 << 10) / 16 {
            let mut b = RecordBatchBuilder::new(2);
            for _ in 0..16 {
                b = b.record(None, Some(&value), &[]);
            }
            log.append(b.build()).await.expect("append");
            n += 16;
        }
        assert_eq!(log.watermarks().high_watermark, n);
        let big = allocated(&path);
        assert!(big >= 24 << 20, "reservation {big} below the data");
        assert!(
            big <= 64 << 20,
            "reservation {big} far ahead of 24 MiB of data"
        );
        log.close().await.expect("close");
        let log = Log::open(&path, cfg).await.expect("reopen");
        assert_eq!(log.watermarks().high_watermark, n);
        log.close().await.expect("close");
    });
}
