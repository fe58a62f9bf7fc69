//! The engine's part of partition replication (issue 19, `docs/replication.md` §3): leader
//! epochs stamped into appended batches, the committed offset readers stop at
//! (`LogConfig::committed_reads`), and `Log::append_assigned`, the follower's append — a
//! follower fed the leader's batches holds the same bytes, through random truncations too
//! (truncation's own crash tests are in `truncate.rs`).

mod common;

use std::cell::RefCell;
use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use proptest::prelude::*;
use weir_storage::batch::RecordBatchBuilder;
use weir_storage::error::BatchError;
use weir_storage::io::SimDisk;
use weir_storage::{Error, Log};

use common::{open_sim as open, replicated_config as config, tagged_batch as batch};

/// The batches of `[from, to)` as the log stores them, joined.
async fn read_range(log: &Log, from: u64, to: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut off = from;
    while off < to {
        let r = log.read(off, 64 << 10).await.expect("read");
        assert!(!r.is_empty(), "nothing at {off} below {to}");
        for (h, bytes) in r.batches() {
            if h.base_offset.get() as u64 >= to {
                return out;
            }
            out.extend_from_slice(bytes);
            off = h.last_offset() as u64 + 1;
        }
    }
    out
}

/// Every segment file's bytes, by name.
async fn files(disk: &Rc<SimDisk>, dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for p in disk.paths() {
        let name = p
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_owned();
        if p.parent() != Some(dir) || !name.ends_with(".log") {
            continue;
        }
        let f = disk.vfs().open(&p, false).await.expect("open file");
        let size = f.file_size().await.expect("size");
        let bytes = f.read_at(0, size as usize).await.expect("read file");
        out.push((name, bytes.to_vec()));
    }
    out
}

#[test]
fn appends_stamp_the_leader_epoch_and_it_survives_reopen() {
    let tmp = common::tempdir();
    common::run(tmp.path(), || async {
        let disk = SimDisk::new();
        let dir = Path::new("/sim/epoch");
        let log = open(&disk, dir, common::small_config()).await;
        assert_eq!(log.leader_epoch(), 0);
        log.append(batch(1, 2, 10)).await.expect("append");
        log.set_leader_epoch(7).expect("epoch");
        log.append(batch(2, 1, 10)).await.expect("append");
        log.append(batch(3, 3, 10)).await.expect("append");
        assert!(matches!(
            log.set_leader_epoch(-1),
            Err(Error::InvalidArgument(_))
        ));
        log.close().await.expect("close");
        let log = open(&disk, dir, common::small_config()).await;
        let r = log.read(0, 1 << 20).await.expect("read");
        let epochs: Vec<(i64, i32)> = r
            .batches()
            .map(|(h, b)| {
                weir_storage::batch::validate(b).expect("the CRC still holds");
                (h.base_offset.get(), h.partition_leader_epoch.get())
            })
            .collect();
        assert_eq!(epochs, vec![(0, 0), (2, 7), (3, 7)]);
    });
}

