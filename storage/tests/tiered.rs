//! The remote tier (`tier/`, `log/tiered.rs`) on real files, with a [`DirStore`] as the
//! object store (the broker's tests run the same against a real S3 server): uploads, local
//! retention that waits for them, reads from offset 0 across the local/remote boundary,
//! remote retention and DeleteRecords, orphans collected on attach, a corrupt object
//! refused, and a store that fails at every step of an upload and of a remote deletion
//! (the "crash" cases: the log is reopened after each) losing nothing and leaving nothing.

mod common;

use std::cell::Cell;
use std::ops::Range;
use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use weir_storage::batch::{self, decode_records, RecordBatchBuilder, TRANSACTIONAL_FLAG};
use weir_storage::log::RestoredState;
use weir_storage::tier::{DirStore, ObjectInfo, ObjectStore, RemoteSegment, StoreFuture, Upload};
use weir_storage::{AbortedTxn, Error, Log, LogConfig};

const PREFIX: &str = "t-0";

fn tiered_config() -> LogConfig {
    LogConfig {
        segment_bytes: 16 << 10,
        remote_storage: true,
        local_retention_bytes: Some(20 << 10),
        ..common::small_config()
    }
}

/// Appends `n` batches of one ~1 KiB record each, record `i` valued `i` (as text) + padding.
async fn fill(log: &Log, from: usize, n: usize, ts: i64) {
    for i in from..from + n {
        let mut v = format!("{i:08}").into_bytes();
        v.resize(1000, b'.');
        let b = RecordBatchBuilder::new(ts + i as i64)
            .record(None, Some(&v), &[])
            .build();
        log.append(b).await.expect("append");
    }
}

/// Appends `n` batches of one 33,000-byte record each (about 3 per 100 KiB; a 4 MiB remote
/// chunk ends inside one every time): record `i` starts with `i` as text, then `i % 251`.
async fn fill_large(log: &Log, n: usize) {
    for i in 0..n {
        let mut v = format!("{i:08}").into_bytes();
        v.resize(33_000, (i % 251) as u8);
        let b = RecordBatchBuilder::new(1_000)
            .record(None, Some(&v), &[])
            .build();
        log.append(b).await.expect("append");
    }
}

/// Opens the log at `path` with `config` and attaches `store` under [`PREFIX`].
async fn open_tiered(path: &Path, config: LogConfig, store: Rc<dyn ObjectStore>) -> Log {
    let log = Log::open(path, config).await.expect("open");
    log.attach_remote(store, PREFIX.into())
        .await
        .expect("attach");
    log
}

/// Every record from `from` to the high watermark, as (offset, value number).
async fn read_all(log: &Log, from: u64) -> Result<Vec<(u64, usize)>, Error> {
    let mut out = Vec::new();
    let mut next = from;
    let hw = log.watermarks().high_watermark;
    while next < hw {
        let r = log.read(next, 3000).await?;
        assert!(
            !r.is_empty(),
            "nothing read at {next} below the high watermark {hw}"
        );
        for (_, batch) in r.batches() {
            for rec in decode_records(batch).expect("records") {
                let v = rec.value.expect("value");
                let n: usize = std::str::from_utf8(&v[..8])
                    .expect("utf8")
                    .parse()
                    .expect("number");
                out.push((rec.offset as u64, n));
                next = rec.offset as u64 + 1;
            }
        }
    }
    Ok(out)
}

fn assert_complete(records: &[(u64, usize)], from: u64, to: u64) {
    let want: Vec<(u64, usize)> = (from..to).map(|o| (o, o as usize)).collect();
    assert_eq!(records.len(), want.len(), "records {from}..{to}");
    assert!(records == want.as_slice(), "every record once and in order");
}

async fn keys(store: &DirStore) -> Vec<String> {
    store
        .list(PREFIX)
        .await
        .expect("list")
        .into_iter()
        .map(|o| o.key)
        .collect()
}

/// The keys the log's manifest lists.
fn listed(log: &Log) -> Vec<String> {
    let mut k: Vec<String> = log
        .remote_segments()
        .iter()
        .flat_map(|s| RemoteSegment::OBJECTS.map(|e| s.key(PREFIX, e)))
        .collect();
    k.sort();
    k
}

#[test]
fn closed_segments_are_uploaded_and_read_back_from_offset_zero() {
    let dir = common::tempdir();
    let root = dir.path().to_path_buf();
    common::run(dir.path(), move || async move {
        let store = Rc::new(DirStore::new(root.join("bucket")));
        let path = root.join("t-0");
        let log = Log::open(&path, tiered_config()).await.expect("open");
        log.attach_remote(store.clone(), PREFIX.into())
            .await
            .expect("attach");
        fill(&log, 0, 200, 1_000).await;
        // Local retention waits for the uploads: nothing is deleted before them.
        assert_eq!(log.enforce_retention(10_000).await.expect("retention"), 0);
        assert_eq!(log.local_start_offset(), 0);
        let uploaded = log.tier_tick(10_000).await.expect("tick");
        let segments = log.size().0;
        assert_eq!(uploaded, segments - 1, "every closed segment uploaded");
        let end = log.latest_tiered_offset().expect("tiered") + 1;
        assert_eq!(keys(&store).await, listed(&log));
        let deleted = log.enforce_retention(10_000).await.expect("retention");
        assert!(deleted > 0);
        let local = log.local_start_offset();
        assert!(
            local > 0 && local <= end,
            "local start {local}, remote end {end}"
        );
        assert_eq!(
            log.watermarks().log_start_offset,
            0,
            "the log still starts at 0"
        );
        assert!(
            log.size().1 <= 40 << 10,
            "local bytes bounded: {:?}",
            log.size()
        );
        assert_complete(&read_all(&log, 0).await.expect("read"), 0, 200);
        // A read inside a remote segment starts at the batch holding the offset.
        assert_complete(&read_all(&log, 7).await.expect("read"), 7, 200);
        // Timestamps below the local start are found in the remote tier.
        assert_eq!(
            log.offset_for_timestamp(1_005).await.expect("ts"),
            Some((5, 1_005))
        );
        let stats = log.tier_stats().expect("stats");
        assert_eq!(
            (stats.uploaded_segments as usize, stats.lag_bytes),
            (uploaded, 0)
        );
        log.close().await.expect("close");

        // Reopened: the manifest brings the remote segments back (no store call needed); an
        // object nobody lists (a crash after an upload, before the manifest) is collected by
        // the first tick.
        store
            .put(
                &format!("{PREFIX}/00000000000000000099-00000000000000ff.log"),
                Bytes::from_static(b"x"),
            )
            .await
            .expect("put");
        let log = Log::open(&path, tiered_config()).await.expect("reopen");
        log.attach_remote(store.clone(), PREFIX.into())
            .await
            .expect("attach");
        assert_complete(&read_all(&log, 0).await.expect("read"), 0, 200);
        fill(&log, 200, 100, 1_000).await;
        log.tier_tick(10_000).await.expect("tick");
        assert_eq!(log.tier_stats().expect("stats").orphans_deleted, 1);
        assert_eq!(keys(&store).await, listed(&log));
        log.enforce_retention(10_000).await.expect("retention");
        assert_complete(&read_all(&log, 0).await.expect("read"), 0, 300);
        log.close().await.expect("close");
    });
}

