//! A coordinator taking a bucket over in a cluster (`Coordinator::prepare`): the groups the
//! previous leader stored in the bucket's partition are restored, Stable, with their members.

use std::rc::Rc;

use bytes::Bytes;
use weir_storage::BatchCache;

use super::coordinator::*;
use super::offsets::run_on_disk;
use super::tests::join_req;

type Partition = super::offsets::fake_replica::FakeReplica;

async fn coordinator(dir: &std::path::Path, part: &Rc<Partition>) -> Coordinator {
    let config = GroupConfig {
        initial_rebalance_delay_ms: 0,
        min_session_timeout_ms: 10,
        ..GroupConfig::default()
    };
    let c = Coordinator::open(
        dir,
        0,
        1,
        BatchCache::new(1 << 20),
        config,
        Default::default(),
    )
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
        let part = Partition::open(&path, super::offsets::COMPACTION_MIN_BYTES).await;
        let old = coordinator(&path.join("old"), &part).await;
        old.prepare("g").await.expect("load at term 1");
        let j = old.join(join_req("", 10_000)).await;
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
