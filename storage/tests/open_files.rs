//! A core keeps at most `set_open_file_limit` segment files open (an LRU of descriptors), and
//! a file the limit closed is opened again by its path only while that path still names it.
//!
//! What broke: every segment of every partition held a descriptor for its whole life, so one
//! CreateTopics of 2,000 partitions took 2,000 descriptors and 100,000 partitions would have
//! passed any open-file limit. With an LRU, reopening by path is the new danger: a cleaned
//! segment is renamed over the old one's name and a deleted topic's directory can be taken by
//! a new one, so a handle that reopened blindly would read another file's bytes as its own.
//! These tests run on the real disk (ext4, O_DIRECT) with limits of 1 to 3 files.

mod common;

use std::collections::HashMap;
use std::path::Path;

use weir_storage::batch::{decode_records, validate_stored, RecordBatchBuilder};
use weir_storage::io::{open_file_stats, set_open_file_limit, Vfs, BLOCK};
use weir_storage::log::CleanOptions;
use weir_storage::{BatchCache, Log, LogConfig};

/// Descriptors this process has open on files under `dir`.
fn fds_under(dir: &Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.starts_with(dir))
        .count()
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        ..common::small_config()
    }
}

async fn open(dir: &Path, cfg: LogConfig) -> Log {
    // A tiny cache: reads go to the files.
    Log::open_with_cache(dir, cfg, BatchCache::new(64 << 10))
        .await
        .expect("open")
}

/// Every (offset, value) the log serves, each batch CRC-checked.
async fn values(log: &Log) -> Vec<(u64, Vec<u8>)> {
    let wm = log.watermarks();
    let mut off = wm.log_start_offset;
    let mut out = Vec::new();
    while off < wm.high_watermark {
        let r = log.read(off, 64 << 10).await.expect("read");
        assert!(
            !r.is_empty(),
            "nothing served at {off} below {}",
            wm.high_watermark
        );
        for (h, bytes) in r.batches() {
            validate_stored(bytes).expect("a served batch passes its CRC");
            for rec in decode_records(bytes).expect("records decode") {
                if rec.offset as u64 >= off {
                    out.push((rec.offset as u64, rec.value.expect("value").to_vec()));
                }
            }
            off = h.last_offset() as u64 + 1;
        }
    }
    out
}

#[test]
fn twelve_logs_share_three_descriptors_and_read_back_whole() {
    let tmp = common::tempdir();
    let root = tmp.path().to_owned();
    common::run(tmp.path(), move || async move {
        set_open_file_limit(3);
        let dirs: Vec<_> = (0..12).map(|i| root.join(format!("p-{i}"))).collect();
        let mut logs = Vec::new();
        for d in &dirs {
            logs.push(open(d, config()).await);
        }
        let mut model: Vec<Vec<(u64, Vec<u8>)>> = vec![Vec::new(); logs.len()];
        for round in 0..40u32 {
            for (i, log) in logs.iter().enumerate() {
                let v = format!("log {i} round {round} {}", "x".repeat(300)).into_bytes();
                let b = RecordBatchBuilder::new(1_000)
                    .record(None, Some(&v), &[])
                    .build();
                let info = log.append(b).await.expect("append");
                model[i].push((info.base_offset, v));
            }
        }
        for log in &logs {
            log.flush().await.expect("flush");
        }
        let segment_files = std::fs::read_dir(&dirs[0]).expect("dir").count();
        assert!(segment_files > 3, "each log rolled: {segment_files} files");
        for (log, want) in logs.iter().zip(&model) {
            assert_eq!(&values(log).await, want);
        }
        let open_now = fds_under(&root);
        let stats = open_file_stats();
        assert!(
            open_now <= 3,
            "{open_now} descriptors open under the logs with a limit of 3 ({stats:?})"
        );
        assert!(stats.reopened > 0 && stats.evicted > 0, "{stats:?}");
        for log in logs {
            log.close().await.expect("close");
        }
        // Reopened (recovery reads every log's last segment) under the same limit.
        for (d, want) in dirs.iter().zip(&model) {
            let log = open(d, config()).await;
            assert_eq!(&values(&log).await, want);
            log.close().await.expect("close");
        }
        assert!(fds_under(&root) <= 3);
    });
}