#[test]
fn readers_never_see_past_committed_and_wake_at_commit() {
    let tmp = common::tempdir();
    common::run(tmp.path(), || async {
        let disk = SimDisk::new();
        let dir = Path::new("/sim/committed");
        let log = Rc::new(open(&disk, dir, config()).await);
        let seen = Rc::new(RefCell::new(Vec::new()));
        let s2 = seen.clone();
        log.on_append(move |wm| s2.borrow_mut().push(wm.high_watermark));
        for i in 0..5 {
            log.append(batch(i, 2, 100)).await.expect("append");
        }
        let wm = log.watermarks();
        assert_eq!(wm.log_end_offset, 10);
        assert_eq!(wm.written_offset, 10);
        assert_eq!(wm.high_watermark, 0, "nothing committed yet");
        assert_eq!(wm.last_stable_offset, 0);
        assert!(log.read(0, 1 << 20).await.expect("read").is_empty());
        assert!(seen.borrow().is_empty(), "no callback before a commit");
        // A fetch parked at offset 4 wakes when offset 4 commits, not before.
        let woke = Rc::new(std::cell::Cell::new(false));
        let waiter = {
            let (log, woke) = (log.clone(), woke.clone());
            glommio::spawn_local(async move {
                log.wait_for_data(4).await.expect("wait");
                woke.set(true);
            })
        };
        log.set_committed(4).expect("commit");
        for _ in 0..10 {
            futures_lite::future::yield_now().await;
        }
        assert!(!woke.get(), "offset 4 is not committed yet");
        let r = log.read(0, 1 << 20).await.expect("read");
        let bases: Vec<i64> = r.batches().map(|(h, _)| h.base_offset.get()).collect();
        assert_eq!(bases, vec![0, 2], "only batches below the committed offset");
        assert_eq!(log.watermarks().high_watermark, 4);
        assert_eq!(*seen.borrow(), vec![4]);
        log.set_committed(6).expect("commit");
        waiter.await;
        assert!(woke.get());
        assert_eq!(*seen.borrow(), vec![4, 6]);
        // Never back; never past the log end.
        log.set_committed(2).expect("lower is ignored");
        assert_eq!(log.watermarks().committed_offset, 6);
        assert!(matches!(
            log.set_committed(11),
            Err(Error::OffsetOutOfRange { .. })
        ));
        // Committed ahead of written: visible only once written.
        log.set_committed(10).expect("commit");
        assert_eq!(log.watermarks().high_watermark, 10);
        // After a reopen nothing is known committed until the caller says so.
        let log = Rc::try_unwrap(log).ok().expect("one owner");
        log.close().await.expect("close");
        let log = open(&disk, dir, config()).await;
        assert_eq!(log.watermarks().high_watermark, 0);
        assert_eq!(log.watermarks().log_end_offset, 10);
        log.set_committed(10).expect("commit");
        let all = read_range(&log, 0, 10).await;
        assert_eq!(weir_storage::batch::Batches::new(&all).count(), 5);
    });
}

/// A follower fed the leader's batches through `append_assigned` holds the same bytes: the
/// same reads, the same segment files; a gap or an overlap is refused with nothing written.
#[test]
fn a_follower_fed_by_append_assigned_is_byte_identical() {
    let tmp = common::tempdir();
    common::run(tmp.path(), || async {
        let disk = SimDisk::new();
        let (ld, fd) = (Path::new("/sim/leader"), Path::new("/sim/follower"));
        let leader = open(&disk, ld, config()).await;
        let follower = open(&disk, fd, config()).await;
        // Each leader append is shipped as it is (one Raft entry each): the follower rolls
        // where the leader did. Shipping other groupings keeps the data identical but may
        // move the rolls (the model test below).
        let mut shipped = 0u64;
        for i in 0..60u8 {
            if i % 20 == 0 {
                leader
                    .set_leader_epoch(i32::from(i) / 20 + 1)
                    .expect("epoch");
            }
            leader
                .append(batch(
                    i,
                    1 + usize::from(i % 5),
                    50 + 40 * usize::from(i % 9),
                ))
                .await
                .expect("append");
            let end = leader.watermarks().log_end_offset;
            let bytes = written_from(&leader, shipped, usize::MAX).await;
            let info = follower
                .append_assigned(Bytes::from(bytes))
                .await
                .expect("append_assigned");
            assert_eq!(info.base_offset, shipped);
            assert_eq!(info.last_offset + 1, end);
            shipped = end;
        }
        let end = leader.watermarks().log_end_offset;
        leader.set_committed(end).expect("commit");
        follower.set_committed(end).expect("commit");
        assert_eq!(
            read_range(&follower, 0, end).await,
            read_range(&leader, 0, end).await
        );
        // Gaps and overlaps: refused, nothing written.
        let one = Bytes::from(read_range(&leader, 0, 1).await);
        let size = follower.size();
        for bad_base in [end - 1, end + 1, 0] {
            let mut m = one.to_vec();
            m[..8].copy_from_slice(&bad_base.to_be_bytes());
            let e = follower
                .append_assigned(Bytes::from(m))
                .await
                .expect_err("not at the log end");
            assert!(
                matches!(e, Error::InvalidBatch(BatchError::OffsetGap { expected, .. }) if expected == end),
                "{e}"
            );
        }
        // Two batches that do not follow each other, the first at the log end.
        let mut two = one.to_vec();
        two[..8].copy_from_slice(&end.to_be_bytes());
        let mut second = one.to_vec();
        second[..8].copy_from_slice(&(end + 5).to_be_bytes());
        two.extend_from_slice(&second);
        assert!(matches!(
            follower.append_assigned(Bytes::from(two)).await,
            Err(Error::InvalidBatch(BatchError::OffsetGap { .. }))
        ));
        // A damaged batch.
        let mut bad = one.to_vec();
        bad[..8].copy_from_slice(&end.to_be_bytes());
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(matches!(
            follower.append_assigned(Bytes::from(bad)).await,
            Err(Error::InvalidBatch(BatchError::ChecksumMismatch { .. }))
        ));
        assert_eq!(follower.size(), size, "nothing written");
        assert_eq!(follower.watermarks().log_end_offset, end);
        leader.close().await.expect("close");
        follower.close().await.expect("close");
        let (l, f) = (files(&disk, ld).await, files(&disk, fd).await);
        assert!(l.len() >= 3, "several segments");
        assert_eq!(
            l.iter().map(|(n, b)| (n, b.len())).collect::<Vec<_>>(),
            f.iter().map(|(n, b)| (n, b.len())).collect::<Vec<_>>()
        );
        assert!(
            l == f,
            "the follower's segment files are the leader's, byte for byte"
        );
    });
}