#[test]
fn whole_log_retention_and_delete_records_remove_remote_segments() {
    let dir = common::tempdir();
    let root = dir.path().to_path_buf();
    common::run(dir.path(), move || async move {
        let store = Rc::new(DirStore::new(root.join("bucket")));
        let log = Log::open(root.join("t-0"), tiered_config())
            .await
            .expect("open");
        log.attach_remote(store.clone(), PREFIX.into())
            .await
            .expect("attach");
        fill(&log, 0, 300, 1_000).await;
        log.tier_tick(10_000).await.expect("tick");
        log.enforce_retention(10_000).await.expect("retention");
        let remote_before = log.remote_segments().len();
        // DeleteRecords inside the remote tier.
        log.set_log_start_offset(40).await.expect("delete records");
        assert_eq!(log.watermarks().log_start_offset, 40);
        assert!(matches!(
            log.read(39, 100).await,
            Err(Error::OffsetOutOfRange {
                log_start_offset: 40,
                ..
            })
        ));
        assert_complete(&read_all(&log, 40).await.expect("read"), 40, 300);
        assert!(
            log.remote_segments().len() < remote_before,
            "segments below 40 deleted"
        );
        assert_eq!(keys(&store).await, listed(&log));
        // retention.bytes over the whole log: remote segments go oldest first.
        log.set_config(LogConfig {
            retention_bytes: Some(100 << 10),
            ..tiered_config()
        });
        log.tier_tick(10_000).await.expect("tick");
        let start = log.watermarks().log_start_offset;
        let (_, local_bytes) = log.size();
        let remote_bytes: u64 = log.remote_segments().iter().map(|s| s.size).sum();
        assert!(start > 40, "start moved to {start}");
        // The local copy overlaps the remote tier: the whole log is at most both.
        assert!(
            remote_bytes < 100 << 10 && remote_bytes + local_bytes >= 100 << 10,
            "whole log {remote_bytes} remote + {local_bytes} local bytes"
        );
        assert_eq!(keys(&store).await, listed(&log));
        assert_complete(&read_all(&log, start).await.expect("read"), start, 300);
        log.close().await.expect("close");
    });
}

#[test]
fn a_corrupt_or_missing_remote_object_is_an_error_never_data() {
    let dir = common::tempdir();
    let root = dir.path().to_path_buf();
    common::run(dir.path(), move || async move {
        let store = Rc::new(DirStore::new(root.join("bucket")));
        let log = Log::open(root.join("t-0"), tiered_config())
            .await
            .expect("open");
        log.attach_remote(store.clone(), PREFIX.into())
            .await
            .expect("attach");
        fill(&log, 0, 200, 1_000).await;
        log.tier_tick(10_000).await.expect("tick");
        log.enforce_retention(10_000).await.expect("retention");
        let first = log.remote_segments()[0];
        let file = root.join("bucket").join(first.key(PREFIX, "log"));
        let mut bytes = std::fs::read(&file).expect("object");
        bytes[3000] ^= 0x55;
        std::fs::write(&file, &bytes).expect("corrupt it");
        let err = read_all(&log, 0).await.expect_err("corrupt bytes served");
        assert!(matches!(err, Error::Remote(_)), "{err}");
        std::fs::remove_file(&file).expect("lose it");
        assert!(matches!(log.read(0, 100).await, Err(Error::Remote(_))));
        // The other segments are still served.
        let second = log.remote_segments()[1];
        assert_complete(
            &read_all(&log, second.base_offset).await.expect("read"),
            second.base_offset,
            200,
        );
        log.close().await.expect("close");
    });
}

/// What a store operation does, for a [`GatedStore`]'s gate.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    /// A put, an upload's start, part or finish, a delete.
    Write,
    /// A ranged get, a listing.
    Read,
}

/// A [`DirStore`] that asks `gate` before each operation: an error fails it, nothing done.
struct GatedStore {
    inner: DirStore,
    gate: Rc<dyn Fn(Op) -> Result<(), Error>>,
}

