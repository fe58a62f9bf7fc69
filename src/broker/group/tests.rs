//! The coordinator with real offset logs on disk.

use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use weir_storage::BatchCache;

use super::coordinator::*;

use super::offsets::run_on_disk as run;

fn config() -> GroupConfig {
    GroupConfig {
        initial_rebalance_delay_ms: 50,
        min_session_timeout_ms: 10,
        ..GroupConfig::default()
    }
}

pub(super) fn join_req(member: &str, session_ms: i32) -> JoinRequest {
    JoinRequest {
        group_id: "g".into(),
        member_id: member.into(),
        group_instance_id: None,
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: session_ms,
        rebalance_timeout_ms: session_ms,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::from_static(b"md"))],
    }
}

/// Opens a coordinator and drives its `tick`, as the broker's core does.
/// Waits (20 s at most, else fails with `what`) until group "g"'s stored state is removed.
async fn state_removed(c: &Coordinator, what: &str) {
    let store = c.offsets.store("g").expect("store");
    let start = Instant::now();
    while store.has_group_state("g") {
        assert!(start.elapsed() < Duration::from_secs(20), "{what}");
        glommio::timer::sleep(Duration::from_millis(10)).await;
    }
}

pub(super) async fn open(dir: &Path) -> Rc<Coordinator> {
    let c = Rc::new(
        Coordinator::open(
            dir,
            0,
            1,
            BatchCache::new(1 << 20),
            config(),
            Default::default(),
        )
        .await
        .expect("open"),
    );
    let weak = Rc::downgrade(&c);
    glommio::spawn_local(async move {
        while let Some(c) = weak.upgrade() {
            c.tick();
            drop(c);
            glommio::timer::sleep(Duration::from_millis(10)).await;
        }
    })
    .detach();
    c
}

/// Joins `n` new members concurrently and syncs them (the leader assigns "a-<member>").
pub(super) async fn form_group(
    c: &Rc<Coordinator>,
    n: usize,
    session_ms: i32,
) -> Vec<JoinResponse> {
    form_group_with(c, &vec![session_ms; n]).await
}

/// [`form_group`] with one member per session timeout of `sessions_ms`, in that order.
async fn form_group_with(c: &Rc<Coordinator>, sessions_ms: &[i32]) -> Vec<JoinResponse> {
    let tasks: Vec<_> = sessions_ms
        .iter()
        .map(|&session_ms| {
            let c = c.clone();
            glommio::spawn_local(async move { c.join(join_req("", session_ms)).await })
        })
        .collect();
    let mut joins = Vec::new();
    for t in tasks {
        joins.push(t.await);
    }
    joins
}

pub(super) async fn sync_all(c: &Rc<Coordinator>, joins: &[JoinResponse]) -> Vec<SyncResponse> {
    sync_all_with(c, joins, |m| Bytes::from(format!("a-{m}"))).await
}