/// Idempotent producers' batches appended by `append_assigned` update the producers' state
/// exactly as on the leader: after a failover the follower dedups a retry.
#[test]
fn a_follower_knows_the_leaders_producers() {
    let tmp = common::tempdir();
    common::run(tmp.path(), || async {
        let disk = SimDisk::new();
        let leader = open(&disk, Path::new("/sim/l"), config()).await;
        let follower = open(&disk, Path::new("/sim/f"), config()).await;
        let idem = |seq: i32| {
            RecordBatchBuilder::new(5)
                .producer(42, 0, seq)
                .record(None, Some(b"v"), &[])
                .build()
        };
        for seq in 0..4 {
            leader.append(idem(seq)).await.expect("append");
        }
        leader.set_committed(4).expect("commit");
        follower
            .append_assigned(Bytes::from(read_range(&leader, 0, 4).await))
            .await
            .expect("append_assigned");
        let retry = follower.append(idem(3)).await.expect("retry");
        assert!(retry.duplicate);
        assert_eq!(retry.base_offset, 3);
        let e = follower.append(idem(5)).await.expect_err("gap");
        assert!(
            matches!(e, Error::OutOfOrderSequence { expected: 4, .. }),
            "{e}"
        );
        // What a new leader asks before it proposes (it appends with `append_assigned`, which
        // does not check): a retry gets the original's offsets, the next sequence may go on,
        // a gap or an old epoch is refused — and nothing is written by asking.
        assert_eq!(
            follower.check_producers(&checked(idem(2))).expect("retry"),
            Some((2, 2))
        );
        assert_eq!(
            follower.check_producers(&checked(idem(4))).expect("next"),
            None
        );
        let e = follower
            .check_producers(&checked(idem(6)))
            .expect_err("gap");
        assert!(
            matches!(
                e,
                Error::OutOfOrderSequence {
                    expected: 4,
                    got: 6,
                    ..
                }
            ),
            "{e}"
        );
        let older = RecordBatchBuilder::new(5)
            .producer(42, 0, 0)
            .record(None, Some(b"v"), &[])
            .build();
        let newer_epoch = RecordBatchBuilder::new(5)
            .producer(42, 1, 0)
            .record(None, Some(b"v"), &[])
            .build();
        follower.append(newer_epoch).await.expect("new epoch");
        let e = follower
            .check_producers(&checked(older))
            .expect_err("old epoch");
        assert!(matches!(e, Error::InvalidProducerEpoch { .. }), "{e}");
        assert_eq!(follower.watermarks().log_end_offset, 5);
    });
}

