//! The leader-epoch list (`leader_epochs`, storage/DESIGN.md) on arbitrary bytes: a log whose
//! batches carry leader epochs 2, 5 and 9 is written on a simulated disk and closed, then its
//! `leader_epochs` file is replaced by the input and the log reopened — after a clean close
//! or, with mode bit 1, after a crash (the clean-shutdown marker removed). Opening must not
//! panic; the list it shows must have increasing epochs above 0 and non-decreasing start
//! offsets below the log end; `end_offset_for_epoch` must answer every epoch without
//! panicking, never with a larger epoch than asked nor an offset past the log end; the log
//! must take an append in its latest epoch and reopen cleanly.
//!
//! Input: a mode byte, then the file bytes. Mode bit 0: repair the magic (`WEIREPC1`) and the
//! trailing CRC-32C, so the fuzzer gets past the checksum into the parser.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use weir_storage::batch::RecordBatchBuilder;
use weir_storage::io::SimDisk;
use weir_storage::{BatchCache, Log, LogConfig};

fn config() -> LogConfig {
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
}

fn batch(i: u8) -> bytes::Bytes {
    RecordBatchBuilder::new(1)
        .record(Some(&[i]), Some(&[i; 300]), &[])
        .build()
}

fuzz_target!(|data: &[u8]| {
    let (mode, rest) = weir_fuzz::split_mode(data);
    let mut file = rest.to_vec();
    if mode & 1 != 0 && file.len() >= 16 {
        file[..8].copy_from_slice(b"WEIREPC1");
        let n = file.len() - 4;
        let crc = crc32c::crc32c(&file[..n]);
        file[n..].copy_from_slice(&crc.to_be_bytes());
    }
    let crash = mode & 2 != 0;
    weir_fuzz::run(async move {
        let disk = SimDisk::new();
        let vfs = disk.vfs();
        let dir = Path::new("/fuzz/e0");
        let cfg = config();
        let log = Log::open_in(vfs.clone(), dir, cfg.clone(), BatchCache::new(1 << 20))
            .await
            .expect("open");
        for (epoch, n) in [(2, 10u8), (5, 40), (9, 20)] {
            log.set_leader_epoch(epoch).expect("epoch");
            for i in 0..n {
                log.append(batch(i)).await.expect("append");
            }
        }
        log.close().await.expect("close");
        weir_fuzz::write_file(&vfs, &dir.join("leader_epochs"), &file).await;
        if crash {
            vfs.remove(&dir.join("clean_shutdown"))
                .await
                .expect("remove marker");
        }
        let Ok(log) = Log::open_in(vfs.clone(), dir, cfg.clone(), BatchCache::new(1 << 20)).await
        else {
            return;
        };
        let end = log.watermarks().log_end_offset;
        let epochs = log.leader_epochs();
        for (i, &(epoch, start)) in epochs.iter().enumerate() {
            assert!(epoch > 0, "epoch {epoch} listed");
            assert!(
                start < end,
                "epoch {epoch} starts at {start}, past the end {end}"
            );
            if i > 0 {
                let (pe, ps) = epochs[i - 1];
                assert!(pe < epoch && ps <= start, "list out of order: {epochs:?}");
            }
        }
        for asked in [-1, 0, 1, 2, 3, 5, 8, 9, 10, i32::MAX, i32::MIN] {
            if let Some((epoch, offset)) = log.end_offset_for_epoch(asked) {
                assert!(epoch <= asked, "asked {asked}, got epoch {epoch}");
                assert!(
                    offset <= end,
                    "asked {asked}, got offset {offset} past {end}"
                );
            }
        }
        let latest = epochs.last().map_or(0, |e| e.0);
        log.set_leader_epoch(latest).expect("the latest epoch");
        let info = log.append(batch(7)).await.expect("append after reopen");
        assert_eq!(info.base_offset, end);
        log.close().await.expect("close after reopen");
        Log::open_in(vfs, dir, cfg, BatchCache::new(1 << 20))
            .await
            .expect("clean reopen of a log weir itself closed");
    });
});