/// Syncs every joined member, the leader giving each member `assign(member id)`.
pub(super) async fn sync_all_with(
    c: &Rc<Coordinator>,
    joins: &[JoinResponse],
    assign: impl Fn(&str) -> Bytes + Clone + 'static,
) -> Vec<SyncResponse> {
    let tasks: Vec<_> = joins
        .iter()
        .map(|j| {
            let c = c.clone();
            let j = j.clone();
            let assign = assign.clone();
            glommio::spawn_local(async move {
                let assignments = j
                    .members
                    .iter()
                    .map(|(m, _, _)| (m.clone(), assign(m)))
                    .collect();
                c.sync(SyncRequest {
                    group_id: "g".into(),
                    generation_id: j.generation_id,
                    member_id: j.member_id.clone(),
                    group_instance_id: None,
                    protocol_type: Some("consumer".into()),
                    protocol_name: j.protocol_name.clone(),
                    assignments,
                })
                .await
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await);
    }
    out
}

#[test]
fn members_join_sync_and_get_their_assignment() {
    run(|dir| async move {
        let c = open(&dir).await;
        let joins = form_group(&c, 3, 10_000).await;
        assert!(joins
            .iter()
            .all(|j| j.error == codes::NONE && j.generation_id == 1));
        let leaders: Vec<_> = joins.iter().filter(|j| !j.members.is_empty()).collect();
        assert_eq!(leaders.len(), 1, "exactly one leader gets the member list");
        assert_eq!(leaders[0].members.len(), 3);
        assert!(joins.iter().all(|j| j.leader == leaders[0].member_id));
        let syncs = sync_all(&c, &joins).await;
        for (j, s) in joins.iter().zip(&syncs) {
            assert_eq!(s.error, codes::NONE);
            assert_eq!(s.assignment, Bytes::from(format!("a-{}", j.member_id)));
        }
        assert_eq!(c.describe("g").state, "Stable");
        assert_eq!(c.heartbeat("g", &joins[0].member_id, None, 1), codes::NONE);
        assert_eq!(
            c.heartbeat("g", &joins[0].member_id, None, 0),
            codes::ILLEGAL_GENERATION
        );
        assert_eq!(
            c.heartbeat("g", "nobody", None, 1),
            codes::UNKNOWN_MEMBER_ID
        );
    });
}

#[test]
fn a_new_member_triggers_a_rebalance_and_leaving_another() {
    run(|dir| async move {
        let c = open(&dir).await;
        let joins = form_group(&c, 2, 10_000).await;
        sync_all(&c, &joins).await;
        // A third member arrives: the others learn it from their heartbeat and rejoin.
        let c3 = c.clone();
        let third = glommio::spawn_local(async move { c3.join(join_req("", 10_000)).await });
        futures_lite::future::yield_now().await;
        assert_eq!(
            c.heartbeat("g", &joins[0].member_id, None, 1),
            codes::REBALANCE_IN_PROGRESS
        );
        let rejoin: Vec<_> = joins
            .iter()
            .map(|j| {
                let c = c.clone();
                let id = j.member_id.clone();
                glommio::spawn_local(async move { c.join(join_req(&id, 10_000)).await })
            })
            .collect();
        let mut joins2 = vec![third.await];
        for t in rejoin {
            joins2.push(t.await);
        }
        assert!(
            joins2
                .iter()
                .all(|j| j.error == codes::NONE && j.generation_id == 2),
            "{joins2:?}"
        );
        sync_all(&c, &joins2).await;
        // One leaves: the rest rebalance to generation 3.
        let (err, _) = c.leave("g", &[(joins2[0].member_id.clone(), None)]).await;
        assert_eq!(err, codes::NONE);
        assert_eq!(c.describe("g").state, "PreparingRebalance");
        let rest: Vec<_> = joins2[1..]
            .iter()
            .map(|j| {
                let c = c.clone();
                let id = j.member_id.clone();
                glommio::spawn_local(async move { c.join(join_req(&id, 10_000)).await })
            })
            .collect();
        for t in rest {
            let j = t.await;
            assert_eq!((j.error, j.generation_id), (codes::NONE, 3));
        }
    });
}

/// KIP-345 (issue 21): weir only recorded group.instance.id, so a restarted static
/// member was a new member (rebalance), its old incarnation was not fenced and
/// LeaveGroup by instance id did not find it.
#[test]
fn static_member_restart_fencing_and_leave_by_instance_id() {
    run(|dir| async move {
        let c = open(&dir).await;
        let stat = |member: &str| JoinRequest {
            group_instance_id: Some("i1".into()),
            ..join_req(member, 10_000)
        };
        let first = c.join(stat("")).await;
        assert_eq!(first.error, codes::NONE);
        sync_all(&c, std::slice::from_ref(&first)).await;
        // The restart: no member id, same instance id, same protocols.
        let again = c.join(stat("")).await;
        assert_eq!(again.error, codes::NONE);
        assert_ne!(again.member_id, first.member_id);
        assert_eq!(again.generation_id, first.generation_id, "no rebalance");
        assert_eq!(c.describe("g").state, "Stable");
        let sync = c
            .sync(SyncRequest {
                group_id: "g".into(),
                generation_id: again.generation_id,
                member_id: again.member_id.clone(),
                group_instance_id: Some("i1".into()),
                protocol_type: None,
                protocol_name: None,
                assignments: Vec::new(),
            })
            .await;
        assert_eq!(sync.error, codes::NONE);
        assert_eq!(sync.assignment, format!("a-{}", first.member_id).as_bytes());
        let gen = again.generation_id;
        assert_eq!(
            c.heartbeat("g", &first.member_id, Some("i1"), gen),
            codes::FENCED_INSTANCE_ID
        );
        assert_eq!(
            c.heartbeat("g", &again.member_id, Some("i1"), gen),
            codes::NONE
        );
        let part = CommitPart {
            topic: "t".into(),
            partition: 0,
            offset: 1,
            leader_epoch: -1,
            metadata: None,
        };
        assert_eq!(
            c.commit_offsets("g", gen, &first.member_id, Some("i1"), vec![part])
                .await,
            vec![codes::FENCED_INSTANCE_ID]
        );
        let (_, errs) = c
            .leave(
                "g",
                &[
                    (first.member_id.clone(), Some("i1".into())),
                    (String::new(), Some("nobody".into())),
                ],
            )
            .await;
        assert_eq!(
            errs,
            vec![codes::FENCED_INSTANCE_ID, codes::UNKNOWN_MEMBER_ID]
        );
        let (_, errs) = c.leave("g", &[(String::new(), Some("i1".into()))]).await;
        assert_eq!(errs, vec![codes::NONE]);
        assert_eq!(c.describe("g").members.len(), 0);
    });
}

#[test]
fn a_silent_member_is_removed_after_its_session_timeout() {
    run(|dir| async move {
        let c = open(&dir).await;
        // Member 0 (a long session) keeps heartbeating; member 1 (200 ms) goes silent. The
        // long session keeps member 0 in the group however late a loaded machine wakes us.
        let joins = form_group_with(&c, &[30_000, 200]).await;
        sync_all(&c, &joins).await;
        let start = Instant::now();
        loop {
            glommio::timer::sleep(Duration::from_millis(50)).await;
            let hb = c.heartbeat("g", &joins[0].member_id, None, 1);
            c.tick();
            if hb == codes::REBALANCE_IN_PROGRESS {
                break;
            }
            assert_eq!(hb, codes::NONE);
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "silent member never expired"
            );
        }
        assert!(start.elapsed() >= Duration::from_millis(200));
        let j = c.join(join_req(&joins[0].member_id, 30_000)).await;
        assert_eq!(
            (j.error, j.generation_id, j.members.len()),
            (codes::NONE, 2, 1)
        );
    });
}

#[test]
fn offsets_are_durable_checked_and_deleted_with_the_group() {
    run(|dir| async move {
        let c = open(&dir).await;
        let part = |offset| CommitPart {
            topic: "t".into(),
            partition: 0,
            offset,
            leader_epoch: -1,
            metadata: Some("m".into()),
        };
        // A consumer that uses assign() commits without membership.
        assert_eq!(
            c.commit_offsets("g", -1, "", None, vec![part(5)]).await,
            vec![codes::NONE]
        );
        let joins = form_group(&c, 1, 10_000).await;
        sync_all(&c, &joins).await;
        assert_eq!(
            c.commit_offsets("g", 7, &joins[0].member_id, None, vec![part(6)])
                .await,
            vec![codes::ILLEGAL_GENERATION]
        );
        assert_eq!(
            c.commit_offsets("g", 1, "stranger", None, vec![part(6)])
                .await,
            vec![codes::UNKNOWN_MEMBER_ID]
        );
        assert_eq!(
            c.commit_offsets("g", 1, &joins[0].member_id, None, vec![part(9)])
                .await,
            vec![codes::NONE]
        );
        assert_eq!(c.delete_group("g").await, codes::NON_EMPTY_GROUP);
        c.leave("g", &[(joins[0].member_id.clone(), None)]).await;
        drop(c);
        let c = open(&dir).await;
        let got = c
            .fetch_offsets("g", Some(vec![("t".into(), vec![0, 1])]), false)
            .expect("fetch");
        assert_eq!(got[0].2.offset, 9, "the last commit survives a restart");
        assert_eq!(got[0].2.metadata, "m");
        assert_eq!(got[1].2.offset, -1, "uncommitted partitions answer -1");
        assert_eq!(c.list().len(), 1);
        assert_eq!(c.delete_group("g").await, codes::NONE);
        assert_eq!(c.delete_group("g").await, codes::GROUP_ID_NOT_FOUND);
        assert!(c.fetch_offsets("g", None, false).expect("fetch").is_empty());
    });
}

#[test]
fn many_commits_keep_the_offsets_log_small() {
    run(|dir| async move {
        let c = open(&dir).await;
        let md = "x".repeat(2000);
        for i in 0..3000 {
            let parts = vec![CommitPart {
                topic: "t".into(),
                partition: 0,
                offset: i,
                leader_epoch: -1,
                metadata: Some(md.clone()),
            }];
            assert_eq!(
                c.commit_offsets("g", -1, "", None, parts).await,
                vec![codes::NONE]
            );
        }
        let store = c.offsets.store("g").expect("store");
        let (_, bytes) = store.log_size();
        assert!(
            bytes < 24 << 20,
            "offsets log holds {bytes} bytes for one live offset"
        );
        drop(store);
        drop(c);
        let c = open(&dir).await;
        assert_eq!(
            c.fetch_offsets("g", None, false).expect("fetch")[0]
                .2
                .offset,
            2999
        );
    });
}

/// Issue 19 ("what is left", item 2): a coordinator that loads a bucket — here the same
/// broker after a restart — used to start with no groups, so every member's heartbeat got
/// UNKNOWN_MEMBER_ID and the group rebalanced. The generation stored when the group became
/// Stable is restored instead: same members, generation, leader and assignments; heartbeats
/// and commits of that generation succeed; the members' sessions start afresh at load.
#[test]
fn a_stable_group_resumes_after_a_restart_without_a_rebalance() {
    run(|dir| async move {
        let c = open(&dir).await;
        let joins = form_group(&c, 2, 400).await;
        let syncs = sync_all(&c, &joins).await;
        assert!(syncs.iter().all(|s| s.error == codes::NONE));
        let leader = joins[0].leader.clone();
        let before = c.describe("g");
        drop(c);
        // Longer than the sessions: a restored member's session must start at load.
        glommio::timer::sleep(Duration::from_millis(500)).await;

        let c = open(&dir).await;
        let d = c.describe("g");
        assert_eq!((d.state.as_str(), d.protocol.as_str()), ("Stable", "range"));
        let ids = |d: &GroupDescription| -> Vec<(String, Bytes)> {
            d.members
                .iter()
                .map(|m| (m.member_id.clone(), m.assignment.clone()))
                .collect()
        };
        assert_eq!(ids(&d), ids(&before), "members or assignments changed");
        for j in &joins {
            assert_eq!(c.heartbeat("g", &j.member_id, None, 1), codes::NONE);
        }
        let part = CommitPart {
            topic: "t".into(),
            partition: 0,
            offset: 3,
            leader_epoch: -1,
            metadata: None,
        };
        assert_eq!(
            c.commit_offsets("g", 1, &joins[1].member_id, None, vec![part])
                .await,
            vec![codes::NONE],
            "a commit of the restored generation is refused"
        );
        // A follower rejoining with the same protocols keeps the generation (no rebalance).
        let follower = joins.iter().find(|j| j.member_id != leader).expect("two");
        let j = c.join(join_req(&follower.member_id, 400)).await;
        assert_eq!(
            (j.error, j.generation_id, j.leader),
            (codes::NONE, 1, leader)
        );

        // The clients are gone: both sessions expire, the group empties and its stored state
        // is removed, so the next start has no group to restore.
        let start = Instant::now();
        while c.describe("g").state != "Empty" {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "members never expired"
            );
            glommio::timer::sleep(Duration::from_millis(20)).await;
        }
        assert!(start.elapsed() >= Duration::from_millis(300));
        state_removed(&c, "state never removed").await;
        drop(c);
        let c = open(&dir).await;
        let d = c.describe("g");
        assert_eq!((d.state.as_str(), d.members.len()), ("Empty", 0));
        assert_eq!(
            c.heartbeat("g", &joins[0].member_id, None, 1),
            codes::UNKNOWN_MEMBER_ID
        );
    });
}

