//! The KIP-848 state machine: joins, incremental reconciliation (revoke before reassign),
//! fencing, timeouts, static members.

use std::time::{Duration, Instant};

use super::*;

fn topics() -> Topics {
    [("t".to_string(), 4)].into_iter().collect()
}

fn config() -> ConsumerConfig {
    ConsumerConfig::default()
}

fn parts(ps: &[i32]) -> Partitions {
    [("t".to_string(), ps.iter().copied().collect())]
        .into_iter()
        .collect()
}

fn join(g: &mut ConsumerGroup, id: &str, now: Instant) -> HeartbeatAnswer {
    g.heartbeat(
        &Heartbeat {
            group_id: "g".into(),
            member_id: id.into(),
            member_epoch: 0,
            rebalance_timeout_ms: 10_000,
            subscribed_topic_names: Some(vec!["t".into()]),
            owned: Some(Partitions::new()),
            ..Default::default()
        },
        &topics(),
        &config(),
        || unreachable!("the client names itself"),
        now,
    )
}

fn beat(
    g: &mut ConsumerGroup,
    id: &str,
    epoch: i32,
    owned: Option<Partitions>,
    now: Instant,
) -> HeartbeatAnswer {
    g.heartbeat(
        &Heartbeat {
            group_id: "g".into(),
            member_id: id.into(),
            member_epoch: epoch,
            rebalance_timeout_ms: -1,
            owned,
            ..Default::default()
        },
        &topics(),
        &config(),
        || unreachable!(),
        now,
    )
}