impl ObjectStore for GatedStore {
    fn put(&self, key: &str, body: Bytes) -> StoreFuture<'_, ()> {
        let r = (self.gate)(Op::Write);
        let key = key.to_string();
        Box::pin(async move {
            r?;
            self.inner.put(&key, body).await
        })
    }
    fn upload(&self, key: &str) -> StoreFuture<'_, Box<dyn Upload>> {
        let r = (self.gate)(Op::Write);
        let key = key.to_string();
        Box::pin(async move {
            r?;
            let up = self.inner.upload(&key).await?;
            Ok(Box::new(GatedUpload {
                up,
                gate: self.gate.clone(),
            }) as Box<dyn Upload>)
        })
    }
    fn get_range(&self, key: &str, range: Range<u64>) -> StoreFuture<'_, Bytes> {
        let r = (self.gate)(Op::Read);
        let key = key.to_string();
        Box::pin(async move {
            r?;
            self.inner.get_range(&key, range).await
        })
    }
    fn delete(&self, key: &str) -> StoreFuture<'_, ()> {
        let r = (self.gate)(Op::Write);
        let key = key.to_string();
        Box::pin(async move {
            r?;
            self.inner.delete(&key).await
        })
    }
    fn list(&self, prefix: &str) -> StoreFuture<'_, Vec<ObjectInfo>> {
        let r = (self.gate)(Op::Read);
        let prefix = prefix.to_string();
        Box::pin(async move {
            r?;
            self.inner.list(&prefix).await
        })
    }
}

struct GatedUpload {
    up: Box<dyn Upload>,
    gate: Rc<dyn Fn(Op) -> Result<(), Error>>,
}

impl Upload for GatedUpload {
    fn write(&mut self, part: Bytes) -> StoreFuture<'_, ()> {
        let r = (self.gate)(Op::Write);
        Box::pin(async move {
            r?;
            self.up.write(part).await
        })
    }
    fn finish(self: Box<Self>) -> StoreFuture<'static, ()> {
        Box::pin(async move {
            (self.gate)(Op::Write)?;
            self.up.finish().await
        })
    }
    fn abort(self: Box<Self>) -> StoreFuture<'static, ()> {
        self.up.abort()
    }
}

/// A store that fails its `fail_at`-th write (counting puts, upload starts, parts and
/// finishes, and deletes) and every one after it, as a process killed there would; reads
/// go through. `ops` counts the writes.
fn failing_store(bucket: &Path, ops: Rc<Cell<usize>>, fail_at: usize) -> GatedStore {
    GatedStore {
        inner: DirStore::new(bucket),
        gate: Rc::new(move |op| {
            if op == Op::Read {
                return Ok(());
            }
            let n = ops.get() + 1;
            ops.set(n);
            if n >= fail_at {
                Err(Error::Remote(format!("killed at operation {n}")))
            } else {
                Ok(())
            }
        }),
    }
}

/// Uploads two segments, deletes one remotely, with the store failing at operation `fail_at`;
/// then reopens the log with a working store, as a restart after kill -9 there would.
async fn run_with_failure_at(root: &Path, fail_at: usize) -> usize {
    let bucket = root.join("bucket");
    let path = root.join("t-0");
    let ops = Rc::new(Cell::new(0));
    let failing = Rc::new(failing_store(&bucket, ops.clone(), fail_at));
    let log = Log::open(&path, tiered_config()).await.expect("open");
    log.attach_remote(failing, PREFIX.into())
        .await
        .expect("attach");
    fill(&log, 0, 60, 1_000).await;
    let failed = log.tier_tick(10_000).await.is_err();
    let _ = log.enforce_retention(10_000).await;
    if !failed {
        let _ = log.set_log_start_offset(20).await;
    }
    let start = log.watermarks().log_start_offset;
    drop(log); // no close: as a kill would leave it
    let store = Rc::new(DirStore::new(&bucket));
    let log = Log::open(&path, tiered_config()).await.expect("reopen");
    log.attach_remote(store.clone(), PREFIX.into())
        .await
        .expect("attach");
    let now = log.watermarks().log_start_offset;
    assert!(
        now <= start.max(20),
        "failing at operation {fail_at}: start {now} moved past {start}"
    );
    assert_complete(&read_all(&log, now).await.expect("read"), now, 60);
    log.tier_tick(10_000).await.expect("tick after the restart");
    let mut on_disk = keys(&store).await;
    on_disk.retain(|k| !k.contains(".part-"));
    assert_eq!(
        on_disk,
        listed(&log),
        "failing at operation {fail_at}: an orphan left"
    );
    log.enforce_retention(10_000)
        .await
        .expect("retention after the restart");
    assert_complete(&read_all(&log, now).await.expect("read"), now, 60);
    assert_eq!(keys(&store).await, listed(&log));
    log.close().await.expect("close");
    ops.get()
}

#[test]
fn a_failure_at_every_step_of_uploads_and_deletions_loses_nothing_and_leaves_nothing() {
    // First a run without failure, to count the operations.
    let total = {
        let dir = common::tempdir();
        let root = dir.path().to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel();
        common::run(dir.path(), move || async move {
            tx.send(run_with_failure_at(&root, usize::MAX).await)
                .expect("send");
        });
        rx.recv().expect("count")
    };
    assert!(total >= 8, "{total} store operations");
    for fail_at in 1..=total {
        let dir = common::tempdir();
        let root = dir.path().to_path_buf();
        common::run(dir.path(), move || async move {
            run_with_failure_at(&root, fail_at).await;
        });
    }
}

