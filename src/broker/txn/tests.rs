//! The transaction store over a replicated partition (a cluster's `__transaction_state`):
//! what a coordinator that lost its partition's leadership can and cannot store, and what the
//! next leader loads.

use std::cell::Cell;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;

use bytes::Bytes;

use super::*;
use crate::broker::errors;
use crate::broker::group::offsets::run_on_disk;

/// A partition as its Raft group would show it to the coordinator: one log, and the term of
/// whoever leads it now. An append at another term is refused as the shard refuses it
/// (`BucketReplicas::append`: a store loaded under an older term never writes in a newer one).
struct Partition {
    log: Rc<Log>,
    term: Cell<u64>,
    /// `internal.topics.compaction.min.bytes`.
    min_bytes: u64,
}

impl BucketReplica for Partition {
    fn compaction_min_bytes(&self) -> u64 {
        self.min_bytes
    }

    fn serving_term(&self, _bucket: usize) -> Option<u64> {
        Some(self.term.get())
    }

    fn leads(&self, _bucket: usize) -> bool {
        true
    }

    fn log(
        &self,
        _bucket: usize,
    ) -> Pin<Box<dyn Future<Output = Option<Rc<dyn Deref<Target = Log>>>>>> {
        let log = self.log.clone();
        Box::pin(async move { Some(Rc::new(log) as Rc<dyn Deref<Target = Log>>) })
    }

    fn append(
        &self,
        _bucket: usize,
        term: u64,
        batch: Bytes,
    ) -> Pin<Box<dyn Future<Output = Result<(), i16>>>> {
        let log = self.log.clone();
        let current = self.term.get();
        Box::pin(async move {
            if term != current {
                return Err(errors::NOT_LEADER_OR_FOLLOWER);
            }
            log.append(batch)
                .await
                .map_err(|_| errors::KAFKA_STORAGE_ERROR)?;
            log.flush().await.map_err(|_| errors::KAFKA_STORAGE_ERROR)?;
            Ok(())
        })
    }
}

impl Partition {
    /// A partition at term 1 over a fresh log in `dir`.
    async fn open(dir: &std::path::Path, min_bytes: u64) -> Rc<Partition> {
        let cache = BatchCache::new(8 << 20);
        let log = Log::open_with_cache(dir.join("p"), internal_log_config(), cache)
            .await
            .expect("open");
        Rc::new(Partition {
            log: Rc::new(log),
            term: Cell::new(1),
            min_bytes,
        })
    }
}

fn meta(epoch: i16) -> TxnMeta {
    TxnMeta {
        producer_id: 77 << 20,
        epoch,
        timeout_ms: 60_000,
        state: TxnState::Empty,
        partitions: Default::default(),
        groups: Default::default(),
        start_ms: -1,
        update_ms: 1,
    }
}

/// A coordinator deposed while it still holds its store (a new leader loaded the partition
/// at a newer term) must not store anything more: its write is refused (answered
/// NOT_COORDINATOR, so the client finds the new coordinator) and not applied in its memory,
/// and the new leader's store — loaded again — holds only what the leaders stored at their
/// own terms: the producer id with the epoch the new leader gave it.
#[test]
fn a_deposed_coordinator_stores_nothing_and_the_new_leader_loads_what_was_committed() {
    run_on_disk(|path| async move {
        let part = Partition::open(&path, COMPACTION_MIN_BYTES).await;
        let old = TxnStore::open_replicated(part.clone(), 5, 1)
            .await
            .expect("load at term 1");
        old.put("tx", Some(meta(0)))
            .await
            .expect("stored at term 1");
        assert_eq!(old.get("tx"), Some(meta(0)));

        // Another replica takes over at term 2 and loads what term 1 committed.
        part.term.set(2);
        let new = TxnStore::open_replicated(part.clone(), 5, 2)
            .await
            .expect("load at term 2");
        assert_eq!(new.term(), Some(2));
        assert_eq!(new.get("tx"), Some(meta(0)), "the new leader lost the id");

        // The deposed coordinator tries to bump the epoch: refused, not applied.
        let refused = old
            .put("tx", Some(meta(7)))
            .await
            .expect_err("a deposed write");
        assert_eq!(
            refused.code_or(errors::COORDINATOR_NOT_AVAILABLE),
            errors::NOT_COORDINATOR
        );
        assert_eq!(old.get("tx"), Some(meta(0)), "a refused write was applied");

        // The new leader fences the old instance; a store loaded again agrees with it.
        new.put("tx", Some(meta(1)))
            .await
            .expect("stored at term 2");
        let again = TxnStore::open_replicated(part.clone(), 5, 2)
            .await
            .expect("load again");
        assert_eq!(again.get("tx"), Some(meta(1)));
        assert_eq!(again.all().len(), 1);
    });
}

/// The cut records of a log, as its replicas would apply them: the offsets each lets them
/// drop the log below, in offset order.
async fn cuts(log: &Log) -> Vec<u64> {
    let mut out = Vec::new();
    let mut at = log.watermarks().log_start_offset;
    loop {
        let r = log.read(at, 1 << 20).await.expect("read");
        if r.is_empty() {
            return out;
        }
        for (h, batch) in r.batches() {
            out.extend(crate::broker::group::offsets::cut_below(batch));
            at = h.last_offset() as u64 + 1;
        }
    }
}

/// A replicated store compacts itself like a standalone one, but through its partition: the
/// live states are proposed again, followed by a cut record naming where they start. A
/// replica that drops its log below the cut (`Shard::cut_replica`) keeps everything a new
/// leader needs: the store it loads equals the one that compacted.
#[test]
fn a_replicated_store_rewrites_its_live_states_and_names_the_cut() {
    run_on_disk(|path| async move {
        let part = Partition::open(&path, 4096).await;
        let store = TxnStore::open_replicated(part.clone(), 5, 1)
            .await
            .expect("load");
        for i in 0..400i16 {
            let id = format!("tx-{}", i % 7);
            let m = if i == 399 { None } else { Some(meta(i)) };
            store.put(&id, m).await.expect("put");
        }
        let live = store.all();
        assert_eq!(live.len(), 6, "tx-0's last change forgot it: {live:?}");
        let cuts = cuts(&part.log).await;
        assert!(!cuts.is_empty(), "no compaction after 400 changes of 7 ids");
        let last = *cuts.last().expect("a cut");
        let end = part.log.watermarks().log_end_offset;
        assert!(
            last > 0 && last + 6 <= end,
            "the cut at {last} does not leave the 6 live states before the log end {end}"
        );
        // Every replica drops the log below the last cut; the next leader loads the rest.
        part.log.set_log_start_offset(last).await.expect("cut");
        part.term.set(2);
        let next = TxnStore::open_replicated(part.clone(), 5, 2)
            .await
            .expect("load after the cut");
        assert_eq!(next.all(), live, "the store loaded after the cut differs");
        assert_eq!(next.get("tx-0"), None, "a forgotten id came back");
    });
}
