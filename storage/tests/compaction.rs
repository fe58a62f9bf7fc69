//! Compaction (`Log::clean`): a model-based proptest on real O_DIRECT files, a crash at every
//! step of a cleaning on the simulated disk, compressed batches in every codec, and an
//! idempotent producer's last batch kept.
//!
//! The model: a cleaning that ends at offset `E` (`CleanStats::cleaned_to`) keeps, below `E`,
//! exactly the latest record of each key among the records below `E`, and everything from `E`
//! on; tombstones that an earlier cleaning already kept go once `delete.retention.ms` passed.

mod common;

use std::collections::HashMap;
use std::path::Path;

use bytes::Bytes;
use proptest::prelude::*;
use weir_storage::batch::compression;
use weir_storage::batch::{decode_records, validate_stored, BatchHeader, RecordBatchBuilder};
use weir_storage::io::SimDisk;
use weir_storage::log::CleanOptions;
use weir_storage::{BatchCache, Log, LogConfig};

/// (offset, key, value; `None` is a tombstone)
type Rec = (u64, u8, Option<Vec<u8>>);
/// One record to append: key and value (`None`: a tombstone).
type Update = (u8, Option<Vec<u8>>);

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        cleanup_compact: true,
        cleanup_delete: false,
        min_cleanable_dirty_ratio: 0.0,
        delete_retention_ms: u64::MAX / 4,
        ..common::small_config()
    }
}

/// Appends one batch per element; returns the records with their offsets.
async fn append_all(log: &Log, batches: &[Vec<Update>], ts: i64) -> Vec<Rec> {
    let mut out = Vec::new();
    for recs in batches {
        let mut b = RecordBatchBuilder::new(ts);
        for (k, v) in recs {
            b = b.record(Some(&[*k]), v.as_deref(), &[]);
        }
        let info = log.append(b.build()).await.expect("append");
        for (i, (k, v)) in recs.iter().enumerate() {
            out.push((info.base_offset + i as u64, *k, v.clone()));
        }
    }
    out
}

/// A short form of records for assertion messages: (offset, key, tombstone, value length).
fn short(recs: &[Rec]) -> Vec<(u64, u8, bool, usize)> {
    recs.iter()
        .map(|r| (r.0, r.1, r.2.is_none(), r.2.as_ref().map_or(0, Vec::len)))
        .collect()
}

/// Every record the log serves, in order, each batch CRC-checked and offsets increasing.
async fn read_all(log: &Log) -> Vec<Rec> {
    let wm = log.watermarks();
    let mut off = wm.log_start_offset;
    let mut out: Vec<Rec> = Vec::new();
    while off < wm.high_watermark {
        let r = log.read(off, 1 << 20).await.expect("read");
        assert!(
            !r.is_empty(),
            "nothing served at {off} below {}",
            wm.high_watermark
        );
        for (h, bytes) in r.batches() {
            validate_stored(bytes).expect("a served batch passes its CRC");
            for rec in decode_records(bytes).expect("records decode") {
                let o = rec.offset as u64;
                if o < off {
                    continue;
                }
                assert!(out.last().is_none_or(|l| l.0 < o), "offsets go up");
                let key = rec.key.expect("keyed")[0];
                out.push((o, key, rec.value.map(|v| v.to_vec())));
            }
            off = h.last_offset() as u64 + 1;
        }
    }
    out
}

/// What the log must hold after a cleaning to `end` (and, if `drop_tombstones_below` is set,
/// a later one that dropped the tombstones below it).
fn expected(model: &[Rec], end: u64, drop_tombstones_below: Option<u64>) -> Vec<Rec> {
    let mut latest: HashMap<u8, u64> = HashMap::new();
    for r in model.iter().filter(|r| r.0 < end) {
        latest.insert(r.1, r.0);
    }
    model
        .iter()
        .filter(|r| r.0 >= end || latest[&r.1] == r.0)
        .filter(|r| !(r.2.is_none() && drop_tombstones_below.is_some_and(|b| r.0 < b)))
        .cloned()
        .collect()
}