/// Compaction renames its output over the first cleaned segment's name while readers may
/// hold the old segment; with one descriptor for everything, every handle is closed and
/// reopened all the time.
#[test]
fn compaction_with_one_descriptor_reads_as_the_model() {
    let tmp = common::tempdir();
    let dir = tmp.path().join("log");
    common::run(tmp.path(), move || async move {
        set_open_file_limit(1);
        let cfg = LogConfig {
            segment_bytes: 2048,
            cleanup_compact: true,
            cleanup_delete: false,
            min_cleanable_dirty_ratio: 0.0,
            delete_retention_ms: u64::MAX / 4,
            ..common::small_config()
        };
        let log = open(&dir, cfg.clone()).await;
        let mut latest: HashMap<u8, (u64, Vec<u8>)> = HashMap::new();
        for i in 0..300u32 {
            let key = (i % 7) as u8;
            let v = format!("key {key} update {i} {}", "y".repeat(100)).into_bytes();
            let b = RecordBatchBuilder::new(1_000)
                .record(Some(&[key]), Some(&v), &[])
                .build();
            let info = log.append(b).await.expect("append");
            latest.insert(key, (info.base_offset, v));
        }
        // The old segments are read (their handles open and closed) before the cleaning.
        let before = values(&log).await;
        assert_eq!(before.len(), 300);
        let stats = log
            .clean(10_000, &CleanOptions::default())
            .await
            .expect("clean");
        let after = values(&log).await;
        // Below the cleaned end only each key's latest record (there) is left; above it all.
        let key_of = |v: &[u8]| v[4];
        let mut latest_below: HashMap<u8, u64> = HashMap::new();
        for (off, v) in before.iter().filter(|r| r.0 < stats.cleaned_to) {
            latest_below.insert(key_of(v), *off);
        }
        let want: Vec<_> = before
            .iter()
            .filter(|(off, v)| *off >= stats.cleaned_to || latest_below[&key_of(v)] == *off)
            .cloned()
            .collect();
        assert_eq!(after, want, "{stats:?}");
        for (off, v) in latest.values() {
            assert!(after.contains(&(*off, v.clone())), "latest at {off} lost");
        }
        assert!(
            after.len() < before.len(),
            "the cleaning removed nothing: {stats:?}"
        );
        log.close().await.expect("close");
        let log = open(&dir, cfg).await;
        assert_eq!(values(&log).await, after);
        log.close().await.expect("close");
        assert!(open_file_stats().reopened > 0);
    });
}

async fn write_block(vfs: &Vfs, path: &Path, fill: u8) -> weir_storage::io::IoFile {
    let f = vfs.open(path, true).await.expect("create");
    let mut buf = f.alloc(BLOCK as usize);
    buf.as_mut().fill(fill);
    f.write_at(buf, 0).await.expect("write");
    f
}

/// A handle the limit closed never opens a file that took its name; an open one keeps its
/// own (unlinked) file; a renamed one follows its file.
#[test]
fn a_closed_handle_never_opens_the_file_that_took_its_name() {
    let tmp = common::tempdir();
    let root = tmp.path().to_owned();
    common::run(tmp.path(), move || async move {
        set_open_file_limit(1);
        let vfs = Vfs::Real;
        let (a, b, c) = (root.join("a"), root.join("b"), root.join("c"));

        // Replaced while closed: gone, not the new bytes.
        let old = write_block(&vfs, &a, 1).await;
        let _other = write_block(&vfs, &b, 2).await; // closes `old` (limit 1)
        vfs.rename(&b, &a).await.expect("rename b over a");
        let r = old.read_at(0, 16).await;
        assert!(r.is_err(), "a closed handle read its replacement: {r:?}");

        // Replaced while open: still reads its own bytes, and is never closed by the limit.
        let kept = write_block(&vfs, &c, 3).await; // now the open one
        let newer = root.join("d");
        let _d = write_block(&vfs, &newer, 4).await; // closes `kept`...
        assert_eq!(&kept.read_at(0, 4).await.expect("reopen")[..], &[3; 4]); // ...reopened
        vfs.rename(&newer, &c).await.expect("rename d over c");
        let _e = write_block(&vfs, &root.join("e"), 5).await;
        assert_eq!(&kept.read_at(0, 4).await.expect("read")[..], &[3; 4]);

        // Renamed while closed: it follows its file.
        let moving = write_block(&vfs, &root.join("f"), 6).await;
        let _g = write_block(&vfs, &root.join("g"), 7).await; // closes `moving`
        vfs.rename(&root.join("f"), &root.join("h"))
            .await
            .expect("rename f to h");
        let _i = write_block(&vfs, &root.join("i"), 8).await;
        assert_eq!(&moving.read_at(0, 4).await.expect("read")[..], &[6; 4]);
        let _j = write_block(&vfs, &root.join("f"), 9).await; // a new file at the old name
        assert_eq!(&moving.read_at(0, 4).await.expect("read")[..], &[6; 4]);

        // A directory removed and made again (a topic deleted and created): the old handle
        // is gone, not reading the new partition's segment.
        let sub = root.join("topic-0");
        vfs.create_dir_all(&sub).await.expect("mkdir");
        let seg = write_block(&vfs, &sub.join("0.log"), 10).await;
        let _k = write_block(&vfs, &root.join("k"), 11).await; // closes `seg`
        vfs.remove_dir_all(&sub).await.expect("rm -r");
        vfs.create_dir_all(&sub).await.expect("mkdir again");
        let _l = write_block(&vfs, &sub.join("0.log"), 12).await;
        let _m = write_block(&vfs, &root.join("m"), 13).await;
        assert!(
            seg.read_at(0, 4).await.is_err(),
            "read a new topic's segment"
        );
    });
}
