//! A read returns whole batches, but a batch that spans read chunks comes back in pieces
//! (no copy to join them): `ReadOutcome::next_offset` and `batches` must see through the
//! pieces. (The broker's read_committed fetch lists the aborted transactions up to
//! `next_offset`; reading only the last piece got it wrong when that piece was the tail of a
//! batch.)

mod common;

use bytes::{Bytes, BytesMut};
use weir_storage::batch::{self, RecordBatchBuilder};
use weir_storage::{Log, LogConfig, ReadOutcome};

/// Batches of 1, 200, 3,000 and 9,000 value bytes at offsets 10, 12, 15, 16.
fn batches() -> (Bytes, u64) {
    let mut all = BytesMut::new();
    let mut base = 10i64;
    for (n, size) in [(2, 1), (3, 200), (1, 3_000), (4, 9_000 / 4)] {
        let mut b = RecordBatchBuilder::new(1_000);
        for i in 0..n {
            b = b.record(None, Some(&vec![i as u8; size]), &[]);
        }
        let mut bytes = b.build().to_vec();
        batch::assign_offset(&mut bytes, base, 0);
        all.extend_from_slice(&bytes);
        base += n as i64;
    }
    (all.freeze(), base as u64)
}

fn outcome(pieces: Vec<Bytes>) -> ReadOutcome {
    let mut out = ReadOutcome::default();
    out.chunks = pieces;
    out
}

#[test]
fn next_offset_sees_through_pieces_split_anywhere() {
    let (all, end) = batches();
    assert_eq!(outcome(vec![all.clone()]).next_offset(), Some(end));
    assert_eq!(outcome(Vec::new()).next_offset(), None);
    // Two and three pieces, split at every position (inside headers included).
    for a in (1..all.len()).step_by(7) {
        let two = vec![all.slice(..a), all.slice(a..)];
        assert_eq!(
            outcome(two.clone()).next_offset(),
            Some(end),
            "split at {a}"
        );
        let bases: Vec<i64> = outcome(two)
            .batches()
            .map(|(h, _)| h.base_offset.get())
            .collect();
        assert_eq!(bases, [10, 12, 15, 16]);
        for b in (a + 1..all.len()).step_by(131) {
            let three = vec![
                all.slice(..a),
                Bytes::new(),
                all.slice(a..b),
                all.slice(b..),
            ];
            assert_eq!(outcome(three).next_offset(), Some(end), "split at {a}, {b}");
        }
    }
}

#[test]
fn a_read_from_disk_across_read_chunks_ends_at_its_last_batch() {
    let dir = common::tempdir();
    let path = dir.path().join("p0");
    common::run(dir.path(), move || async move {
        // 8 KiB read chunks and ~3 KiB batches: most reads end inside a chunk boundary.
        let config = || LogConfig {
            segment_bytes: 1 << 20,
            ..common::small_config()
        };
        let log = Log::open(&path, config()).await.expect("open");
        for i in 0..60u32 {
            let b = RecordBatchBuilder::new(1_000)
                .record(None, Some(&vec![i as u8; 1_000 + 97 * i as usize]), &[])
                .record(None, Some(b"second"), &[])
                .build();
            log.append(b).await.expect("append");
        }
        log.close().await.expect("close");
        let log = Log::open(&path, config()).await.expect("reopen");
        let mut split_reads = 0;
        for from in (0..120).step_by(2) {
            for max in [5_000usize, 9_000, 20_000, 50_000] {
                let r = log.read(from, max).await.expect("read");
                let last = r.batches().last().expect("a batch").0.last_offset() as u64;
                assert_eq!(r.next_offset(), Some(last + 1), "read({from}, {max})");
                let whole = |c: &Bytes| {
                    batch::Batches::new(c).map(|(_, b)| b.len()).sum::<usize>() == c.len()
                };
                if !r.chunks.iter().all(whole) {
                    split_reads += 1;
                }
            }
        }
        assert!(
            split_reads > 10,
            "the reads must cross read chunks: {split_reads}"
        );
        log.close().await.expect("close");
    });
}