fn batches_strategy() -> impl Strategy<Value = Vec<Vec<Update>>> {
    let record = (
        0u8..12,
        prop_oneof![
            1 => Just(None),
            6 => proptest::collection::vec(any::<u8>(), 0..300).prop_map(Some),
        ],
    );
    proptest::collection::vec(proptest::collection::vec(record, 1..6), 1..60)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Two cleanings with appends between, a tombstone cleaning, and reopening: the log reads
    /// as the model says at every step.
    #[test]
    fn compacted_log_reads_as_the_model(first in batches_strategy(), second in batches_strategy()) {
        let tmp = common::tempdir();
        let dir = tmp.path().join("log");
        common::run(tmp.path(), move || async move {
            let log = Log::open(&dir, config()).await.expect("open");
            let mut model = append_all(&log, &first, 1_000).await;
            let s1 = log.clean(10_000, &CleanOptions::default()).await.expect("clean");
            assert_eq!(short(&read_all(&log).await), short(&expected(&model, s1.cleaned_to, None)), "{s1:?}");
            model.extend(append_all(&log, &second, 2_000).await);
            let s2 = log.clean(10_000, &CleanOptions::default()).await.expect("clean");
            assert!(s2.cleaned_to >= s1.cleaned_to);
            let want = expected(&model, s2.cleaned_to, None);
            assert_eq!(short(&read_all(&log).await), short(&want), "{s2:?}");
            log.close().await.expect("close");

            // Reopened (indexes of the rewritten segments trusted): the same.
            let log = Log::open(&dir, config()).await.expect("reopen");
            assert_eq!(read_all(&log).await, want);
            // Tombstones the previous cleanings kept go once delete.retention.ms has passed.
            log.set_config(LogConfig { delete_retention_ms: 0, ..config() });
            let s3 = log.clean(10_000, &CleanOptions::default()).await.expect("clean");
            assert_eq!(s3.cleaned_to, s2.cleaned_to, "nothing new was appended");
            let want = expected(&model, s2.cleaned_to, Some(s2.cleaned_to));
            assert_eq!(read_all(&log).await, want);
            // An unclean reopen rescans what has no trusted index: still the same.
            drop(log);
            let log = Log::open(&dir, config()).await.expect("reopen after crash");
            assert_eq!(read_all(&log).await, want);
            log.close().await.expect("close");
        });
    }
}

/// The same content on a fresh simulated disk, closed: returns the disk and the model.
async fn build_disk(dir: &Path, cfg: LogConfig) -> (std::rc::Rc<SimDisk>, Vec<Rec>) {
    let disk = SimDisk::new();
    let log = Log::open_in(disk.vfs(), dir, cfg, BatchCache::new(1 << 20))
        .await
        .expect("open");
    let mut batches = Vec::new();
    for i in 0..120u32 {
        let key = (i * 7 % 13) as u8;
        let value = (i % 11 != 3).then(|| vec![i as u8; 40 + (i as usize * 13) % 200]);
        batches.push(vec![(key, value), ((key + 5) % 13, Some(vec![1; 30]))]);
    }
    let model = append_all(&log, &batches, 1_000).await;
    log.close().await.expect("close");
    (disk, model)
}

