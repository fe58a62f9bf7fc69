//! A segment never grows past what its index can address (`SEGMENT_BYTES_MAX`, i32::MAX as
//! in Kafka), whatever `segment.bytes` says, and recovery of a segment file larger than that
//! cannot panic.
//!
//! What broke: `segment.bytes` was used as given (a client could set it above 4 GiB), the
//! roll rule only looked at it, and the offset index stored `position as u32`: appends past
//! 4 GiB wrapped the index positions (a panic in `OffsetIndex::push`, or silently wrong
//! reads after the next reopen). A clean-shutdown index describing an oversized file was
//! trusted as is.

mod common;

use std::path::Path;

use weir_storage::batch::RecordBatchBuilder;
use weir_storage::config::SEGMENT_BYTES_MAX;
use weir_storage::{Log, LogConfig};

fn batch(value: &[u8]) -> bytes::Bytes {
    RecordBatchBuilder::new(1_000)
        .record(None, Some(value), &[])
        .build()
}

fn huge_config() -> LogConfig {
    LogConfig {
        segment_bytes: u64::MAX,
        index_interval_bytes: 1,
        ..common::small_config()
    }
}

/// Grows the (only) segment file to `size` with a hole and rewrites both indexes' headers
/// so that they describe it: what a clean shutdown of an oversized segment leaves.
fn grow_segment_and_indexes(dir: &Path, size: u64) {
    let log = dir.join(format!("{:020}.log", 0));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .expect("open .log")
        .set_len(size)
        .expect("set_len");
    for ext in ["index", "timeindex"] {
        let p = log.with_extension(ext);
        let mut b = std::fs::read(&p).expect("read index");
        b[16..24].copy_from_slice(&size.to_be_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&b[..44]), &b[48..]);
        b[44..48].copy_from_slice(&crc.to_be_bytes());
        std::fs::write(&p, &b).expect("write index");
    }
}

async fn fill_and_close(path: &Path) {
    let log = Log::open(path, huge_config()).await.expect("open");
    for i in 0..3u8 {
        log.append(batch(&[i; 100])).await.expect("append");
    }
    log.close().await.expect("close");
}

async fn read_all(log: &Log) -> Vec<u8> {
    let mut values = Vec::new();
    let mut offset = 0;
    while offset < log.watermarks().high_watermark {
        // One batch per read: the grown test segment is a hole after its last batch.
        let out = log.read(offset, 1).await.expect("read");
        for (h, b) in out.batches() {
            let records = weir_storage::batch::decode_records(b).expect("decode");
            for r in records {
                values.push(r.value.as_ref().expect("value")[0]);
            }
            offset = h.base_offset.get() as u64 + h.last_offset_delta.get() as u64 + 1;
        }
    }
    values
}

#[test]
fn a_segment_near_the_limit_rolls_even_with_a_huge_segment_bytes() {
    let dir = common::tempdir();
    let path = dir.path().join("p");
    common::run(dir.path(), move || async move {
        fill_and_close(&path).await;
        // The active segment is trusted (clean shutdown) and 64 bytes short of the limit.
        grow_segment_and_indexes(&path, SEGMENT_BYTES_MAX - 64);
        let log = Log::open(&path, huge_config()).await.expect("reopen");
        assert_eq!(log.watermarks().high_watermark, 3);
        let info = log.append(batch(&[7; 100])).await.expect("append");
        assert_eq!(info.base_offset, 3);
        assert_eq!(
            log.size().0,
            2,
            "the batch would cross the limit: the log must roll first"
        );
        assert_eq!(read_all(&log).await, vec![0, 1, 2, 7]);
        log.close().await.expect("close");
        let log = Log::open(&path, huge_config()).await.expect("reopen");
        assert_eq!(read_all(&log).await, vec![0, 1, 2, 7]);
        log.close().await.expect("close");
    });
}

#[test]
fn recovery_of_a_segment_past_4_gib_cuts_it_instead_of_panicking() {
    let dir = common::tempdir();
    let path = dir.path().join("p");
    common::run(dir.path(), move || async move {
        fill_and_close(&path).await;
        grow_segment_and_indexes(&path, (4 << 30) + 4096);
        let log = Log::open(&path, huge_config()).await.expect("reopen");
        assert_eq!(log.watermarks().high_watermark, 3);
        for i in 3..6u8 {
            log.append(batch(&[i; 100])).await.expect("append");
        }
        assert_eq!(read_all(&log).await, vec![0, 1, 2, 3, 4, 5]);
        log.close().await.expect("close");
        let file = path.join(format!("{:020}.log", 0));
        let len = std::fs::metadata(&file).expect("stat").len();
        assert!(len <= SEGMENT_BYTES_MAX, "segment is {len} bytes");
        let log = Log::open(&path, huge_config()).await.expect("reopen");
        assert_eq!(read_all(&log).await, vec![0, 1, 2, 3, 4, 5]);
        log.close().await.expect("close");
    });
}