#[test]
fn a_transaction_is_stable_only_once_its_marker_is_committed() {
    let tmp = common::tempdir();
    common::run(tmp.path(), || async {
        let disk = SimDisk::new();
        let log = open(&disk, Path::new("/sim/txn"), config()).await;
        let txn = |seq: i32| {
            RecordBatchBuilder::new(5)
                .producer(7, 0, seq)
                .attributes(weir_storage::batch::TRANSACTIONAL_FLAG)
                .record(None, Some(b"t"), &[])
                .record(None, Some(b"t"), &[])
                .build()
        };
        let plain = || {
            RecordBatchBuilder::new(5)
                .record(None, Some(b"p"), &[])
                .build()
        };
        log.append(plain()).await.expect("plain"); // 0
        log.append(txn(0)).await.expect("txn"); // 1-2
        log.append(weir_storage::batch::marker_batch(7, 0, true, 0, 9))
            .await
            .expect("marker"); // 3
        log.append(plain()).await.expect("plain"); // 4
        let stable = |log: &Log| log.watermarks().last_stable_offset;
        // The marker is written, not committed: the transaction still bounds what is stable
        // (Kafka's unreplicated transaction), though the marker closed it on append.
        log.set_committed(3).expect("commit");
        assert_eq!(
            stable(&log),
            1,
            "the transaction ended before its end is committed"
        );
        let read = log.read_committed(0, 1 << 20, 1 << 20).await.expect("read");
        assert_eq!(
            read.batches()
                .map(|(h, _)| h.base_offset.get())
                .collect::<Vec<_>>(),
            vec![0],
            "a read_committed read took the transaction's records before its marker committed"
        );
        log.set_committed(4).expect("commit");
        assert_eq!(stable(&log), 4, "the marker is committed");
        log.set_committed(5).expect("commit");
        assert_eq!(stable(&log), 5);
    });
}

#[test]
fn a_log_start_inside_a_batch_still_lets_the_raft_log_read_that_batch() {
    let tmp = common::tempdir();
    common::run(tmp.path(), || async {
        let disk = SimDisk::new();
        let dir = Path::new("/sim/trim");
        let log = open(&disk, dir, config()).await;
        // 40 batches of 4 records of ~1 KiB: several 16 KiB segments.
        for i in 0..40u8 {
            log.append(batch(i, 4, 1000)).await.expect("append");
        }
        log.set_committed(160).expect("commit");
        // DeleteRecords at 101, inside the batch 100-103 of a later segment.
        log.set_log_start_offset(101).await.expect("log start");
        let stored = log.stored_start();
        assert!(stored > 0 && stored <= 100, "stored start {stored}");
        assert_eq!(log.watermarks().log_start_offset, 101);
        // A consumer's read below the log start is refused; the Raft log's read of the batch
        // holding it (and of the segment it is in) is not.
        assert!(matches!(
            log.read(100, 1 << 20).await,
            Err(Error::OffsetOutOfRange { .. })
        ));
        let r = log
            .read_written(100, 1, 1 << 20)
            .await
            .expect("read_written");
        assert_eq!(
            r.batches().next().map(|(h, _)| h.base_offset.get()),
            Some(100)
        );
        let r = log
            .read_written(stored, 1, 1 << 20)
            .await
            .expect("read_written");
        assert_eq!(
            r.batches().next().map(|(h, _)| h.base_offset.get()),
            Some(stored as i64)
        );
        assert!(log.read_written(stored - 1, 1, 1 << 20).await.is_err());
        // Reopened: the same.
        log.close().await.expect("close");
        let log = open(&disk, dir, config()).await;
        assert_eq!(log.watermarks().log_start_offset, 101);
        assert_eq!(log.stored_start(), stored);
        let r = log
            .read_written(100, 1, 1 << 20)
            .await
            .expect("read_written");
        assert_eq!(
            r.batches().next().map(|(h, _)| h.base_offset.get()),
            Some(100)
        );
    });
}

