//! Recovery of arbitrary segment bytes: the bytes are written as the log's only segment
//! file (`00000000000000000000.log`) on a simulated disk ([`weir_storage::io::SimDisk`]),
//! then `Log::open_in` must not panic, and every batch `read` returns must validate, start
//! at or before the offset asked for, and come in increasing offset order. The log is then
//! appended to, closed cleanly, reopened (this time trusting the indexes it wrote) and read
//! again: it must hold the same offsets.
//!
//! Input: a mode byte, then the segment bytes. Mode bit 0: repair the batches (CRCs,
//! contiguous base offsets from 0, leader epochs 0 — recovery requires both, as the CRC does
//! not cover them) so recovery finds valid data followed by the rest as a
//! garbage tail, and must keep exactly those batches; bit 1: also repair lengths and magic; bit 2: a small configuration (tiny
//! segments, an index entry per 256 bytes, small read chunks); bit 3: a clean-shutdown
//! marker is present (recovery must still not trust a segment without valid indexes).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use weir_storage::batch::{self, RecordBatchBuilder};
use weir_storage::io::SimDisk;
use weir_storage::{BatchCache, Log, LogConfig};

fn config(small: bool) -> LogConfig {
    if small {
        LogConfig {
            segment_bytes: 16 << 10,
            index_interval_bytes: 256,
            write_chunk_bytes: 8 << 10,
            writes_in_flight: 2,
            preallocate_bytes: 16 << 10,
            read_chunk_bytes: 4 << 10,
            read_ahead_bytes: 8 << 10,
            segment_ms: None,
            retention_ms: None,
            ..LogConfig::default()
        }
    } else {
        // The defaults, except for preallocation: the simulated disk would zero 64 MiB.
        LogConfig {
            preallocate_bytes: 1 << 20,
            segment_ms: None,
            retention_ms: None,
            ..LogConfig::default()
        }
    }
}

/// Reads the whole log from its start; checks every batch. Returns (base, last) offsets of
/// the batches read, or None if a read returned an error (corruption found late is allowed
/// to be an error, never a panic or a bad batch).
async fn read_all(log: &Log, max_bytes: usize, known: &mut bool) -> Option<Vec<(u64, u64)>> {
    let wm = log.watermarks();
    assert!(
        wm.log_start_offset <= wm.high_watermark && wm.high_watermark <= wm.log_end_offset,
        "watermarks out of order: {wm:?}"
    );
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut offset = wm.log_start_offset;
    while offset < wm.high_watermark {
        let r = log.read(offset, max_bytes).await.ok()?;
        let mut any = false;
        for (h, bytes) in r.batches() {
            batch::validate_stored(bytes).expect("read returned a batch that does not validate");
            // Batches that would trip a known decode_records bug (README.md, "Findings").
            *known |= weir_fuzz::decode_records_masked(bytes).is_err();
            let base = h.base_offset.get() as u64;
            let last = h.last_offset() as u64;
            assert!(
                last >= offset,
                "batch {base}..={last} is before the offset {offset} asked for"
            );
            if let Some(&(_, prev_last)) = out.last() {
                assert!(base > prev_last, "batch {base} does not follow {prev_last}");
            }
            out.push((base, last));
            offset = last + 1;
            any = true;
        }
        assert_eq!(
            r.len(),
            r.batches().map(|(_, b)| b.len()).sum::<usize>(),
            "read returned bytes that are not whole batches"
        );
        assert!(
            any,
            "read at {offset} below the high watermark returned nothing"
        );
    }
    Some(out)
}

fuzz_target!(|data: &[u8]| {
    let (mode, rest) = weir_fuzz::split_mode(data);
    let mut bytes = rest.to_vec();
    // With repaired batches, recovery must keep every one of them (nothing valid is cut).
    let mut must_keep_to = None;
    if mode & 1 != 0 {
        let valid = weir_fuzz::repair_batches(&mut bytes, mode & 2 != 0, Some(0));
        must_keep_to = Some(weir_fuzz::offsets_claimed(&bytes[..valid]));
    }
    if weir_fuzz::may_wrap_relative_offsets(&bytes).is_err() {
        return; // a known bug (README.md, "Findings")
    }
    let small = mode & 4 != 0;
    let marker = mode & 8 != 0;
    weir_fuzz::run(async move {
        let disk = SimDisk::new();
        let vfs = disk.vfs();
        let dir = Path::new("/fuzz/p0");
        weir_fuzz::write_file(&vfs, &dir.join("00000000000000000000.log"), &bytes).await;
        if marker {
            // A well-formed clean-shutdown marker claiming some log end offset.
            let mut m = b"WEIRCLN1".to_vec();
            m.extend_from_slice(&(bytes.len() as u64).to_be_bytes());
            m.extend_from_slice(&crc32c::crc32c(&m).to_be_bytes());
            weir_fuzz::write_file(&vfs, &dir.join("clean_shutdown"), &m).await;
        }
        let cfg = config(small);
        let max_bytes = if small { 3000 } else { 1 << 20 };
        let Ok(log) = Log::open_in(vfs.clone(), dir, cfg.clone(), BatchCache::new(1 << 20)).await
        else {
            return;
        };
        if let Some(end) = must_keep_to {
            assert_eq!(
                log.watermarks().log_end_offset,
                end,
                "recovery did not keep exactly the valid batches"
            );
        }
        let mut known = false;
        let Some(before) = read_all(&log, max_bytes, &mut known).await else {
            return;
        };
        if !known || weir_fuzz::known_issues_on() {
            let _ = log.offset_for_timestamp(0).await;
            let _ = log.offset_for_timestamp(i64::MAX).await;
        }
        let end = log.watermarks().log_end_offset;

        // The recovered log accepts appends at its end and survives a clean reopen.
        let b = RecordBatchBuilder::new(1)
            .record(Some(b"k"), Some(b"appended after recovery"), &[])
            .build();
        let info = log.append(b).await.expect("append after recovery");
        assert_eq!(info.base_offset, end);
        log.close().await.expect("close after recovery");
        let log = Log::open_in(vfs, dir, cfg, BatchCache::new(1 << 20))
            .await
            .expect("clean reopen of a log weir itself closed");
        let after = read_all(&log, max_bytes, &mut known)
            .await
            .expect("reading a log weir itself closed");
        let mut expect = before;
        expect.push((end, end));
        assert_eq!(after, expect, "the clean reopen lost or invented batches");
        drop(log);
    });
});