/// A cleaning stopped at each of its disk changes in turn (then kill -9, or power loss): the
/// reopened log reads exactly as before the cleaning or exactly as after it, never a mix; and
/// the same again when every segment is rescanned (indexes and checkpoint removed), which
/// needs each cleaned segment's `.compacted` marker to be there.
/// With `segment.bytes` large at cleaning time, all closed segments form one group.
#[test]
fn a_crash_at_any_step_of_a_cleaning_leaves_old_or_new() {
    let tmp = common::tempdir();
    common::run(tmp.path(), move || async move {
        let dir = Path::new("/sim/compact");
        let write_cfg = LogConfig {
            cleanup_compact: false,
            ..config()
        };
        let clean_cfg = LogConfig {
            segment_bytes: 1 << 20,
            ..config()
        };
        // The outcome of a cleaning that completes.
        let (disk, model) = build_disk(dir, write_cfg.clone()).await;
        let log = Log::open_in(disk.vfs(), dir, clean_cfg.clone(), BatchCache::new(1 << 20))
            .await
            .expect("open");
        let old = read_all(&log).await;
        assert_eq!(old, model);
        let stats = log
            .clean(10_000, &CleanOptions::default())
            .await
            .expect("clean");
        assert!(
            stats.segments_before > 3 && stats.segments_after == 1,
            "{stats:?}"
        );
        let new = read_all(&log).await;
        assert_eq!(new, expected(&model, stats.cleaned_to, None));
        assert!(new.len() < old.len());

        let mut completed = false;
        let mut steps = 0;
        for stop in 0..200u64 {
            for power_loss in [false, true] {
                let (disk, _) = build_disk(dir, write_cfg.clone()).await;
                let log =
                    Log::open_in(disk.vfs(), dir, clean_cfg.clone(), BatchCache::new(1 << 20))
                        .await
                        .expect("open");
                disk.stop_after(stop);
                let done = log.clean(10_000, &CleanOptions::default()).await.is_ok();
                completed |= done;
                drop(log);
                let after = if power_loss {
                    disk.crash(|_, _, _| weir_storage::io::CrashFate::Lost)
                } else {
                    disk.process_crash()
                };
                let log = Log::open_in(
                    after.vfs(),
                    dir,
                    clean_cfg.clone(),
                    BatchCache::new(1 << 20),
                )
                .await
                .expect("reopen after a crash in a cleaning");
                let got = read_all(&log).await;
                assert!(
                    got == old || got == new,
                    "stopped after {stop} changes (power loss: {power_loss}): a mix of old and new"
                );
                if done {
                    assert_eq!(got, new, "a completed cleaning survives");
                }
                assert!(
                    !after.paths().iter().any(|p| {
                        let s = p.to_string_lossy();
                        s.ends_with(".cleaned") || s.ends_with(".swap")
                    }),
                    "open leaves no cleaning files behind"
                );
                log.close().await.expect("close");
                // Every segment rescanned, with only the compaction markers to allow the
                // cleaned segments' offset gaps (the cleaner checkpoint also allows them in
                // sealed segments below it): recovery cuts nothing.
                for p in after.paths() {
                    let s = p.to_string_lossy();
                    if s.ends_with("index") || s.ends_with("cleaner_checkpoint") {
                        after.vfs().remove(&p).await.expect("remove");
                    }
                }
                let log = Log::open_in(
                    after.vfs(),
                    dir,
                    clean_cfg.clone(),
                    BatchCache::new(1 << 20),
                )
                .await
                .expect("reopen with every segment rescanned");
                assert_eq!(
                    read_all(&log).await,
                    got,
                    "stopped after {stop} changes (power loss: {power_loss}): a rescan cut data"
                );
                log.close().await.expect("close");
            }
            steps = stop;
            if completed {
                break;
            }
        }
        assert!(completed, "the cleaning never completed");
        assert!(
            steps > 5,
            "a cleaning makes several changes, each crashed at: {steps}"
        );
    });
}

/// `batch` with its records section compressed with `codec`.
fn compressed(batch: Bytes, codec: u8) -> Bytes {
    let h = *BatchHeader::parse(&batch).expect("header");
    let body = compression::compress(codec, &batch[61..]).expect("compress");
    let attrs = h.attributes.get() | i16::from(codec);
    weir_storage::batch::records::rebuild_batch(&h, attrs, h.records_count.get(), &body)
}