#[derive(Debug, Clone)]
enum Op {
    /// The leader appends batches (records, value bytes) in one record set, maybe in a new
    /// leader epoch.
    Append(Vec<(u8, u16)>, bool),
    /// Both commit a share (per mille) of what both have and is not committed yet.
    Commit(u16),
    /// Both cut at a batch boundary chosen among the uncommitted ones (the leader's suffix
    /// replaced, as after a failover).
    Truncate(u16),
    /// The follower receives what it lacks, in reads of at most this many bytes.
    Ship(u32),
    /// Both are closed and reopened (clean), or crash (kill -9).
    Reopen(bool),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (prop::collection::vec((1u8..6, 0u16..1500), 1..4), prop::bool::weighted(0.1))
            .prop_map(|(b, e)| Op::Append(b, e)),
        2 => (0u16..1001).prop_map(Op::Commit),
        2 => any::<u16>().prop_map(Op::Truncate),
        3 => (1u32..20_000).prop_map(Op::Ship),
        1 => any::<bool>().prop_map(Op::Reopen),
    ]
}

/// One batch as the model holds it: offsets and its bytes as stored.
#[derive(Clone)]
struct ModelBatch {
    base: u64,
    next: u64,
    bytes: Bytes,
}

/// Everything `log` has written from `from` on (`read_written`), joined.
async fn written_from(log: &Log, from: u64, max_bytes: usize) -> Vec<u8> {
    let end = log.watermarks().written_offset;
    let mut out = Vec::new();
    let mut off = from;
    while off < end && out.len() < max_bytes {
        let r = log
            .read_written(off, max_bytes, max_bytes)
            .await
            .expect("read_written");
        assert!(!r.is_empty(), "nothing at {off} below {end}");
        for (h, bytes) in r.batches() {
            out.extend_from_slice(bytes);
            off = h.last_offset() as u64 + 1;
        }
    }
    out
}

/// The leader-epoch list the model's batches make: each epoch above 0 and above the last,
/// with its first batch's offset.
fn epochs_of(model: &[ModelBatch]) -> Vec<(i32, u64)> {
    let mut out: Vec<(i32, u64)> = Vec::new();
    for b in model {
        let e = weir_storage::batch::BatchHeader::parse(&b.bytes)
            .expect("header")
            .partition_leader_epoch
            .get();
        if e > 0 && out.last().is_none_or(|l| e > l.0) {
            out.push((e, b.base));
        }
    }
    out
}

fn model_bytes(model: &[ModelBatch], from: u64) -> Vec<u8> {
    model
        .iter()
        .filter(|b| b.base >= from)
        .flat_map(|b| b.bytes.iter().copied())
        .collect()
}

/// The segment files of `dir` joined in offset order (after a clean close: exactly the data).
async fn segment_data(disk: &Rc<SimDisk>, dir: &Path) -> Vec<u8> {
    let mut fs = files(disk, dir).await;
    fs.sort();
    fs.into_iter().flat_map(|(_, b)| b).collect()
}

