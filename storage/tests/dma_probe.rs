//! Regression: a `Log` opened on a fresh executor thread, without the embedder priming
//! anything, must be readable through direct I/O.
//!
//! glommio 0.9 probes a device for polled I/O (IOPOLL) at the first `dma_open` of a file on
//! it, per thread, by reading the file's first block. When that file is empty the read
//! returns at once without reaching the device, glommio concludes the device supports polled
//! I/O, and every later direct read on the device fails with EOPNOTSUPP
//! (DataDog/glommio#605). A new log's first DMA open is its empty first segment, so until
//! the engine primed the probe itself, every embedder had to call
//! `weir_storage::io::prime_dma_probe` on each executor thread first, and one that forgot
//! got reads failing much later. This test does not call it: it opens a brand-new log in an
//! empty directory on the real disk, appends, and reads back with the batch cache disabled
//! (so the read is a direct read of the segment), then again after a reopen.

mod common;

use weir_storage::batch::{decode_records, RecordBatchBuilder};
use weir_storage::{BatchCache, Log};

#[test]
fn a_new_log_is_readable_on_a_fresh_thread_without_priming() {
    let dir = common::tempdir();
    let path = dir.path().join("fresh-0");
    // A fresh executor thread: glommio's per-device probe results are thread-local.
    glommio::LocalExecutorBuilder::default()
        .io_memory(1 << 20)
        .spawn(move || async move {
            // No batch cache: reads go to the segment file with direct I/O.
            let log = Log::open_with_cache(&path, common::small_config(), BatchCache::new(0))
                .await
                .expect("open a new log");
            let batch = RecordBatchBuilder::new(1_000)
                .record(Some(b"k"), Some(b"read me back"), &[])
                .build();
            let appended = log.append(batch).await.expect("append");
            let values = |read: weir_storage::ReadOutcome| -> Vec<Vec<u8>> {
                read.batches()
                    .flat_map(|(_, b)| decode_records(b).expect("decode"))
                    .map(|r| r.value.expect("value").to_vec())
                    .collect()
            };
            let read = log
                .read(appended.base_offset, 1 << 20)
                .await
                .expect("direct read of a new log (EOPNOTSUPP: the IOPOLL probe misfired)");
            assert_eq!(values(read), vec![b"read me back".to_vec()]);
            log.close().await.expect("close");

            let log = Log::open_with_cache(&path, common::small_config(), BatchCache::new(0))
                .await
                .expect("reopen");
            let read = log
                .read(appended.base_offset, 1 << 20)
                .await
                .expect("direct read after reopen");
            assert_eq!(values(read), vec![b"read me back".to_vec()]);
            log.close().await.expect("close");
            assert_eq!(
                probe_files(&path),
                Vec::<String>::new(),
                "probe files left behind"
            );
        })
        .expect("spawn executor")
        .join()
        .expect("executor thread");
}

/// Calling `prime_dma_probe` first, as the broker does at start-up, stays valid: it keeps its
/// probe file in the directory it is given, and the engine does not prime again.
#[test]
fn priming_by_hand_still_works() {
    let dir = common::tempdir();
    let root = dir.path().to_owned();
    glommio::LocalExecutorBuilder::default()
        .io_memory(1 << 20)
        .spawn(move || async move {
            weir_storage::io::prime_dma_probe(&root)
                .await
                .expect("prime");
            let path = root.join("p0");
            let log = Log::open_with_cache(&path, common::small_config(), BatchCache::new(0))
                .await
                .expect("open");
            let batch = RecordBatchBuilder::new(1_000)
                .record(None, Some(b"v"), &[])
                .build();
            let appended = log.append(batch).await.expect("append");
            let read = log
                .read(appended.base_offset, 1 << 20)
                .await
                .expect("direct read");
            assert_eq!(read.batches().count(), 1);
            log.close().await.expect("close");
            let kept = std::fs::metadata(root.join(".weir-dma-probe")).expect("probe file");
            assert_eq!(kept.len(), 4096);
            assert_eq!(probe_files(&path), Vec::<String>::new(), "primed twice");
        })
        .expect("spawn executor")
        .join()
        .expect("executor thread");
}

/// Names of probe files in `dir`.
fn probe_files(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("list")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(".weir-dma-probe"))
        .collect()
}
