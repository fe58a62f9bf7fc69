//! A coordinator taking a bucket over in a cluster (`Coordinator::prepare`): the groups the
//! previous leader stored in the bucket's partition are restored, Stable, with their members.

use std::cell::Cell;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::rc::Rc;

use bytes::Bytes;
use weir_storage::{BatchCache, Log};

use super::coordinator::*;
use super::offsets::{internal_log_config, run_on_disk, BucketReplica};
use crate::broker::errors;

/// Every bucket's partition as its Raft group would show it to a coordinator: one log, and
/// the term of whoever leads it now (an append at another term is refused, as the shard
/// refuses it).
struct Partition {
    log: Rc<Log>,
    term: Cell<u64>,
}

impl BucketReplica for Partition {
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

fn join_req(session_ms: i32) -> JoinRequest {
    JoinRequest {
        group_id: "g".into(),
        member_id: String::new(),
        group_instance_id: None,
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: session_ms,
        rebalance_timeout_ms: session_ms,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::from_static(b"md"))],
    }
}

async fn coordinator(dir: &std::path::Path, part: &Rc<Partition>) -> Coordinator {
    let config = GroupConfig {
        initial_rebalance_delay_ms: 0,
        min_session_timeout_ms: 10,
        ..GroupConfig::default()
    };
    let c = Coordinator::open(dir, 0, 1, BatchCache::new(1 << 20), config)
        .await
        .expect("open");
    c.set_replica(part.clone());
    c
}

/// Issue 19 ("what is left", item 2): a new leader of a bucket's partition used to drop the
/// bucket's groups, so the members' heartbeats got UNKNOWN_MEMBER_ID and they rejoined. It
/// now restores the groups the old leader stored: the same member, generation and
/// assignment; its heartbeat and its commit of that generation succeed at the new leader.
/// The deposed leader can no longer store anything (its term is over).
#[test]
fn a_new_leader_restores_the_groups_the_old_one_stored() {
    run_on_disk(|path| async move {
        let log = Log::open_with_cache(
            path.join("p"),
            internal_log_config(),
            BatchCache::new(8 << 20),
        )
        .await
        .expect("log");
        let part = Rc::new(Partition {
            log: Rc::new(log),
            term: Cell::new(1),
        });
        let old = coordinator(&path.join("old"), &part).await;
        old.prepare("g").await.expect("load at term 1");
        let j = old.join(join_req(10_000)).await;
        assert_eq!((j.error, j.generation_id), (codes::NONE, 1));
        let s = old
            .sync(SyncRequest {
                group_id: "g".into(),
                generation_id: 1,
                member_id: j.member_id.clone(),
                group_instance_id: None,
                protocol_type: Some("consumer".into()),
                protocol_name: j.protocol_name.clone(),
                assignments: vec![(j.member_id.clone(), Bytes::from_static(b"p0,p1"))],
            })
            .await;
        assert_eq!(s.error, codes::NONE);

        // The partition's leadership moves (term 2) to another broker's core.
        part.term.set(2);
        let new = coordinator(&path.join("new"), &part).await;
        assert_eq!(
            new.describe("g").error,
            codes::NOT_COORDINATOR,
            "not loaded yet"
        );
        new.prepare("g").await.expect("load at term 2");
        let d = new.describe("g");
        assert_eq!((d.error, d.state.as_str()), (codes::NONE, "Stable"));
        let members: Vec<_> = d
            .members
            .iter()
            .map(|m| (m.member_id.as_str(), &m.assignment[..]))
            .collect();
        assert_eq!(members, vec![(j.member_id.as_str(), &b"p0,p1"[..])]);
        assert_eq!(new.heartbeat("g", &j.member_id, None, 1), codes::NONE);
        let part0 = CommitPart {
            topic: "t".into(),
            partition: 0,
            offset: 5,
            leader_epoch: -1,
            metadata: None,
        };
        assert_eq!(
            new.commit_offsets("g", 1, &j.member_id, None, vec![part0.clone()])
                .await,
            vec![codes::NONE]
        );
        // The old leader's groups are gone at its next tick; it serves nothing of the bucket.
        old.tick();
        assert_eq!(
            old.heartbeat("g", &j.member_id, None, 1),
            codes::UNKNOWN_MEMBER_ID
        );
        assert_eq!(
            old.commit_offsets("g", 1, &j.member_id, None, vec![part0])
                .await,
            vec![codes::NOT_COORDINATOR]
        );
    });
}