#[test]
fn batches_across_the_remote_read_chunks_are_read_whole() {
    // 12 MiB segments of ~33 KiB batches: batches straddle the 4 MiB ranged reads.
    let dir = common::tempdir();
    let root = dir.path().to_path_buf();
    common::run(dir.path(), move || async move {
        let store = Rc::new(DirStore::new(root.join("bucket")));
        let config = LogConfig {
            segment_bytes: 12 << 20,
            local_retention_bytes: Some(0),
            ..tiered_config()
        };
        let log = open_tiered(&root.join("t-0"), config, store.clone()).await;
        fill_large(&log, 450).await;
        assert_eq!(log.tier_tick(10_000).await.expect("tick"), 1);
        log.enforce_retention(10_000).await.expect("retention");
        let local = log.local_start_offset();
        assert!(
            local > 300,
            "the first segment is only remote: local start {local}"
        );
        // One batch per read: every straddling batch comes whole, CRC-checked.
        let mut next = 0;
        while next < local {
            let r = log.read(next, 1).await.expect("read");
            let (h, batch) = r.batches().next().expect("a batch");
            assert_eq!(h.base_offset.get() as u64, next);
            let recs = decode_records(batch).expect("records");
            let v = recs[0].value.as_ref().expect("value");
            assert_eq!(v.len(), 33_000);
            assert_eq!(&v[..8], format!("{next:08}").as_bytes());
            assert!(
                v[8..].iter().all(|&b| b == (next % 251) as u8),
                "batch {next} intact"
            );
            next += 1;
        }
        assert_complete(&read_all(&log, 0).await.expect("read"), 0, 450);
        log.close().await.expect("close");
    });
}

#[test]
fn delete_records_during_an_upload_loses_neither_change() {
    // DeleteRecords forgets remote segments while a tick is listing a new one: both change
    // the manifest across awaits. Started after 0, 1, 2, ... yields of the tick, so that it
    // lands at every step of the upload; after each run the log is reopened from its files.
    for k in 0..8usize {
        let dir = common::tempdir();
        let root = dir.path().to_path_buf();
        common::run(dir.path(), move || async move {
            let store = Rc::new(DirStore::new(root.join("bucket")));
            let path = root.join("t-0");
            let log = Rc::new(Log::open(&path, tiered_config()).await.expect("open"));
            log.attach_remote(store.clone(), PREFIX.into())
                .await
                .expect("attach");
            fill(&log, 0, 100, 1_000).await;
            log.tier_tick(10_000).await.expect("tick");
            log.enforce_retention(10_000).await.expect("retention");
            let cut = log.remote_segments()[1].next_offset;
            fill(&log, 100, 60, 1_000).await;
            let l2 = log.clone();
            let deleter = glommio::spawn_local(async move {
                for _ in 0..k {
                    glommio::yield_if_needed().await;
                    futures_lite::future::yield_now().await;
                }
                l2.set_log_start_offset(cut).await.expect("delete records");
            });
            log.tier_tick(10_000)
                .await
                .expect("tick during delete records");
            deleter.await;
            assert_eq!(log.watermarks().log_start_offset, cut, "run {k}");
            drop(log); // no close: the files are what the next open sees
            let log = Log::open(&path, tiered_config()).await.expect("reopen");
            log.attach_remote(store.clone(), PREFIX.into())
                .await
                .expect("attach");
            assert_eq!(
                log.watermarks().log_start_offset,
                cut,
                "run {k}: start after reopen"
            );
            assert_complete(&read_all(&log, cut).await.expect("read"), cut, 160);
            log.tier_tick(10_000).await.expect("tick after reopen");
            assert_eq!(keys(&store).await, listed(&log), "run {k}");
            log.close().await.expect("close");
        });
    }
}

#[test]
fn with_the_store_down_appends_are_refused_past_the_backlog_bound_and_resume_after() {
    let dir = common::tempdir();
    let root = dir.path().to_path_buf();
    common::run(dir.path(), move || async move {
        let down = Rc::new(Cell::new(false));
        // Every operation fails while `down`.
        let gate_down = down.clone();
        let store = Rc::new(GatedStore {
            inner: DirStore::new(root.join("bucket")),
            gate: Rc::new(move |_| match gate_down.get() {
                true => Err(Error::Remote("connection refused".into())),
                false => Ok(()),
            }),
        });
        let config = LogConfig {
            remote_backlog_max_bytes: Some(40 << 10),
            ..tiered_config()
        };
        let log = open_tiered(&root.join("t-0"), config, store).await;
        fill(&log, 0, 40, 1_000).await;
        log.tier_tick(10_000).await.expect("tick");
        let uploaded = log.tier_stats().expect("stats").remote_end;
        assert!(uploaded > 0);

        // The store goes down: appends go on (nothing has failed yet, then within the bound).
        down.set(true);
        fill(&log, 40, 30, 1_000).await;
        assert!(log.tier_tick(10_000).await.is_err(), "the store is down");
        fill(&log, 70, 10, 1_000).await;
        // Past the bound (closed segments waiting for upload): a producer's append is
        // refused, nothing written (the broker's own appends, markers, are not).
        let mut next = 80;
        let refused = loop {
            let mut v = format!("{next:08}").into_bytes();
            v.resize(1000, b'.');
            let b = RecordBatchBuilder::new(1_000 + next as i64)
                .record(None, Some(&v), &[])
                .build();
            match log.append_produced(b).await {
                Ok(_) => next += 1,
                Err(e) => break e,
            }
            assert!(next < 200, "appends never refused: {:?}", log.tier_stats());
        };
        let Error::UploadBacklog { pending, max } = refused else {
            panic!("refused with {refused}");
        };
        assert!(pending > max && max == 40 << 10, "{pending} > {max}");
        assert_eq!(log.watermarks().log_end_offset, next as u64);
        fill(&log, next, 1, 1_000).await;
        next += 1;
        let stats = log.tier_stats().expect("stats");
        assert_eq!(stats.remote_end, uploaded, "nothing uploaded while down");
        assert_eq!(stats.lag_bytes, pending);

        // Back: the next tick uploads, and appends are accepted again.
        down.set(false);
        log.tier_tick(10_000)
            .await
            .expect("tick with the store back");
        assert_eq!(log.tier_stats().expect("stats").lag_bytes, 0);
        fill(&log, next, 10, 1_000).await;
        let end = next as u64 + 10;
        assert_complete(&read_all(&log, 0).await.expect("read"), 0, end);
        log.close().await.expect("close");
    });
}

