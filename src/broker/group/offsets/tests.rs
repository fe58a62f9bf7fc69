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

fn stored_group(generation: i32) -> StoredGroup {
    StoredGroup {
        protocol_type: "consumer".into(),
        generation,
        protocol: "range".into(),
        leader: "m1".into(),
        state_ms: 17,
        members: vec![
            StoredMember {
                member_id: "m1".into(),
                group_instance_id: None,
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout_ms: 30_000,
                session_timeout_ms: 10_000,
                protocols: vec![
                    ("range".into(), Bytes::from_static(b"sub")),
                    ("roundrobin".into(), Bytes::from_static(b"sub2")),
                ],
                assignment: Bytes::from_static(b"assigned"),
            },
            StoredMember {
                member_id: "m2".into(),
                group_instance_id: Some("i2".into()),
                client_id: "c2".into(),
                client_host: "/10.0.0.2".into(),
                rebalance_timeout_ms: 1,
                session_timeout_ms: 2,
                protocols: vec![("range".into(), Bytes::new())],
                assignment: Bytes::new(),
            },
        ],
    }
}

#[test]
fn group_state_records_round_trip() {
    let g = stored_group(7);
    let v = group_state::encode_value(&g);
    assert_eq!(group_state::decode_value(&v), Some(g));
    for cut in [0, 1, v.len() / 2, v.len() - 1] {
        assert_eq!(group_state::decode_value(&v[..cut]), None, "cut at {cut}");
    }
    let mut longer = v.to_vec();
    longer.push(0);
    assert_eq!(group_state::decode_value(&longer), None);
    let k = group_state::encode_key("billing");
    assert_eq!(group_state::decode_key(&k), Some("billing".into()));
    assert_eq!(decode_key(&k), None, "a group state is not an offset");
}

/// A group's latest state survives restarts and compactions; a removed (Empty or deleted)
/// group's does not come back.
#[test]
fn group_states_survive_compaction_and_restart() {
    run_on_disk(|path| async move {
        let cache = BatchCache::new(8 << 20);
        let mut store = OffsetStore::open(&path, 5, cache.clone())
            .await
            .expect("open");
        store.compact_min_bytes = 2048;
        for generation in 1..=3 {
            store
                .store_group("a", Some(stored_group(generation)))
                .await
                .expect("a");
        }
        store
            .store_group("b", Some(stored_group(1)))
            .await
            .expect("b");
        store.store_group("b", None).await.expect("b gone");
        store
            .store_group("c", Some(stored_group(4)))
            .await
            .expect("c");
        let offset = |o| Committed {
            offset: o,
            leader_epoch: -1,
            metadata: String::new(),
            commit_ms: 0,
        };
        store
            .commit("c", vec![("t".into(), 0, offset(1))])
            .await
            .expect("commit");
        store.delete(Some("c"), None).await.expect("delete group c");
        for i in 0..200 {
            store
                .commit("x", vec![("t".into(), 0, offset(i))])
                .await
                .expect("commit");
        }
        assert!(
            store.log().watermarks().log_start_offset > 0,
            "no compaction ran: the test did not exercise it"
        );
        store.close().await.expect("close");
        let reopened = OffsetStore::open(&path, 5, cache).await.expect("reopen");
        let states = reopened.group_states();
        assert_eq!(states, vec![("a".to_owned(), stored_group(3))]);
        assert_eq!(reopened.get("x", "t", 0).map(|c| c.offset), Some(199));
    });
}
