//! Classic members in a consumer-protocol group (an online migration): the upgrade of a
//! classic group, the classic members' join / sync / heartbeat round trips towards the
//! broker's assignment, and no partition owned twice at any step.

use std::time::Instant;

use bytes::Bytes;

use super::assign::{intersect, Partitions};
use super::embedded::{decode_assignment, encode_subscription};
use super::*;
use crate::broker::group::state::{codes as classic_codes, JoinRequest};

fn topics() -> Topics {
    [("t".to_string(), 6)].into_iter().collect()
}

fn parts(ps: &[i32]) -> Partitions {
    [("t".to_string(), ps.iter().copied().collect())]
        .into_iter()
        .collect()
}

fn classic(id: &str, ps: &[i32]) -> ClassicMember {
    ClassicMember {
        id: id.into(),
        instance_id: None,
        client_id: "java".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout: Duration::from_secs(45),
        rebalance_timeout: Duration::from_secs(300),
        protocols: vec![("cooperative-sticky".into(), metadata(&[]))],
        rack_id: None,
        assigned: parts(ps),
    }
}

fn metadata(owned: &[i32]) -> Bytes {
    encode_subscription(1, &["t".to_string()], &parts(owned))
}

/// A Java cooperative-sticky member's JoinGroup, owning `owned`.
fn join_request(id: &str, owned: &[i32]) -> JoinRequest {
    JoinRequest {
        group_id: "g".into(),
        member_id: id.into(),
        group_instance_id: None,
        client_id: "java".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 45_000,
        rebalance_timeout_ms: 300_000,
        protocol_type: "consumer".into(),
        protocols: vec![("cooperative-sticky".into(), metadata(owned))],
    }
}

fn join_classic(g: &mut ConsumerGroup, id: &str, owned: &[i32], now: Instant) -> i32 {
    let req = join_request(id, owned);
    let j = g.classic_join(
        &req,
        &topics(),
        &ConsumerConfig::default(),
        || unreachable!(),
        now,
    );
    assert_eq!(j.error, classic_codes::NONE, "{j:?}");
    assert_eq!(j.protocol_name.as_deref(), Some("cooperative-sticky"));
    assert!(j.leader.is_empty(), "no classic member assigns");
    j.generation_id
}

fn sync(g: &mut ConsumerGroup, id: &str, generation: i32, now: Instant) -> Vec<i32> {
    let a = g
        .classic_sync(
            id,
            None,
            generation,
            Some("consumer"),
            Some("cooperative-sticky"),
            now,
        )
        .expect("synced");
    decode_assignment(&a)
        .unwrap()
        .get("t")
        .map_or(Vec::new(), |s| s.iter().copied().collect())
}

fn beat(
    g: &mut ConsumerGroup,
    id: &str,
    epoch: i32,
    owned: &[i32],
    now: Instant,
) -> HeartbeatAnswer {
    g.heartbeat(
        &Heartbeat {
            group_id: "g".into(),
            member_id: id.into(),
            member_epoch: epoch,
            rebalance_timeout_ms: if epoch == 0 { 10_000 } else { -1 },
            subscribed_topic_names: (epoch == 0).then(|| vec!["t".into()]),
            owned: Some(parts(owned)),
            ..Default::default()
        },
        &topics(),
        &ConsumerConfig::default(),
        || unreachable!(),
        now,
    )
}

/// No partition is held (assigned or being revoked) by two members.
fn assert_exclusive(g: &ConsumerGroup) {
    let ms: Vec<&Member> = g.members.values().collect();
    for (i, a) in ms.iter().enumerate() {
        for b in &ms[i + 1..] {
            let held_a = union(&a.assigned, &a.revoking);
            let held_b = union(&b.assigned, &b.revoking);
            assert!(
                intersect(&held_a, &held_b).is_empty(),
                "{} and {} share partitions",
                a.id,
                b.id
            );
        }
    }
}