fn model_case(ops: Vec<Op>) {
    let tmp = common::tempdir();
    common::run(tmp.path(), move || async move {
        let mut disk = SimDisk::new();
        let (ld, fd) = (Path::new("/sim/leader"), Path::new("/sim/follower"));
        let mut leader = open(&disk, ld, config()).await;
        let mut follower = open(&disk, fd, config()).await;
        let mut model: Vec<ModelBatch> = Vec::new();
        // The committed offset is the caller's to keep: the engine forgets it on reopen.
        let mut committed = 0u64;
        let mut epoch = 0i32;
        let mut tag = 0u8;
        for op in ops {
            let fend = follower.watermarks().log_end_offset;
            match op {
                Op::Append(batches, new_epoch) => {
                    if new_epoch {
                        epoch += 1;
                        leader.set_leader_epoch(epoch).expect("epoch");
                    }
                    let mut set = Vec::new();
                    let mut sizes = Vec::new();
                    for (n, v) in batches {
                        tag = tag.wrapping_add(1);
                        let b = batch(tag, usize::from(n), usize::from(v));
                        sizes.push((b.len(), u64::from(n)));
                        set.extend_from_slice(&b);
                    }
                    let info = leader
                        .append(Bytes::from(set.clone()))
                        .await
                        .expect("append");
                    let (mut pos, mut off) = (0usize, info.base_offset);
                    for (len, n) in sizes {
                        let mut m = set[pos..pos + len].to_vec();
                        weir_storage::batch::assign_offset(&mut m, off as i64, epoch);
                        model.push(ModelBatch {
                            base: off,
                            next: off + n,
                            bytes: Bytes::from(m),
                        });
                        pos += len;
                        off += n;
                    }
                }
                Op::Commit(share) => {
                    // Only what both have (a majority of two), at a batch boundary.
                    let candidates: Vec<u64> = model
                        .iter()
                        .map(|b| b.next)
                        .filter(|n| *n > committed && *n <= fend)
                        .collect();
                    if !candidates.is_empty() {
                        let i = (candidates.len() - 1) * usize::from(share) / 1000;
                        committed = candidates[i];
                        leader.set_committed(committed).expect("commit");
                        follower.set_committed(committed).expect("commit");
                    }
                }
                Op::Truncate(pick) => {
                    let candidates: Vec<u64> = model
                        .iter()
                        .map(|b| b.base)
                        .filter(|b| *b >= committed)
                        .collect();
                    if !candidates.is_empty() {
                        let cut = candidates[usize::from(pick) % candidates.len()];
                        leader.truncate_to(cut).await.expect("truncate leader");
                        if fend > cut {
                            follower.truncate_to(cut).await.expect("truncate follower");
                        }
                        model.retain(|b| b.base < cut);
                        assert_eq!(leader.watermarks().log_end_offset, cut);
                        assert_eq!(follower.watermarks().log_end_offset, fend.min(cut));
                    }
                }
                Op::Ship(max) => {
                    let bytes = written_from(&leader, fend, max as usize).await;
                    if !bytes.is_empty() {
                        let info = follower
                            .append_assigned(Bytes::from(bytes))
                            .await
                            .expect("append_assigned");
                        assert_eq!(info.base_offset, fend);
                    }
                }
                Op::Reopen(clean) => {
                    if clean {
                        leader.close().await.expect("close");
                        follower.close().await.expect("close");
                    } else {
                        drop(leader);
                        drop(follower);
                        disk = disk.process_crash();
                    }
                    leader = open(&disk, ld, config()).await;
                    follower = open(&disk, fd, config()).await;
                    leader.set_committed(committed).expect("commit");
                    follower
                        .set_committed(committed.min(follower.watermarks().log_end_offset))
                        .expect("commit");
                    leader.set_leader_epoch(epoch).expect("epoch");
                }
            }
            // The leader holds the model; the follower a prefix of it; readers stop at the
            // commit.
            let lend = leader.watermarks().log_end_offset;
            assert_eq!(lend, model.last().map_or(0, |b| b.next));
            let want_epochs = epochs_of(&model);
            assert_eq!(leader.leader_epochs(), want_epochs);
            let fe = follower.watermarks().log_end_offset;
            let follower_epochs: Vec<(i32, u64)> =
                want_epochs.iter().copied().filter(|e| e.1 < fe).collect();
            assert_eq!(follower.leader_epochs(), follower_epochs);
            let all = model_bytes(&model, 0);
            assert!(
                written_from(&leader, 0, usize::MAX).await == all,
                "leader != model"
            );
            let f = written_from(&follower, 0, usize::MAX).await;
            assert!(
                f[..] == all[..f.len()],
                "the follower is not a prefix of the model"
            );
            assert_eq!(leader.watermarks().high_watermark, committed);
            let committed_bytes: Vec<u8> = model
                .iter()
                .filter(|b| b.next <= committed)
                .flat_map(|b| b.bytes.iter().copied())
                .collect();
            assert!(read_range(&leader, 0, committed).await == committed_bytes);
            assert!(read_range(&follower, 0, committed).await == committed_bytes);
        }
        // Ship the rest; both hold the same bytes, in the files too.
        let fend = follower.watermarks().log_end_offset;
        let rest = written_from(&leader, fend, usize::MAX).await;
        if !rest.is_empty() {
            follower
                .append_assigned(Bytes::from(rest))
                .await
                .expect("append_assigned");
        }
        leader.close().await.expect("close");
        follower.close().await.expect("close");
        let (l, f) = (segment_data(&disk, ld).await, segment_data(&disk, fd).await);
        assert!(l == model_bytes(&model, 0), "the leader's segment data");
        assert!(
            f == l,
            "the follower's segment data is the leader's, byte for byte"
        );
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn follower_matches_leader_through_random_truncations(ops in prop::collection::vec(op(), 1..60)) {
        model_case(ops);
    }
}

/// The leader-epoch list follows appends (epoch changes only), `append_assigned` (a follower
/// learns the leader's list) and truncations; survives a clean reopen and a crash; a lost or
/// damaged file is rebuilt from the batch headers; OffsetForLeaderEpoch answers from it.
#[test]
fn leader_epochs_follow_appends_truncations_and_crashes() {
    let tmp = common::tempdir();
    common::run(tmp.path(), || async {
        let disk = SimDisk::new();
        let (ld, fd) = (Path::new("/sim/el"), Path::new("/sim/ef"));
        let leader = open(&disk, ld, config()).await;
        let follower = open(&disk, fd, config()).await;
        // Epoch 0 (a single-node log's) has no entry and no file.
        leader.append(batch(1, 2, 10)).await.expect("append");
        assert!(leader.leader_epochs().is_empty());
        // Kafka's (0, log start) entry is implied: epoch 0 ends at the log end.
        let single_end = leader.watermarks().log_end_offset;
        assert_eq!(leader.end_offset_for_epoch(0), Some((0, single_end)));
        assert_eq!(leader.end_offset_for_epoch(1), None);
        assert!(!disk.paths().iter().any(|p| p.ends_with("el/leader_epochs")));
        let mut starts = Vec::new();
        for (epoch, batches) in [(1, 3), (3, 20), (4, 2), (7, 30)] {
            leader.set_leader_epoch(epoch).expect("epoch");
            starts.push((epoch, leader.watermarks().log_end_offset));
            for i in 0..batches {
                leader.append(batch(i, 2, 300)).await.expect("append");
            }
        }
        assert!(leader.size().0 >= 3, "several segments");
        assert_eq!(leader.leader_epochs(), starts);
        assert!(matches!(
            leader.set_leader_epoch(6),
            Err(Error::InvalidArgument(_))
        ));
        let end = leader.watermarks().log_end_offset;
        assert_eq!(leader.end_offset_for_epoch(7), Some((7, end)));
        assert_eq!(leader.end_offset_for_epoch(3), Some((3, starts[2].1)));
        assert_eq!(leader.end_offset_for_epoch(5), Some((4, starts[3].1)));
        assert_eq!(leader.end_offset_for_epoch(8), None);
        assert_eq!(leader.end_offset_for_epoch(0), Some((0, starts[0].1)));
        // A leader of epoch 9 whose batches are all older: 9 starts at the log end.
        let led = leader.epoch_history(9);
        assert_eq!(led.end_offset_for(9), Some((9, end)));
        assert_eq!(led.end_offset_for(8), Some((7, end)));
        assert_eq!(led.end_offset_for(7), Some((7, end)));
        assert_eq!(led.end_offset_for(3), Some((3, starts[2].1)));
        assert_eq!(led.end_offset_for(10), None);
        assert_eq!(led.end_offset_for(-1), None);
        assert_eq!(led.epoch_at(0), Some(0));
        assert_eq!(led.epoch_at(starts[1].1), Some(3));
        assert_eq!(led.epoch_at(starts[2].1 - 1), Some(3));
        assert_eq!(led.epoch_at(end - 1), Some(7));
        assert_eq!(led.epoch_at(end), Some(9));
        assert_eq!(leader.epoch_history(7), leader.epoch_history(2));
        // The follower learns the same list from the batches.
        let all = written_from(&leader, 0, usize::MAX).await;
        follower
            .append_assigned(Bytes::from(all))
            .await
            .expect("append_assigned");
        assert_eq!(follower.leader_epochs(), starts);
        // A batch of an older epoch than the follower's latest is refused.
        let mut old = batch(9, 1, 10).to_vec();
        weir_storage::batch::assign_offset(&mut old, end as i64, 4);
        assert!(matches!(
            follower.append_assigned(Bytes::from(old)).await,
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(follower.watermarks().log_end_offset, end, "nothing written");
        // Truncating into epoch 3 drops epochs 4 and 7; a new epoch 5 starts at the cut.
        let cut = starts[2].1 - 4; // two batches before epoch 4 starts
        follower.set_committed(starts[1].1).expect("commit");
        follower.truncate_to(cut).await.expect("truncate");
        assert_eq!(follower.leader_epochs(), starts[..2].to_vec());
        assert_eq!(follower.end_offset_for_epoch(3), Some((3, cut)));
        follower.set_leader_epoch(5).expect("epoch");
        follower.append(batch(5, 1, 10)).await.expect("append");
        let want = vec![starts[0], starts[1], (5, cut)];
        assert_eq!(follower.leader_epochs(), want);
        // A crash keeps it; the leader's clean close too.
        drop(follower);
        leader.close().await.expect("close");
        let crashed = disk.process_crash();
        let follower = open(&crashed, fd, config()).await;
        assert_eq!(follower.leader_epochs(), want);
        assert_eq!(
            follower.leader_epoch(),
            5,
            "appends go on in the latest epoch"
        );
        let leader = open(&crashed, ld, config()).await;
        assert_eq!(leader.leader_epochs(), starts);
        drop(leader);
        drop(follower);
        // Lost, or damaged: rebuilt from the batch headers.
        crashed
            .vfs()
            .remove(&ld.join("leader_epochs"))
            .await
            .expect("remove");
        assert!(crashed.flip_bit("ef/leader_epochs", 13, 2));
        let leader = open(&crashed, ld, config()).await;
        assert_eq!(leader.leader_epochs(), starts);
        let follower = open(&crashed, fd, config()).await;
        assert_eq!(follower.leader_epochs(), want);
    });
}

/// An entry is written before its epoch's first batch: if that batch is lost in a crash, the
/// entry (past the recovered end) is dropped when the log opens.
#[test]
fn an_epoch_whose_first_batch_was_lost_is_dropped_on_open() {
    let tmp = common::tempdir();
    common::run(tmp.path(), || async {
        let disk = SimDisk::new();
        let dir = Path::new("/sim/lost");
        let log = open(&disk, dir, config()).await;
        log.set_leader_epoch(2).expect("epoch");
        log.append(batch(1, 3, 10)).await.expect("append");
        log.flush().await.expect("flush");
        log.set_leader_epoch(3).expect("epoch");
        log.append(batch(2, 3, 10)).await.expect("append");
        assert_eq!(log.leader_epochs(), vec![(2, 0), (3, 3)]);
        drop(log);
        // Power loss losing every unflushed log write (the epoch file was fdatasync'ed).
        let after = disk.crash(|p, _, _| {
            if p.to_string_lossy().ends_with(".log") {
                weir_storage::io::CrashFate::Lost
            } else {
                weir_storage::io::CrashFate::Kept
            }
        });
        let log = open(&after, dir, config()).await;
        assert_eq!(log.watermarks().log_end_offset, 3);
        assert_eq!(log.leader_epochs(), vec![(2, 0)]);
        assert_eq!(log.end_offset_for_epoch(2), Some((2, 3)));
    });
}

/// A record set as a replicated leader has it when it asks `check_producers`: validated.
fn checked(records: Bytes) -> weir_storage::batch::ValidBatches {
    let rules = weir_storage::batch::Rules::of(
        &weir_storage::LogConfig::default(),
        weir_storage::batch::Origin::Internal,
        0,
    );
    weir_storage::batch::validate::check_blocking(records, &rules).expect("valid")
}