#[test]
fn deleting_a_log_deletes_every_object_under_its_prefix() {
    let dir = common::tempdir();
    let root = dir.path().to_path_buf();
    common::run(dir.path(), move || async move {
        let store = Rc::new(DirStore::new(root.join("bucket")));
        let log = open_tiered(&root.join("t-0"), tiered_config(), store.clone()).await;
        fill(&log, 0, 60, 1_000).await;
        log.tier_tick(10_000).await.expect("tick");
        assert!(!log.remote_segments().is_empty());
        // What an upload cut short leaves: an object no manifest lists.
        let orphan = format!("{PREFIX}/00000000000000000099-00000000000000ff.log");
        store
            .put(&orphan, Bytes::from_static(b"half"))
            .await
            .expect("put");
        // Another log's objects, under another prefix, stay.
        store
            .put("t-1/x.log", Bytes::from_static(b"other"))
            .await
            .expect("put");
        log.delete().await.expect("delete");
        assert_eq!(keys(&store).await, Vec::<String>::new());
        let rest: Vec<String> = store
            .list("t-1/")
            .await
            .expect("list")
            .into_iter()
            .map(|o| o.key)
            .collect();
        assert_eq!(rest, vec!["t-1/x.log".to_string()]);
    });
}

#[test]
fn the_largest_timestamp_is_found_in_the_remote_tier() {
    let dir = common::tempdir();
    let root = dir.path().to_path_buf();
    common::run(dir.path(), move || async move {
        let store = Rc::new(DirStore::new(root.join("bucket")));
        let log = open_tiered(&root.join("t-0"), tiered_config(), store).await;
        fill(&log, 0, 5, 1_000).await;
        // Record 5 carries the log's largest timestamp (twice: the earlier one is the answer).
        for _ in 0..2 {
            let mut v = format!("{:08}", log.watermarks().log_end_offset).into_bytes();
            v.resize(1000, b'.');
            let b = RecordBatchBuilder::new(9_000_000)
                .record(None, Some(&v), &[])
                .build();
            log.append(b).await.expect("append");
        }
        fill(&log, 7, 93, 1_000).await;
        assert_eq!(
            log.max_timestamp_offset().await.expect("max"),
            Some((5, 9_000_000))
        );
        log.tier_tick(10_000).await.expect("tick");
        log.enforce_retention(10_000).await.expect("retention");
        let local = log.local_start_offset();
        assert!(
            local > 6,
            "record 5 and 6 only in the store (local start {local})"
        );
        assert_eq!(
            log.max_timestamp_offset().await.expect("max"),
            Some((5, 9_000_000)),
            "ListOffsets -3 over the remote tier"
        );
        log.close().await.expect("close");
    });
}

/// Uploads `leader`'s next segments under `epoch` (at most `max`), listing each in every log
/// of `replicas` as a replicated log's replicas do when they apply the upload's entry.
/// Returns what was uploaded.
async fn lead_uploads(
    leader: &Log,
    epoch: u32,
    replicas: &[&Log],
    max: usize,
) -> Vec<weir_storage::tier::RemoteSegment> {
    let mut out = Vec::new();
    while out.len() < max {
        let Some(seg) = leader.upload_next_segment(epoch).await.expect("upload") else {
            break;
        };
        assert_eq!(
            seg.id >> 32,
            u64::from(epoch),
            "the upload id carries the epoch"
        );
        for r in replicas {
            assert!(
                r.list_remote_segment(seg).await.expect("list"),
                "{seg:?} not listed"
            );
        }
        out.push(seg);
    }
    out
}

#[test]
fn replicas_that_cut_segments_elsewhere_share_one_remote_tier_across_a_failover() {
    let dir = common::tempdir();
    let root = dir.path().to_path_buf();
    common::run(dir.path(), move || async move {
        let store = Rc::new(DirStore::new(root.join("bucket")));
        // Two replicas of one partition: the same batches at the same offsets, cut into
        // segments at different offsets (a follower rolls between the appends it is sent).
        let a = open_tiered(&root.join("a"), tiered_config(), store.clone()).await;
        let b_config = LogConfig {
            segment_bytes: 40 << 10,
            ..tiered_config()
        };
        let b = open_tiered(&root.join("b"), b_config, store.clone()).await;
        fill(&a, 0, 300, 1_000).await;
        fill(&b, 0, 300, 1_000).await;

        // Leader a (epoch 1) uploads three segments; both replicas list them.
        let first = lead_uploads(&a, 1, &[&a, &b], 3).await;
        assert_eq!(first.len(), 3);
        assert_eq!(listed(&a), listed(&b));
        let a_end = first[2].next_offset;
        assert!(
            !b.list_remote_segment(first[1]).await.expect("again"),
            "listed twice"
        );

        // a is deposed and uploads once more (epoch 1): never committed, never listed.
        let stray = a
            .upload_next_segment(1)
            .await
            .expect("upload")
            .expect("a segment");
        // b leads (epoch 2): collects what earlier epochs left unlisted, then uploads its own
        // segments from the one holding the remote end.
        assert_eq!(
            b.collect_remote_orphans(2).await.expect("collect"),
            RemoteSegment::OBJECTS.len(),
            "the stray upload's objects"
        );
        assert!(!keys(&store)
            .await
            .iter()
            .any(|k| k.contains(&format!("{:016x}", stray.id))));
        let second = lead_uploads(&b, 2, &[&a, &b], usize::MAX).await;
        assert!(
            second[0].base_offset < a_end && a_end < second[0].next_offset,
            "b's first upload begins inside what a uploaded: {:?} after {a_end}",
            second[0]
        );
        assert_eq!(listed(&a), listed(&b));
        let segs = b.remote_segments();
        for w in segs.windows(2) {
            assert!(
                w[1].base_offset <= w[0].next_offset && w[0].next_offset < w[1].next_offset,
                "a hole or a step back: {segs:?}"
            );
        }
        assert_eq!(segs[0].base_offset, 0);
        // What b's upload replaced is collected; a deposed leader collecting reaches only
        // epochs below its own: b's objects stay.
        b.collect_remote_orphans(2).await.expect("collect");
        assert_eq!(keys(&store).await, listed(&b));
        a.collect_remote_orphans(1).await.expect("collect");
        assert_eq!(keys(&store).await, listed(&b));

        // Each replica deletes locally what is listed; every record is read from offset 0.
        for log in [&a, &b] {
            log.enforce_retention(10_000).await.expect("retention");
            assert!(log.local_start_offset() > 0);
            assert_complete(&read_all(log, 0).await.expect("read"), 0, 300);
        }
        a.close().await.expect("close");
        b.close().await.expect("close");
    });
}