/// Compressed batches, in every codec: compacted and recompressed in their codec; left whole
/// when they inflate past `inflated_max_bytes`.
#[test]
fn compressed_batches_are_compacted_in_their_codec() {
    let tmp = common::tempdir();
    let dir = tmp.path().to_owned();
    common::run(tmp.path(), move || async move {
        async fn fill(log: &Log, codec: u8) {
            for round in 0..40u8 {
                let mut b = RecordBatchBuilder::new(1_000);
                for k in 0..4u8 {
                    b = b.record(Some(&[k]), Some(&[round; 100]), &[]);
                }
                log.append(compressed(b.build(), codec))
                    .await
                    .expect("append");
            }
        }
        let plain = Log::open(dir.join("over-the-limit"), config())
            .await
            .expect("open");
        fill(&plain, 4).await;
        let before = plain.size().1;
        plain.set_config(LogConfig {
            inflated_max_bytes: 100,
            ..config()
        });
        let s = plain
            .clean(10_000, &CleanOptions::default())
            .await
            .expect("clean");
        assert!(
            s.batches_kept_compressed > 0 && s.records_removed == 0,
            "{s:?}"
        );
        assert_eq!(plain.size().1, before, "nothing it cannot read is dropped");
        plain.close().await.expect("close");

        for codec in 1..=4u8 {
            let log = Log::open(dir.join(format!("codec-{codec}")), config())
                .await
                .expect("open");
            fill(&log, codec).await;
            let before = log.size().1;
            let s = log
                .clean(10_000, &CleanOptions::default())
                .await
                .expect("clean");
            assert!(s.records_removed > 0, "codec {codec}: {s:?}");
            assert!(log.size().1 < before);
            // What is served decompresses (with the same codec) to the latest value per key.
            let mut latest: HashMap<u8, u8> = HashMap::new();
            let mut served = Vec::new();
            let mut off = 0;
            while off < log.watermarks().high_watermark {
                let r = log.read(off, 1 << 20).await.expect("read");
                for (h, bytes) in r.batches() {
                    served.push(Bytes::copy_from_slice(bytes));
                    off = h.last_offset() as u64 + 1;
                }
            }
            for bytes in &served {
                let h = *BatchHeader::parse(bytes).expect("header");
                if h.records_count.get() == 0 {
                    continue; // a group's last batch, emptied: stored uncompressed
                }
                assert_eq!(h.compression(), codec, "recompressed with its codec");
                validate_stored(bytes).expect("CRC");
                let body = compression::inflate(codec, &bytes[61..], 1 << 20).expect("inflate");
                let mut plain = weir_storage::batch::records::rebuild_batch(
                    &h,
                    h.attributes.get() & !7,
                    h.records_count.get(),
                    &body,
                )
                .to_vec();
                plain[..8].copy_from_slice(&h.base_offset.get().to_be_bytes());
                for rec in decode_records(&plain).unwrap_or_default() {
                    latest.insert(rec.key.expect("key")[0], rec.value.expect("value")[0]);
                }
            }
            assert_eq!(latest.len(), 4, "codec {codec}");
            assert!(
                latest.values().all(|&v| v == 39),
                "codec {codec}: {latest:?}"
            );
            log.close().await.expect("close");
        }
    });
}

/// An idempotent producer's last batch survives (emptied) when all its records are
/// superseded, so that its sequence goes on after a restart.
#[test]
fn a_producers_last_batch_stays_as_an_empty_batch() {
    let tmp = common::tempdir();
    let dir = tmp.path().join("log");
    common::run(tmp.path(), move || async move {
        let log = Log::open(&dir, config()).await.expect("open");
        let b = RecordBatchBuilder::new(1_000)
            .producer(77, 0, 0)
            .record(Some(b"k"), Some(&[1; 500]), &[])
            .build();
        let p = log.append(b).await.expect("append");
        for i in 0..20u8 {
            let b = RecordBatchBuilder::new(1_000)
                .record(Some(b"k"), Some(&[i; 500]), &[])
                .build();
            log.append(b).await.expect("append");
        }
        let s = log
            .clean(10_000, &CleanOptions::default())
            .await
            .expect("clean");
        assert!(s.records_removed > 0);
        let r = log.read(0, 1 << 20).await.expect("read");
        let (h, _) = r
            .batches()
            .find(|(h, _)| h.producer_id.get() == 77)
            .expect("the producer's batch is kept");
        assert_eq!(h.records_count.get(), 0);
        assert_eq!(h.base_offset.get() as u64, p.base_offset);
        log.close().await.expect("close");
        let log = Log::open(&dir, config()).await.expect("reopen");
        let next = RecordBatchBuilder::new(2_000)
            .producer(77, 0, 1)
            .record(Some(b"k"), Some(b"v"), &[])
            .build();
        log.append(next)
            .await
            .expect("the producer's next sequence is accepted");
        let gap = RecordBatchBuilder::new(2_000)
            .producer(77, 0, 5)
            .record(Some(b"k"), Some(b"v"), &[])
            .build();
        assert!(
            log.append(gap).await.is_err(),
            "a sequence gap is still refused"
        );
        log.close().await.expect("close");
    });
}

/// (base offset, last offset, leader epoch, records) of every batch the log serves.
async fn batch_shapes(log: &Log) -> Vec<(i64, i64, i32, i32)> {
    let mut out = Vec::new();
    let mut at = log.watermarks().log_start_offset;
    while at < log.watermarks().high_watermark {
        let r = log.read(at, 1 << 20).await.expect("read");
        assert!(!r.is_empty(), "nothing at {at}");
        for (h, _) in r.batches() {
            out.push((
                h.base_offset.get(),
                h.last_offset(),
                h.partition_leader_epoch.get(),
                h.records_count.get(),
            ));
            at = h.last_offset() as u64 + 1;
        }
    }
    out
}

