//! The transaction store over a replicated partition (a cluster's `__transaction_state`):
//! what a coordinator that lost its partition's leadership can and cannot store, and what the
//! next leader loads.

use super::*;
use crate::broker::errors;
use crate::broker::group::offsets::run_on_disk;

type Partition = crate::broker::group::offsets::fake_replica::FakeReplica;

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
/// replica that drops its log below the cut (`Replica::cut`) keeps everything a new
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