/// A [`DirStore`] that records the ranged GETs of segment data (`.log` objects) and can
/// refuse them (`down`).
struct RecordingStore {
    inner: DirStore,
    log_gets: Rc<std::cell::RefCell<Vec<(String, u64)>>>,
    down: Rc<Cell<bool>>,
}

impl ObjectStore for RecordingStore {
    fn put(&self, key: &str, body: Bytes) -> StoreFuture<'_, ()> {
        self.inner.put(key, body)
    }
    fn upload(&self, key: &str) -> StoreFuture<'_, Box<dyn Upload>> {
        self.inner.upload(key)
    }
    fn get_range(&self, key: &str, range: Range<u64>) -> StoreFuture<'_, Bytes> {
        if key.ends_with(".log") {
            if self.down.get() {
                let key = key.to_string();
                return Box::pin(async move { Err(Error::Remote(format!("{key}: store down"))) });
            }
            self.log_gets
                .borrow_mut()
                .push((key.to_string(), range.start));
        }
        self.inner.get_range(key, range)
    }
    fn delete(&self, key: &str) -> StoreFuture<'_, ()> {
        self.inner.delete(key)
    }
    fn list(&self, prefix: &str) -> StoreFuture<'_, Vec<ObjectInfo>> {
        self.inner.list(prefix)
    }
}

#[test]
fn a_catch_up_read_of_remote_segments_reads_ahead_and_gets_each_chunk_once() {
    // 12 MiB segments (three 4 MiB ranged GETs each), 8 MiB of read-ahead: two chunks.
    let dir = common::tempdir();
    let root = dir.path().to_path_buf();
    common::run(dir.path(), move || async move {
        let log_gets = Rc::new(std::cell::RefCell::new(Vec::new()));
        let down = Rc::new(Cell::new(false));
        let store = Rc::new(RecordingStore {
            inner: DirStore::new(root.join("bucket")),
            log_gets: log_gets.clone(),
            down: down.clone(),
        });
        let config = LogConfig {
            segment_bytes: 12 << 20,
            local_retention_bytes: Some(0),
            read_ahead_bytes: 8 << 20,
            ..tiered_config()
        };
        let log = open_tiered(&root.join("t-0"), config, store.clone()).await;
        fill_large(&log, 800).await;
        assert_eq!(log.tier_tick(10_000).await.expect("tick"), 2);
        log.enforce_retention(10_000).await.expect("retention");
        let segs = log.remote_segments();
        assert_eq!(segs.len(), 2);
        let local = log.local_start_offset();
        assert_eq!(local, segs[1].next_offset, "both segments are only remote");
        let chunk_starts = |s: &weir_storage::tier::RemoteSegment| -> Vec<(String, u64)> {
            (0..s.size.div_ceil(4 << 20))
                .map(|c| (s.key(PREFIX, "log"), c << 22))
                .collect()
        };
        // Waits until the store has been asked for `n` chunks (GETs run off the reactor).
        let asked_for = |n: usize| {
            let log_gets = log_gets.clone();
            async move {
                let start = std::time::Instant::now();
                while log_gets.borrow().len() < n && start.elapsed().as_secs() < 20 {
                    glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
                }
            }
        };

        // The store is down: the read fails, and the failure is not kept — once the store is
        // back the same read is served.
        down.set(true);
        assert!(log.read(0, 1).await.is_err(), "a read with the store down");
        down.set(false);
        let r = log.read(0, 1).await.expect("the store is back");
        assert_eq!(r.batches().next().expect("a batch").0.base_offset.get(), 0);
        asked_for(3).await;
        // One batch of chunk 0 read: chunks 1 and 2 were asked for before any reader
        // needed them.
        assert_eq!(*log_gets.borrow(), chunk_starts(&segs[0]));

        // Reading on to the first segment's last chunk reads ahead into the second segment.
        let mut next = 0;
        let last_chunk_start = (segs[0].size.div_ceil(4 << 20) - 1) << 22;
        let mut pos = 0u64;
        while pos < last_chunk_start {
            let r = log.read(next, 1).await.expect("read");
            let (h, batch) = r.batches().next().expect("a batch");
            next = h.last_offset() as u64 + 1;
            pos += batch.len() as u64;
        }
        asked_for(5).await;
        let mut want = chunk_starts(&segs[0]);
        want.extend(chunk_starts(&segs[1]).into_iter().take(2));
        assert_eq!(*log_gets.borrow(), want);

        // The whole catch-up: every record once and in order, every chunk fetched once.
        assert_complete(&read_all(&log, 0).await.expect("read"), 0, 800);
        let mut all = chunk_starts(&segs[0]);
        all.extend(chunk_starts(&segs[1]));
        assert_eq!(*log_gets.borrow(), all);
        log.close().await.expect("close");
    });
}

