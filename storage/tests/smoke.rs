mod common;

use weir_storage::batch::RecordBatchBuilder;
use weir_storage::Log;

#[test]
fn append_read_flush_reopen() {
    let dir = common::tempdir();
    let path = dir.path().join("p0");
    common::run(dir.path(), move || async move {
        let log = Log::open(&path, common::small_config())
            .await
            .expect("open");
        let mut expect = Vec::new();
        for i in 0..200u32 {
            let v = format!("value-{i}").repeat(40);
            let b = RecordBatchBuilder::new(1_000 + i64::from(i))
                .record(Some(format!("k{i}").as_bytes()), Some(v.as_bytes()), &[])
                .record(None, Some(b"second"), &[])
                .build();
            let info = log.append(b).await.expect("append");
            assert_eq!(info.base_offset, u64::from(i) * 2);
            expect.push(v);
        }
        assert_eq!(log.watermarks().high_watermark, 400);
        log.flush().await.expect("flush");
        assert_eq!(log.watermarks().flushed_offset, 400);
        let r = log.read(101, 1).await.expect("read");
        let (h, _) = r.batches().next().expect("one batch");
        assert_eq!(h.base_offset.get(), 100);
        assert!(log.size().0 > 1, "64 KiB segments must have rolled");
        log.close().await.expect("close");

        let log = Log::open(&path, common::small_config())
            .await
            .expect("reopen");
        assert_eq!(log.watermarks().log_end_offset, 400);
        let mut off = 0;
        let mut seen = 0;
        while off < 400 {
            let r = log.read(off, 10_000).await.expect("read");
            for (_, bytes) in r.batches() {
                let recs = weir_storage::batch::decode_records(bytes).expect("decode");
                assert_eq!(recs[0].offset as u64, off);
                assert_eq!(recs[0].value.as_deref(), Some(expect[seen].as_bytes()));
                seen += 1;
                off += 2;
            }
        }
        assert_eq!(seen, 200);
        let info = log
            .append(
                RecordBatchBuilder::new(5)
                    .record(None, Some(b"x"), &[])
                    .build(),
            )
            .await
            .expect("append after reopen");
        assert_eq!(info.base_offset, 400);
        drop(log); // unclean
        let log = Log::open(&path, common::small_config())
            .await
            .expect("unclean reopen");
        assert_eq!(log.watermarks().log_end_offset, 401);
    });
}

/// A log in a directory named relative to the current directory opens, appends, syncs and
/// reopens like one named absolutely (glommio itself cannot open relative paths).
#[test]
fn relative_directory() {
    let dir = common::tempdir();
    let cwd = std::env::current_dir().expect("cwd");
    // "../../.." up to the root, then the temp dir: relative, and independent of the cwd.
    let mut path = std::path::PathBuf::new();
    for _ in cwd.components().skip(1) {
        path.push("..");
    }
    path.push(dir.path().join("p0").strip_prefix("/").expect("absolute"));
    assert!(path.is_relative());
    common::run(dir.path(), move || async move {
        let log = Log::open(&path, common::small_config())
            .await
            .expect("open a relative directory");
        let b = RecordBatchBuilder::new(1)
            .record(None, Some(b"v"), &[])
            .build();
        assert_eq!(log.append(b).await.expect("append").base_offset, 0);
        log.flush().await.expect("flush");
        log.close().await.expect("close");
        let log = Log::open(&path, common::small_config())
            .await
            .expect("reopen a relative directory");
        assert_eq!(log.watermarks().log_end_offset, 1);
        log.close().await.expect("close");
    });
}