fn all_owned(g: &ConsumerGroup) -> Vec<(String, i32)> {
    let mut v: Vec<(String, i32)> = g
        .members
        .values()
        .flat_map(|m| {
            union(&m.assigned, &m.revoking)
                .into_iter()
                .flat_map(|(t, ps)| ps.into_iter().map(move |p| (t.clone(), p)))
                .collect::<Vec<_>>()
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_second_member_gets_partitions_only_after_the_first_revokes_them() {
    let now = Instant::now();
    let mut g = ConsumerGroup::default();
    let a = join(&mut g, "a", now);
    assert_eq!((a.error, a.member_epoch), (0, 1));
    assert_eq!(a.assignment, Some(parts(&[0, 1, 2, 3])));
    assert_eq!(g.state_name(), "Stable");

    let b = join(&mut g, "b", now);
    assert_eq!(b.member_epoch, 2, "b joins at the new assignment epoch");
    assert_eq!(
        b.assignment,
        Some(Partitions::new()),
        "nothing yet: a still owns everything"
    );
    assert_eq!(g.state_name(), "Reconciling");

    // a is told to revoke two partitions; its epoch stays until it has.
    let a = beat(&mut g, "a", 1, None, now);
    assert_eq!(a.member_epoch, 1);
    let kept = a.assignment.clone().expect("a new assignment");
    assert_eq!(count(&kept), 2);
    // No partition is ever owned twice.
    let owned = all_owned(&g);
    let mut dedup = owned.clone();
    dedup.dedup();
    assert_eq!(owned, dedup);
    // b asks again: still nothing, a has not revoked.
    assert_eq!(beat(&mut g, "b", 2, None, now).assignment, None);
    // a says it owns only what it kept: revocation done, epoch 2.
    let a = beat(&mut g, "a", 1, Some(kept.clone()), now);
    assert_eq!((a.member_epoch, a.assignment), (2, None));
    // Now b gets the released partitions.
    let b = beat(&mut g, "b", 2, None, now);
    let got = b.assignment.expect("b's partitions");
    assert_eq!(union(&got, &kept), parts(&[0, 1, 2, 3]));
    assert!(intersect(&got, &kept).is_empty());
    assert_eq!(g.state_name(), "Stable");
}

#[test]
fn stale_and_unknown_members_are_fenced() {
    let now = Instant::now();
    let mut g = ConsumerGroup::default();
    join(&mut g, "a", now);
    assert_eq!(
        beat(&mut g, "a", 7, None, now).error,
        codes::FENCED_MEMBER_EPOCH
    );
    assert_eq!(
        beat(&mut g, "zz", 1, None, now).error,
        codes::UNKNOWN_MEMBER_ID
    );
    assert_eq!(g.check_commit("a", 1), codes::NONE);
    assert_eq!(g.check_commit("a", 2), codes::STALE_MEMBER_EPOCH);
    assert_eq!(g.check_commit("zz", 1), codes::UNKNOWN_MEMBER_ID);
}

#[test]
fn offset_fetch_v9_wants_the_members_current_epoch() {
    let now = Instant::now();
    let mut g = ConsumerGroup::default();
    join(&mut g, "a", now);
    assert_eq!(g.check_fetch("a", 1), codes::NONE);
    assert_eq!(g.check_fetch("a", 0), codes::STALE_MEMBER_EPOCH);
    assert_eq!(g.check_fetch("a", 2), codes::STALE_MEMBER_EPOCH);
    assert_eq!(g.check_fetch("zz", 1), codes::UNKNOWN_MEMBER_ID);
}

#[test]
fn a_member_past_its_session_timeout_loses_its_partitions_to_the_others() {
    let now = Instant::now();
    let mut g = ConsumerGroup::default();
    join(&mut g, "a", now);
    join(&mut g, "b", now);
    let a = beat(&mut g, "a", 1, None, now).assignment.unwrap();
    beat(&mut g, "a", 1, Some(a), now);
    beat(&mut g, "b", 2, None, now);
    assert_eq!(g.state_name(), "Stable");
    // Only b heartbeats; a's session runs out.
    let later = now + Duration::from_secs(30);
    beat(&mut g, "b", 2, None, later);
    let gone = g.expire(now + Duration::from_secs(46));
    assert_eq!(gone, ["a"]);
    let b = beat(&mut g, "b", 2, None, now + Duration::from_secs(46));
    assert_eq!(b.member_epoch, g.assignment_epoch);
    assert_eq!(b.assignment, Some(parts(&[0, 1, 2, 3])));
    assert_eq!(
        beat(&mut g, "a", 2, None, now).error,
        codes::UNKNOWN_MEMBER_ID
    );
}

#[test]
fn members_leaving_one_after_another_do_not_fence_the_others() {
    // franz-go's TestGroupETL: two members leave between a third's heartbeats; the third
    // still sends the epoch it was last told and must get the new assignment, not be fenced.
    let now = Instant::now();
    let mut g = ConsumerGroup::default();
    for id in ["a", "b", "c"] {
        join(&mut g, id, now);
    }
    let a = beat(&mut g, "a", 1, None, now).assignment.unwrap();
    beat(&mut g, "a", 1, Some(a), now);
    let b = beat(&mut g, "b", 2, None, now).assignment.unwrap();
    beat(&mut g, "b", 3, Some(b), now);
    let c = beat(&mut g, "c", 3, None, now);
    let told = c.member_epoch;
    assert_eq!(told, g.assignment_epoch);
    for id in ["a", "b"] {
        let left = beat(&mut g, id, -1, None, now);
        assert_eq!(left.error, codes::NONE);
    }
    let c = beat(&mut g, "c", told, None, now);
    assert_eq!(c.error, codes::NONE, "{:?}", c.message);
    assert_eq!(c.member_epoch, g.assignment_epoch);
    assert_eq!(c.assignment, Some(parts(&[0, 1, 2, 3])));
}

#[test]
fn a_member_that_does_not_revoke_in_time_is_fenced() {
    let now = Instant::now();
    let mut g = ConsumerGroup::default();
    join(&mut g, "a", now);
    join(&mut g, "b", now);
    beat(&mut g, "a", 1, None, now); // told to revoke, never does
    beat(&mut g, "b", 2, None, now + Duration::from_secs(5));
    let gone = g.expire(now + Duration::from_secs(11));
    assert_eq!(gone, ["a"], "the rebalance timeout (10 s) passed");
    let b = beat(&mut g, "b", 2, None, now + Duration::from_secs(11));
    assert_eq!(b.assignment, Some(parts(&[0, 1, 2, 3])));
}

#[test]
fn a_static_member_that_leaves_for_a_while_is_replaced_with_its_partitions() {
    let now = Instant::now();
    let mut g = ConsumerGroup::default();
    let hb = |id: &str, epoch: i32| Heartbeat {
        group_id: "g".into(),
        member_id: id.into(),
        member_epoch: epoch,
        instance_id: Some("i1".into()),
        rebalance_timeout_ms: 10_000,
        subscribed_topic_names: Some(vec!["t".into()]),
        owned: Some(Partitions::new()),
        ..Default::default()
    };
    let a = g.heartbeat(&hb("a", 0), &topics(), &config(), || unreachable!(), now);
    assert_eq!(a.assignment, Some(parts(&[0, 1, 2, 3])));
    let epoch = g.group_epoch;
    g.heartbeat(&hb("a", -2), &topics(), &config(), || unreachable!(), now);
    assert_eq!(g.group_epoch, epoch, "a static leave does not rebalance");
    let b = g.heartbeat(&hb("b", 0), &topics(), &config(), || unreachable!(), now);
    assert_eq!((b.error, b.assignment), (0, Some(parts(&[0, 1, 2, 3]))));
    // A second member with the same instance id while b holds it is refused.
    let c = g.heartbeat(&hb("c", 0), &topics(), &config(), || unreachable!(), now);
    assert_eq!(c.error, codes::UNRELEASED_INSTANCE_ID);
}

#[test]
fn new_partitions_of_a_subscribed_topic_are_assigned() {
    let now = Instant::now();
    let mut g = ConsumerGroup::default();
    join(&mut g, "a", now);
    let more: Topics = [("t".to_string(), 6)].into_iter().collect();
    let a = g.heartbeat(
        &Heartbeat {
            group_id: "g".into(),
            member_id: "a".into(),
            member_epoch: 1,
            rebalance_timeout_ms: -1,
            ..Default::default()
        },
        &more,
        &config(),
        || unreachable!(),
        now,
    );
    assert_eq!(a.assignment, Some(parts(&[0, 1, 2, 3, 4, 5])));
    assert!(a.member_epoch > 1);
}

#[test]
fn first_requests_without_what_kafka_requires_are_invalid() {
    let mut g = ConsumerGroup::default();
    let a = g.heartbeat(
        &Heartbeat {
            group_id: "g".into(),
            member_id: "a".into(),
            member_epoch: 0,
            rebalance_timeout_ms: 1000,
            ..Default::default()
        },
        &topics(),
        &config(),
        || unreachable!(),
        Instant::now(),
    );
    assert_eq!(a.error, codes::INVALID_REQUEST);
    let b = g.heartbeat(
        &Heartbeat {
            group_id: "g".into(),
            member_id: "a".into(),
            member_epoch: 0,
            rebalance_timeout_ms: 1000,
            subscribed_topic_names: Some(vec!["t".into()]),
            server_assignor: Some("sticky".into()),
            ..Default::default()
        },
        &topics(),
        &config(),
        || unreachable!(),
        Instant::now(),
    );
    assert_eq!(b.error, codes::UNSUPPORTED_ASSIGNOR);
}

#[test]
fn a_stored_group_resumes_with_its_epochs_and_assignments() {
    let now = Instant::now();
    let mut g = ConsumerGroup::default();
    join(&mut g, "a", now);
    join(&mut g, "b", now);
    beat(&mut g, "a", 1, None, now); // a revoking two partitions
    let bytes = stored::encode(&g);
    let back = stored::decode(&bytes, &config(), now).expect("decodes");
    assert_eq!(stored::encode(&back), bytes, "the same state");
    assert_eq!(back.members["a"].state, MemberState::UnrevokedPartitions);
    assert_eq!(back.members["a"].revoking, g.members["a"].revoking);
    assert_eq!(back.target, g.target);
    // The restored group goes on where it was: a's revocation completes, b gets the rest.
    let mut back = back;
    let kept = back.members["a"].assigned.clone();
    assert_eq!(beat(&mut back, "a", 1, Some(kept), now).member_epoch, 2);
    let b = beat(&mut back, "b", 2, None, now);
    assert_eq!(count(&b.assignment.expect("b's partitions")), 2);
    assert!(stored::decode(&bytes[..bytes.len() - 1], &config(), now).is_none());
}

#[test]
fn a_topic_one_member_finds_by_regex_is_shared_with_the_others_at_once() {
    // librdkafka's 0113 n_wildcard with group.protocol=consumer: two members subscribe with
    // one regex before any topic matches; when two matching topics appear, the first member's
    // heartbeat resolves the regex for both, so each gets its half and nobody revokes.
    let now = Instant::now();
    let mut g = ConsumerGroup::default();
    let hb = |id: &str, epoch: i32, first: bool| Heartbeat {
        group_id: "g".into(),
        member_id: id.into(),
        member_epoch: epoch,
        rebalance_timeout_ms: if first { 10_000 } else { -1 },
        subscribed_topic_regex: first.then(|| "rx-.*".into()),
        owned: first.then(Partitions::new),
        ..Default::default()
    };
    let none = Topics::new();
    let mut epochs = Vec::new();
    for id in ["a", "b"] {
        let r = g.heartbeat(&hb(id, 0, true), &none, &config(), || unreachable!(), now);
        assert_eq!((r.error, r.assignment), (0, Some(Partitions::new())));
        epochs.push(r.member_epoch);
    }
    let two: Topics = [
        ("rx-1".to_string(), 2),
        ("rx-2".to_string(), 2),
        ("other".to_string(), 2),
    ]
    .into_iter()
    .collect();
    let mut beat_two = |id: &str, epoch: i32| {
        g.heartbeat(
            &hb(id, epoch, false),
            &two,
            &config(),
            || unreachable!(),
            now,
        )
    };
    let a = beat_two("a", epochs[0]);
    let b = beat_two("b", epochs[1]);
    assert_eq!((a.error, b.error), (0, 0), "{a:?} {b:?}");
    let (a, b) = (a.assignment.unwrap(), b.assignment.unwrap());
    assert_eq!((count(&a), count(&b)), (2, 2), "{a:?} {b:?}");
    assert_eq!(count(&union(&a, &b)), 4);
    assert!(!union(&a, &b).contains_key("other"));
    assert!(g.members.values().all(|m| m.revoking.is_empty()));
}