#[test]
fn aborted_transactions_travel_with_remote_segments_and_uploads_wait_for_open_ones() {
    let dir = common::tempdir();
    let root = dir.path().to_path_buf();
    common::run(dir.path(), move || async move {
        let store = Rc::new(DirStore::new(root.join("bucket")));
        let config = LogConfig {
            local_retention_bytes: Some(0),
            ..tiered_config()
        };
        let path = root.join("t-0");
        let log = open_tiered(&path, config.clone(), store.clone()).await;
        // Producer 7 opens a transaction at offset 0; 40 KiB of other records follow it.
        let mut txn = RecordBatchBuilder::new(1_000)
            .producer(7, 0, 0)
            .attributes(TRANSACTIONAL_FLAG);
        for _ in 0..3 {
            txn = txn.record(None, Some(&[b'a'; 300]), &[]);
        }
        log.append(txn.build()).await.expect("txn");
        fill(&log, 3, 40, 1_000).await;
        let local_segments = std::fs::read_dir(&path)
            .expect("dir")
            .filter(|e| e.as_ref().expect("entry").path().extension() == Some("log".as_ref()))
            .count();
        assert!(
            local_segments > 2,
            "closed segments to upload: {local_segments}"
        );
        // Nothing is uploaded while the transaction is open: a segment goes up only with
        // every aborted transaction it holds a record of known.
        assert_eq!(log.tier_tick(10_000).await.expect("tick"), 0);
        assert!(log.remote_segments().is_empty());
        let m = batch::marker_batch(7, 0, false, 0, 2_000);
        let abort_at = log.append(m).await.expect("abort").base_offset;
        let aborted = vec![AbortedTxn {
            producer_id: 7,
            first_offset: 0,
            last_offset: abort_at,
        }];
        fill(&log, abort_at as usize + 1, 40, 1_000).await;
        assert!(log.tier_tick(10_000).await.expect("tick") > 2);
        log.enforce_retention(10_000).await.expect("retention");
        assert!(
            log.local_start_offset() > abort_at,
            "the transaction and its marker are only remote"
        );
        assert_eq!(keys(&store).await, listed(&log));
        assert_eq!(
            log.aborted_transactions(0, 3).await.expect("aborted"),
            aborted
        );
        log.close().await.expect("close");

        // A log without its own list of them (a replica that installed a snapshot has none
        // below the snapshot point) still answers them, from the remote segments' .txnindex.
        std::fs::remove_file(path.join("producer_state")).expect("remove the producer state");
        let log = open_tiered(&path, config, store.clone()).await;
        assert!(log.local_start_offset() > abort_at);
        assert_eq!(
            log.aborted_transactions(0, 3).await.expect("aborted"),
            aborted
        );
        assert_eq!(
            log.aborted_transactions(2, abort_at + 1)
                .await
                .expect("aborted"),
            aborted
        );
        assert_eq!(
            log.aborted_transactions(abort_at + 1, abort_at + 5)
                .await
                .expect("aborted"),
            vec![],
            "none after the marker"
        );
        // A damaged .txnindex is an error, never an empty list.
        let seg = log.remote_segments()[0];
        log.close().await.expect("close");
        store
            .put(
                &seg.key(PREFIX, "txnindex"),
                Bytes::from_static(b"WTXN garbage"),
            )
            .await
            .expect("put");
        let log = open_tiered(&path, tiered_config(), store.clone()).await;
        assert!(log.aborted_transactions(0, 3).await.is_err());
        log.close().await.expect("close");
    });
}

/// Appends one batch of producer `pid` (epoch 0), records `seq` and `seq + 1`.
async fn append_idempotent(log: &Log, pid: i64, seq: i32) {
    let b = RecordBatchBuilder::new(1_000)
        .producer(pid, 0, seq)
        .record(None, Some(b"x"), &[])
        .record(None, Some(b"y"), &[])
        .build();
    log.append(b).await.expect("append");
}

/// (producer, epoch, last sequence, last offset) of each producer the log knows, by id.
fn producers(log: &Log) -> Vec<(i64, i16, i32, u64)> {
    let mut v: Vec<_> = log
        .active_producers()
        .iter()
        .map(|p| (p.producer_id, p.epoch, p.last_sequence, p.last_offset))
        .collect();
    v.sort();
    v
}