#[test]
fn a_consumer_member_joins_an_upgraded_group_and_classic_members_give_way_first() {
    let now = Instant::now();
    let mut g = ConsumerGroup::from_classic(
        7,
        vec![classic("a", &[0, 1, 2]), classic("b", &[3, 4, 5])],
        vec![vec!["t".into()], vec!["t".into()]],
        &topics(),
        now,
    );
    assert_eq!((g.group_epoch, g.members["a"].epoch), (7, 7));
    // The classic members' heartbeats of generation 7 succeed until something changes.
    assert_eq!(g.classic_heartbeat("a", None, 7, now), classic_codes::NONE);

    // A consumer-protocol member joins: it gets nothing until the classic members give way.
    let c = beat(&mut g, "c", 0, &[], now);
    assert_eq!(c.error, codes::NONE);
    assert_eq!(c.assignment, Some(Partitions::new()));
    assert_eq!(g.group_epoch, 8);
    assert_eq!(
        g.classic_heartbeat("a", None, 7, now),
        classic_codes::REBALANCE_IN_PROGRESS
    );
    assert_eq!(
        g.classic_heartbeat("b", None, 7, now),
        classic_codes::REBALANCE_IN_PROGRESS
    );

    // A cooperative member rejoins owning its partitions: it keeps its epoch until it gave up
    // what moves; its SyncGroup gives what it keeps.
    let gen = join_classic(&mut g, "a", &[0, 1, 2], now);
    assert_eq!(gen, 7);
    let kept = sync(&mut g, "a", gen, now);
    assert_exclusive(&g);
    assert!(kept.len() < 3, "a gives something up: {kept:?}");
    // It rejoins without them: now at the group's epoch.
    let gen = join_classic(&mut g, "a", &kept, now);
    assert_eq!(gen, 8);
    assert_eq!(sync(&mut g, "a", gen, now), kept);
    assert_eq!(g.classic_heartbeat("a", None, 8, now), classic_codes::NONE);

    // An eager member rejoins owning nothing: no revocation round.
    let gen = join_classic(&mut g, "b", &[], now);
    assert_eq!(gen, 8);
    let b = sync(&mut g, "b", gen, now);
    assert_exclusive(&g);

    // The consumer member gets the freed partitions at its next heartbeat.
    let c = beat(&mut g, "c", c.member_epoch, &[], now);
    let got: Vec<i32> = c
        .assignment
        .unwrap()
        .get("t")
        .map_or(Vec::new(), |s| s.iter().copied().collect());
    assert_exclusive(&g);
    let mut all: Vec<i32> = kept.iter().chain(&b).chain(&got).copied().collect();
    all.sort();
    assert_eq!(all, vec![0, 1, 2, 3, 4, 5], "every partition has one owner");
    assert_eq!(
        got.len(),
        2,
        "the uniform assignor balances 6 partitions over 3 members"
    );

    // Commits: a classic member with its generation, not another.
    assert_eq!(g.check_commit("a", 8), codes::NONE);
    assert_eq!(g.check_commit("a", 7), codes::ILLEGAL_GENERATION);

    // The consumer member leaves: only classic members remain, the group goes back.
    let left = beat(&mut g, "c", -1, &[], now);
    assert_eq!(left.error, codes::NONE);
    assert!(g.only_classic());
    let back = g.into_classic();
    let mut all: Vec<i32> = back
        .iter()
        .flat_map(|m| m.assigned.get("t").cloned().unwrap_or_default())
        .collect();
    all.sort();
    assert_eq!(
        all,
        vec![0, 1, 2, 3, 4, 5],
        "the target covers every partition"
    );
}

#[test]
fn classic_requests_are_checked_as_kafka_checks_them() {
    let now = Instant::now();
    let mut g = ConsumerGroup::from_classic(
        3,
        vec![classic("a", &[0])],
        vec![vec!["t".into()]],
        &topics(),
        now,
    );
    beat(&mut g, "c", 0, &[], now);
    assert_eq!(
        g.classic_heartbeat("a", None, 2, now),
        classic_codes::ILLEGAL_GENERATION
    );
    assert_eq!(
        g.classic_heartbeat("zz", None, 3, now),
        classic_codes::UNKNOWN_MEMBER_ID
    );
    // A consumer-protocol member's id is not a classic member.
    assert_eq!(
        g.classic_heartbeat("c", None, 4, now),
        classic_codes::UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        g.classic_sync("a", None, 3, Some("consumer"), Some("range"), now),
        Err(classic_codes::INCONSISTENT_GROUP_PROTOCOL)
    );
    // Behind the group epoch and nothing to revoke: rejoin first.
    assert_eq!(
        g.classic_sync("a", None, 3, None, None, now),
        Err(classic_codes::REBALANCE_IN_PROGRESS)
    );
    // A JoinGroup with another protocol type, or metadata that is not a subscription.
    let mut req = join_request("", &[]);
    req.session_timeout_ms = 10_000;
    req.rebalance_timeout_ms = 10_000;
    req.protocol_type = "connect".into();
    let cfg = ConsumerConfig::default();
    let j = g.classic_join(&req, &topics(), &cfg, || "n".into(), now);
    assert_eq!(j.error, classic_codes::INCONSISTENT_GROUP_PROTOCOL);
    req.protocol_type = "consumer".into();
    req.protocols = vec![(
        "cooperative-sticky".into(),
        Bytes::from_static(&[0, 1, 0xff]),
    )];
    let j = g.classic_join(&req, &topics(), &cfg, || "n".into(), now);
    assert_eq!(j.error, classic_codes::INCONSISTENT_GROUP_PROTOCOL);
    // A protocol no classic member supports.
    req.protocols = vec![("range".into(), metadata(&[]))];
    let j = g.classic_join(&req, &topics(), &cfg, || "n".into(), now);
    assert_eq!(j.error, classic_codes::INCONSISTENT_GROUP_PROTOCOL);
    // A new classic member joins with an id the broker gives it.
    req.protocols = vec![("cooperative-sticky".into(), metadata(&[]))];
    let j = g.classic_join(&req, &topics(), &cfg, || "n".into(), now);
    assert_eq!((j.error, j.member_id.as_str()), (classic_codes::NONE, "n"));
    // A classic member that does not sync within its rebalance timeout is fenced.
    let later = now + Duration::from_secs(11);
    assert!(g.expire(later).contains(&"n".to_string()));
}

#[test]
fn a_mixed_group_is_stored_with_its_classic_members() {
    let now = Instant::now();
    let mut g = ConsumerGroup::from_classic(
        3,
        vec![classic("a", &[0, 1])],
        vec![vec!["t".into()]],
        &topics(),
        now,
    );
    beat(&mut g, "c", 0, &[], now);
    let cfg = ConsumerConfig::default();
    let back = stored::decode(&stored::encode(&g), &cfg, now).expect("decodes");
    let a = &back.members["a"];
    let c = a.classic.as_ref().expect("still a classic member");
    assert_eq!(c.session_timeout, Duration::from_secs(45));
    assert_eq!(
        c.protocols,
        g.members["a"].classic.as_ref().unwrap().protocols
    );
    assert!(back.members["c"].classic.is_none());
}
