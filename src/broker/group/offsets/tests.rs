//! The offset store: its compaction racing commits, its record format, its buckets.

use super::*;

/// Regression: a compaction ran while another commit had appended its record but not yet
/// applied it to memory (it was waiting for its flush). The snapshot lacked that commit,
/// the log start moved past its record, and after a restart the acknowledged commit was
/// gone (the key read back an older offset). Many concurrent committers with a tiny
/// compaction threshold hit that window; every key must read back its last acknowledged
/// offset after reopening.
#[test]
fn concurrent_commits_survive_compaction_and_restart() {
    run_on_disk(|path| async move {
        let cache = BatchCache::new(8 << 20);
        let mut store = OffsetStore::open(&path, 3, cache.clone())
            .await
            .expect("open");
        store.compact_min_bytes = 2048;
        let store = Rc::new(store);
        const WRITERS: i32 = 16;
        const ROUNDS: i64 = 60;
        let mut tasks = Vec::new();
        for w in 0..WRITERS {
            let st = store.clone();
            tasks.push(glommio::spawn_local(async move {
                let mut acked = -1;
                for round in 0..ROUNDS {
                    let c = Committed {
                        offset: round,
                        leader_epoch: -1,
                        metadata: String::new(),
                        commit_ms: 0,
                    };
                    st.commit(&format!("g{w}"), vec![("t".into(), w, c)])
                        .await
                        .expect("commit");
                    acked = round;
                }
                (w, acked)
            }));
        }
        let mut acked = Vec::new();
        for t in tasks {
            acked.push(t.await);
        }
        assert!(
            store.log().watermarks().log_start_offset > 0,
            "no compaction ran: the test did not exercise the race"
        );
        let store = Rc::try_unwrap(store).ok().expect("sole owner");
        store.close().await.expect("close");
        let reopened = OffsetStore::open(&path, 3, cache).await.expect("reopen");
        for (w, last) in acked {
            let got = reopened.get(&format!("g{w}"), "t", w).map(|c| c.offset);
            assert_eq!(
                got,
                Some(last),
                "group g{w}: acknowledged offset {last} lost"
            );
        }
    });
}

#[test]
fn records_round_trip() {
    let k = encode_key("g", "topic-a", 7);
    assert_eq!(decode_key(&k), Some(("g".into(), "topic-a".into(), 7)));
    let c = Committed {
        offset: 42,
        leader_epoch: -1,
        metadata: "meta".into(),
        commit_ms: 5,
    };
    assert_eq!(decode_value(&encode_value(&c)), Some(c));
    assert_eq!(decode_key(&k[..k.len() - 1]), None);
    assert_eq!(decode_value(&[1, 2, 3]), None);
}

#[test]
fn buckets_are_stable_and_spread() {
    assert_eq!(bucket_of("group-a"), bucket_of("group-a"));
    let used: std::collections::HashSet<usize> =
        (0..200).map(|i| bucket_of(&format!("g{i}"))).collect();
    assert!(used.len() > BUCKETS / 2);
}
