//! The log against a simple in-memory model, on real files with O_DIRECT (ext4).
//!
//! Random sequences of appends (random batch sizes, compression flag, timestamps), reads at
//! random offsets, flushes, segment rolls (small segments) and clean or unclean reopens: every
//! read must return exactly the model's batches, starting with the one holding the offset.

mod common;

use bytes::Bytes;
use proptest::prelude::*;
use weir_storage::batch::RecordBatchBuilder;
use weir_storage::{Error, Log};

#[derive(Debug, Clone)]
enum Op {
    Append {
        records: u8,
        value_bytes: u16,
        compressed: bool,
        ts_step: i8,
    },
    Read {
        pick: u16,
        max_bytes: u32,
    },
    Flush,
    Reopen {
        clean: bool,
    },
    TimestampLookup {
        pick: u16,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1u8..20, 0u16..3000, any::<bool>(), -5i8..50).prop_map(|(records, value_bytes, compressed, ts_step)| Op::Append { records, value_bytes, compressed, ts_step }),
        4 => (any::<u16>(), 1u32..200_000).prop_map(|(pick, max_bytes)| Op::Read { pick, max_bytes }),
        1 => Just(Op::Flush),
        1 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
        1 => any::<u16>().prop_map(|pick| Op::TimestampLookup { pick }),
    ]
}

/// One batch as the model holds it: offsets and the exact bytes the log must return.
struct ModelBatch {
    base: u64,
    next: u64,
    max_ts: i64,
    bytes: Bytes,
}

fn with_offset(b: &Bytes, base: u64) -> Bytes {
    let mut m = b.to_vec();
    weir_storage::batch::assign_offset(&mut m, base as i64, 0);
    Bytes::from(m)
}

async fn check_read(log: &Log, model: &[ModelBatch], offset: u64, max_bytes: usize) {
    let end = model.last().map_or(0, |b| b.next);
    let r = log.read(offset, max_bytes).await;
    if offset > end {
        assert!(
            matches!(r, Err(Error::OffsetOutOfRange { .. })),
            "read past end must fail"
        );
        return;
    }
    let r = r.expect("read");
    let got: Vec<&[u8]> = r.batches().map(|(_, b)| b).collect();
    if offset == end {
        assert!(got.is_empty());
        return;
    }
    let first = model
        .iter()
        .position(|b| b.next > offset)
        .expect("offset inside log");
    assert!(!got.is_empty(), "read at {offset} returned nothing");
    let mut total = 0;
    for (i, g) in got.iter().enumerate() {
        let want = &model[first + i];
        assert_eq!(
            *g,
            &want.bytes[..],
            "batch {} (base {}) differs",
            first + i,
            want.base
        );
        total += g.len();
    }
    assert!(
        got.len() == 1 || total <= max_bytes,
        "read {total} bytes > max {max_bytes} with several batches"
    );
}

fn run_ops(ops: Vec<Op>) {
    let dir = common::tempdir();
    let path = dir.path().join("log");
    common::run(dir.path(), move || async move {
        let cfg = common::small_config();
        let mut log = Log::open(&path, cfg.clone()).await.expect("open");
        let mut model: Vec<ModelBatch> = Vec::new();
        let mut ts = 1_000_000i64;
        for op in ops {
            match op {
                Op::Append {
                    records,
                    value_bytes,
                    compressed,
                    ts_step,
                } => {
                    let mut b = RecordBatchBuilder::new(ts);
                    for r in 0..records {
                        let v = vec![r; value_bytes as usize];
                        b = b.record_at(ts + i64::from(r), Some(&[r]), Some(&v), &[("h", b"v")]);
                    }
                    if compressed {
                        b = b.compression(3);
                    }
                    let batch = b.build();
                    let info = log.append(batch.clone()).await.expect("append");
                    let base = model.last().map_or(0, |m| m.next);
                    assert_eq!(info.base_offset, base);
                    assert_eq!(info.last_offset, base + u64::from(records) - 1);
                    model.push(ModelBatch {
                        base,
                        next: base + u64::from(records),
                        max_ts: ts + i64::from(records) - 1,
                        bytes: with_offset(&batch, base),
                    });
                    ts += i64::from(ts_step);
                }
                Op::Read { pick, max_bytes } => {
                    let end = model.last().map_or(0, |b| b.next);
                    let offset = u64::from(pick) % (end + 2);
                    check_read(&log, &model, offset, max_bytes as usize).await;
                }
                Op::Flush => {
                    let hw = log.watermarks().high_watermark;
                    assert!(log.flush().await.expect("flush") >= hw);
                }
                Op::Reopen { clean } => {
                    if clean {
                        log.close().await.expect("close");
                    } else {
                        drop(log);
                    }
                    log = Log::open(&path, cfg.clone()).await.expect("reopen");
                    let end = model.last().map_or(0, |b| b.next);
                    let wm = log.watermarks();
                    assert_eq!(
                        wm.log_end_offset, end,
                        "reopen (clean: {clean}) changed the log end"
                    );
                    assert_eq!(wm.high_watermark, end);
                }
                Op::TimestampLookup { pick } => {
                    if model.is_empty() {
                        continue;
                    }
                    let target_batch = &model[pick as usize % model.len()];
                    let target = target_batch.max_ts;
                    let got = log.offset_for_timestamp(target).await.expect("lookup");
                    // The first batch (in offset order) whose max timestamp reaches the target.
                    let first = model.iter().find(|b| b.max_ts >= target).expect("exists");
                    let (off, t) = got.expect("a batch reaches the target");
                    assert!(
                        off >= first.base && off < first.next,
                        "lookup {target} gave {off}, batch is [{}, {})",
                        first.base,
                        first.next
                    );
                    assert!(t >= target);
                }
            }
        }
        // Everything, once more, from every batch start.
        for b in &model {
            check_read(&log, &model, b.base, 1).await;
        }
        log.close().await.expect("final close");
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn log_matches_model(ops in proptest::collection::vec(op(), 1..80)) {
        run_ops(ops);
    }
}