/// With `keep_every_batch` (a replicated log: each batch is a Raft entry) a cleaning empties
/// superseded batches but drops none: every batch spans the same offsets afterwards, with the
/// same leader epoch; only the latest record of the key is left. Without it the same cleaning
/// drops them.
#[test]
fn keep_every_batch_keeps_each_batchs_offsets() {
    for keep in [true, false] {
        let tmp = common::tempdir();
        let dir = tmp.path().join("log");
        common::run(tmp.path(), move || async move {
            let cfg = LogConfig {
                keep_every_batch: keep,
                ..config()
            };
            let log = Log::open(&dir, cfg).await.expect("open");
            for i in 0..20u8 {
                let mut b = RecordBatchBuilder::new(1_000)
                    .record(Some(b"k"), Some(&[i; 300]), &[])
                    .record(Some(b"k"), Some(&[i; 300]), &[])
                    .build()
                    .to_vec();
                weir_storage::batch::assign_offset(&mut b, 2 * i64::from(i), 7);
                log.append_assigned(Bytes::from(b)).await.expect("append");
            }
            let before = batch_shapes(&log).await;
            let s = log
                .clean(10_000, &CleanOptions::default())
                .await
                .expect("clean");
            assert!(s.records_removed > 0);
            let after = batch_shapes(&log).await;
            let shape =
                |v: &[(i64, i64, i32, i32)]| v.iter().map(|x| (x.0, x.1, x.2)).collect::<Vec<_>>();
            if keep {
                assert_eq!(shape(&after), shape(&before), "every batch kept in place");
                assert!(after.iter().any(|x| x.3 == 0), "emptied batches: {after:?}");
            } else {
                assert!(after.len() < before.len(), "batches dropped: {after:?}");
            }
            log.close().await.expect("close");
        });
    }
}

/// `io_bytes_per_second` paces a cleaning: it is never faster than the cap allows for the bytes
/// it read and wrote (each byte of the dirty segments is read twice, for the key map and the
/// rewrite), at 2 MB/s about a second for this 1 MB log; without the cap the same cleaning
/// never sleeps. Load-independent: load can only make a cleaning slower (it once failed
/// under a load average of 4 on 2 CPUs when it compared the capped and uncapped wall-clock
/// times, which a slow uncapped run can invert).
#[test]
fn the_io_cap_paces_a_cleaning() {
    let tmp = common::tempdir();
    let dir = tmp.path().to_owned();
    common::run(tmp.path(), move || async move {
        for cap in [None, Some(2_000_000u64)] {
            let log = Log::open(dir.join(format!("{cap:?}")), config())
                .await
                .expect("open");
            for _ in 0..100 {
                let mut b = RecordBatchBuilder::new(1_000);
                for k in 0..10u8 {
                    b = b.record(Some(&[k]), Some(&[7; 1000]), &[]);
                }
                log.append(b.build()).await.expect("append");
            }
            let size = log.size().1;
            assert!(size > 1_000_000, "{size}");
            let t = std::time::Instant::now();
            let options = CleanOptions {
                io_bytes_per_second: cap,
            };
            let s = log.clean(10_000, &options).await.expect("clean");
            let took = t.elapsed();
            assert!(s.records_removed > 900, "{s:?}");
            // The cap is counted on the real I/O: both reads of every cleaned byte, and the
            // writes.
            assert!(s.io_bytes >= 2 * s.bytes_before + s.bytes_after, "{s:?}");
            match cap {
                None => assert_eq!(s.io_sleeps, 0, "an uncapped cleaning is not paced"),
                Some(rate) => {
                    // The throttle sleeps whenever it is more than 1 ms ahead of the rate.
                    let floor = std::time::Duration::from_secs_f64(s.io_bytes as f64 / rate as f64)
                        .saturating_sub(std::time::Duration::from_millis(1));
                    assert!(
                        took >= floor,
                        "capped at {rate} B/s: {} bytes in {took:?}, under {floor:?}",
                        s.io_bytes
                    );
                    assert!(floor >= std::time::Duration::from_millis(900), "{s:?}");
                }
            }
            log.close().await.expect("close");
        }
    });
}