#[test]
fn a_follower_restarting_at_a_remote_segment_end_takes_its_producers_and_epochs() {
    let dir = common::tempdir();
    let root = dir.path().to_path_buf();
    common::run(dir.path(), move || async move {
        let store = Rc::new(DirStore::new(root.join("bucket")));
        let leader_path = root.join("a");
        let leader = open_tiered(&leader_path, tiered_config(), store.clone()).await;
        // Producer 7 writes in leader epoch 3, producer 9 in epoch 5; plain batches follow.
        leader.set_leader_epoch(3).expect("epoch");
        for seq in (0..20).step_by(2) {
            append_idempotent(&leader, 7, seq).await;
        }
        leader.set_leader_epoch(5).expect("epoch");
        let epoch_5_start = leader.watermarks().log_end_offset;
        for seq in (0..10).step_by(2) {
            append_idempotent(&leader, 9, seq).await;
        }
        fill(&leader, 30, 60, 1_000).await;
        assert!(leader.tier_tick(10_000).await.expect("tick") >= 3);
        let point = leader.remote_segments()[2].next_offset;
        assert!(point > epoch_5_start + 10, "{point}");
        let expected = producers(&leader);
        assert_eq!(expected.len(), 2);

        // A follower behind the leader's log start restarts empty at the end of a remote
        // segment, and takes the producers and epochs the leader had there.
        let follower_config = LogConfig {
            committed_reads: true,
            ..tiered_config()
        };
        let follower_path = root.join("b");
        let follower = open_tiered(&follower_path, follower_config.clone(), store.clone()).await;
        follower
            .install_remote_manifest(&leader.remote_manifest().expect("manifest"))
            .await
            .expect("manifest");
        follower
            .truncate_fully_and_start_at(point)
            .await
            .expect("restart");
        assert!(follower.active_producers().is_empty());
        // Batches it applies before the restore (producer 9 goes on, producer 13 is new, in
        // epoch 6) are replayed over the restored state.
        for (i, (pid, seq)) in [(9, 10), (13, 0)].into_iter().enumerate() {
            let mut b = RecordBatchBuilder::new(1_000)
                .producer(pid, 0, seq)
                .record(None, Some(b"z"), &[])
                .build()
                .to_vec();
            batch::assign_offset(&mut b, (point + i as u64) as i64, 6);
            follower
                .append_assigned(Bytes::from(b))
                .await
                .expect("append");
        }
        let restored = follower
            .restore_from_remote(point)
            .await
            .expect("restore")
            .expect("a remote segment ends at the point");
        assert_eq!(
            restored,
            RestoredState {
                producers: Some(2),
                leader_epochs: 2
            }
        );
        let epochs = vec![(3, 0), (5, epoch_5_start)];
        let mut with_replayed = expected.clone();
        with_replayed.retain(|p| p.0 != 9);
        with_replayed.extend([(9, 0, 10, point), (13, 0, 0, point + 1)]);
        with_replayed.sort();
        let check = |log: &Log| {
            assert_eq!(producers(log), with_replayed);
            assert_eq!(log.leader_epochs(), [&epochs[..], &[(6, point)]].concat());
            assert_eq!(log.end_offset_for_epoch(3), Some((3, epoch_5_start)));
            assert_eq!(log.end_offset_for_epoch(5), Some((5, point)));
            assert_eq!(log.leader_epoch(), 6);
        };
        check(&follower);
        // Saved as the follower's own: a reopen keeps them.
        follower.close().await.expect("close");
        let follower = open_tiered(&follower_path, follower_config.clone(), store.clone()).await;
        check(&follower);
        follower.close().await.expect("close");
        // Only into a log that still starts at the point.
        assert!(matches!(
            leader.restore_from_remote(point).await,
            Err(Error::InvalidArgument(_))
        ));

        // Segments closed before the leader's process opened the log: the state at their end
        // is the state at their base (the segment before's .snapshot) with their batches
        // replayed; a follower restarting there gets the same producers.
        fill(&leader, 90, 40, 1_000).await;
        leader.close().await.expect("close");
        let leader = open_tiered(&leader_path, tiered_config(), store.clone()).await;
        let before = leader.remote_segments().len();
        assert!(leader.tier_tick(10_000).await.expect("tick") >= 1);
        let point = leader.remote_segments()[before].next_offset;
        let follower = open_tiered(&root.join("c"), follower_config.clone(), store.clone()).await;
        follower
            .install_remote_manifest(&leader.remote_manifest().expect("manifest"))
            .await
            .expect("manifest");
        follower
            .truncate_fully_and_start_at(point)
            .await
            .expect("restart");
        assert_eq!(
            follower.restore_from_remote(point).await.expect("restore"),
            Some(RestoredState {
                producers: Some(2),
                leader_epochs: 2
            })
        );
        assert_eq!(producers(&follower), expected);
        assert_eq!(follower.leader_epochs(), epochs);

        // The first upload of a log whose start moved before it had a remote tier, closed
        // before this process: its producers at the end are not known, and a follower
        // restarting there starts them unknown.
        let other = root.join("d");
        let plain = LogConfig {
            remote_storage: false,
            ..tiered_config()
        };
        let log = Log::open(&other, plain).await.expect("open");
        append_idempotent(&log, 11, 0).await;
        fill(&log, 0, 60, 1_000).await;
        log.set_log_start_offset(20).await.expect("delete records");
        log.enforce_retention(10_000).await.expect("retention");
        assert!(log.local_start_offset() > 0);
        log.close().await.expect("close");
        let log = Log::open(&other, tiered_config()).await.expect("open");
        log.attach_remote(store.clone(), "t-1".into())
            .await
            .expect("attach");
        assert!(log.tier_tick(10_000).await.expect("tick") >= 1);
        let first = log.remote_segments()[0];
        assert!(first.base_offset > 0);
        let follower_d = Log::open(&root.join("e"), follower_config)
            .await
            .expect("open");
        follower_d
            .attach_remote(store.clone(), "t-1".into())
            .await
            .expect("attach");
        follower_d
            .install_remote_manifest(&log.remote_manifest().expect("manifest"))
            .await
            .expect("manifest");
        follower_d
            .truncate_fully_and_start_at(first.next_offset)
            .await
            .expect("restart");
        assert_eq!(
            follower_d
                .restore_from_remote(first.next_offset)
                .await
                .expect("restore"),
            Some(RestoredState {
                producers: None,
                leader_epochs: 0
            })
        );
        assert!(follower_d.active_producers().is_empty());
        follower_d.close().await.expect("close");
        log.close().await.expect("close");

        // A damaged snapshot object is an error, never a state.
        let seg = leader.remote_segments()[before];
        store
            .put(
                &seg.key(PREFIX, "epochs"),
                Bytes::from_static(b"WEIREPC1 damaged"),
            )
            .await
            .expect("put");
        follower
            .truncate_fully_and_start_at(point)
            .await
            .expect("restart");
        assert!(matches!(
            follower.restore_from_remote(point).await,
            Err(Error::Remote(_))
        ));
        follower.close().await.expect("close");
        leader.close().await.expect("close");
    });
}