/// A static member that restarts into a Stable group takes its place under a new member id
/// without a rebalance; the stored state must follow, or the coordinator that restores it
/// would fence the member (FENCED_INSTANCE_ID) with the old id.
#[test]
fn a_static_members_new_id_is_what_a_restart_restores() {
    run(|dir| async move {
        let c = open(&dir).await;
        let mut req = join_req("", 10_000);
        req.group_instance_id = Some("i1".into());
        let first = c.join(req.clone()).await;
        sync_all(&c, std::slice::from_ref(&first)).await;
        let again = c.join(req).await;
        assert_eq!((again.error, again.generation_id), (codes::NONE, 1));
        assert_ne!(again.member_id, first.member_id);
        drop(c);
        let c = open(&dir).await;
        assert_eq!(
            c.heartbeat("g", &again.member_id, Some("i1"), 1),
            codes::NONE
        );
        assert_eq!(
            c.heartbeat("g", &first.member_id, Some("i1"), 1),
            codes::FENCED_INSTANCE_ID
        );
    });
}

/// Regression: the last member left while the group's Stable state was being written. The
/// leave found nothing stored to remove, then the write landed, and a restart brought the
/// member who left back (or, on a running broker, until the next tick noticed). The write
/// is held here (the coordinator's lock on state writes) until the member has left, and the
/// coordinator is not ticked: the state must be removed without that help.
#[test]
fn a_group_that_empties_while_its_state_is_written_is_not_restored() {
    run(|dir| async move {
        // No initial delay: the join completes without a tick.
        let no_delay = GroupConfig {
            initial_rebalance_delay_ms: 0,
            ..config()
        };
        let c = Rc::new(
            Coordinator::open(
                &dir,
                0,
                1,
                BatchCache::new(1 << 20),
                no_delay,
                Default::default(),
            )
            .await
            .expect("open"),
        );
        let join = c.join(join_req("", 10_000)).await;
        let held = c.persist_lock.acquire_permit(1).await.expect("lock");
        let sync = {
            let (c, j) = (c.clone(), join.clone());
            glommio::spawn_local(async move {
                c.sync(SyncRequest {
                    group_id: "g".into(),
                    generation_id: j.generation_id,
                    member_id: j.member_id.clone(),
                    group_instance_id: None,
                    protocol_type: Some("consumer".into()),
                    protocol_name: j.protocol_name.clone(),
                    assignments: vec![(j.member_id.clone(), Bytes::from_static(b"a"))],
                })
                .await
            })
        };
        glommio::timer::sleep(Duration::from_millis(20)).await;
        let (err, _) = c.leave("g", &[(join.member_id.clone(), None)]).await;
        assert_eq!(err, codes::NONE);
        drop(held);
        assert_eq!(sync.await.error, codes::UNKNOWN_MEMBER_ID);
        state_removed(&c, "the state of a group its last member left stays stored").await;
        drop(c);
        let c = open(&dir).await;
        assert_eq!(c.describe("g").members.len(), 0);
    });
}
