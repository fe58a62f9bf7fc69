//! The online migration through the coordinator and its stored states (real offset logs):
//! a classic group upgraded by a joining consumer-protocol member, the refusals Kafka gives,
//! the downgrade when that member leaves, and the mixed group resumed after a restart.

use std::rc::Rc;
use std::time::Duration;

use super::consumer::{embedded, Heartbeat, HeartbeatAnswer, Topics};
use super::coordinator::*;
use super::offsets::run_on_disk as run;
use super::service::{serve, GroupReq, GroupResp};
use super::tests::{form_group, open, sync_all, sync_all_with};

fn topics() -> Topics {
    [("t".to_string(), 4)].into_iter().collect()
}

fn parts(ps: &[i32]) -> embedded::Partitions {
    [("t".to_string(), ps.iter().copied().collect())]
        .into_iter()
        .collect()
}

/// Members "a" and "b" (cooperative-sticky, subscribed to "t") in a Stable classic group
/// holding t-0,1 and t-2,3; their generation.
async fn classic_group(c: &Rc<Coordinator>) -> (String, String, i32) {
    let md = embedded::encode_subscription(1, &["t".to_string()], &Default::default());
    let req = |member: &str| JoinRequest {
        group_id: "g".into(),
        member_id: member.into(),
        group_instance_id: None,
        client_id: "java".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        protocol_type: "consumer".into(),
        protocols: vec![("cooperative-sticky".into(), md.clone())],
    };
    let (c1, c2) = (c.clone(), c.clone());
    let (r1, r2) = (req(""), req(""));
    let t1 = glommio::spawn_local(async move { c1.join(r1).await });
    let t2 = glommio::spawn_local(async move { c2.join(r2).await });
    let joins = [t1.await, t2.await];
    let leader = joins
        .iter()
        .find(|j| !j.members.is_empty())
        .expect("a leader");
    let ids: Vec<String> = leader.members.iter().map(|(m, _, _)| m.clone()).collect();
    let generation = leader.generation_id;
    let first = ids[0].clone();
    let synced = sync_all_with(c, &joins, move |m| {
        let ps: &[i32] = if m == first { &[0, 1] } else { &[2, 3] };
        embedded::encode_assignment(1, &parts(ps))
    })
    .await;
    for s in synced {
        assert_eq!(s.error, codes::NONE);
    }
    (ids[0].clone(), ids[1].clone(), generation)
}

async fn consumer_beat(
    c: &Coordinator,
    member: &str,
    epoch: i32,
    owned: &[i32],
) -> HeartbeatAnswer {
    let hb = Heartbeat {
        group_id: "g".into(),
        member_id: member.into(),
        member_epoch: epoch,
        rebalance_timeout_ms: if epoch == 0 { 10_000 } else { -1 },
        subscribed_topic_names: (epoch == 0).then(|| vec!["t".into()]),
        owned: Some(parts(owned)),
        ..Default::default()
    };
    let req = GroupReq::ConsumerHeartbeat {
        heartbeat: Box::new(hb),
        topics: topics(),
    };
    match serve(c, req).await {
        GroupResp::ConsumerHeartbeat(a) => a,
        other => panic!("{other:?}"),
    }
}

async fn classic_beat(c: &Coordinator, member: &str, generation: i32) -> i16 {
    let req = GroupReq::Heartbeat {
        group: "g".into(),
        member: member.into(),
        instance: None,
        generation,
    };
    match serve(c, req).await {
        GroupResp::Code(code) => code,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_joining_consumer_member_upgrades_a_classic_group_and_its_leaving_downgrades_it() {
    run(|dir| async move {
        let c = open(&dir).await;
        let (a, b, generation) = classic_group(&c).await;
        // A member that is not joining is not one of a classic group's.
        assert_eq!(
            consumer_beat(&c, "x", 3, &[]).await.error,
            codes::GROUP_ID_NOT_FOUND
        );

        let joined = consumer_beat(&c, "c", 0, &[]).await;
        assert_eq!(joined.error, codes::NONE, "{joined:?}");
        assert_eq!(
            joined.assignment,
            Some(Default::default()),
            "nothing until others give way"
        );
        assert!(
            c.consumer.is_live("g") && c.group("g").is_none(),
            "one group, consumer-protocol"
        );
        // The classic members keep their generation and are told to rejoin.
        assert_eq!(
            classic_beat(&c, &a, generation).await,
            codes::REBALANCE_IN_PROGRESS
        );
        assert_eq!(
            classic_beat(&c, &b, generation + 1).await,
            codes::ILLEGAL_GENERATION
        );

        // The group's state survives a restart with its classic members.
        drop(c);
        glommio::timer::sleep(Duration::from_millis(50)).await;
        let c = open(&dir).await;
        let view = c.consumer.describe("g").expect("restored");
        assert_eq!(view.members.len(), 3);
        assert!(view.members[&a].classic.is_some() && view.members["c"].classic.is_none());
        assert!(c.group("g").is_none(), "the classic state was removed");
        assert_eq!(
            classic_beat(&c, &a, generation).await,
            codes::REBALANCE_IN_PROGRESS
        );

        // The consumer-protocol member leaves: the group is classic again and rebalances.
        let left = consumer_beat(&c, "c", -1, &[]).await;
        assert_eq!(left.error, codes::NONE);
        assert!(!c.consumer.is_live("g"));
        let g = c.group("g").expect("a classic group again");
        assert_eq!(g.borrow().state, State::PreparingRebalance);
        assert_eq!(g.borrow().members.len(), 2);
        assert_eq!(
            classic_beat(&c, &a, generation).await,
            codes::REBALANCE_IN_PROGRESS
        );
    });
}

#[test]
fn groups_that_cannot_move_are_refused_as_kafka_refuses_them() {
    run(|dir| async move {
        let c = open(&dir).await;
        // Metadata that is not a consumer subscription (form_group's members send "md").
        let joins = form_group(&c, 2, 10_000).await;
        sync_all(&c, &joins).await;
        let refused = consumer_beat(&c, "c", 0, &[]).await;
        assert_eq!(refused.error, codes::GROUP_ID_NOT_FOUND, "{refused:?}");
        assert!(!c.consumer.is_live("g"));
        let g = c.group("g").expect("still classic");
        assert_eq!(
            (g.borrow().state, g.borrow().members.len()),
            (State::Stable, 2)
        );
        // An invalid first heartbeat converts nothing either.
        let hb = Heartbeat {
            group_id: "g".into(),
            member_id: "d".into(),
            member_epoch: 0,
            rebalance_timeout_ms: -1,
            ..Default::default()
        };
        let req = GroupReq::ConsumerHeartbeat {
            heartbeat: Box::new(hb),
            topics: topics(),
        };
        match serve(&c, req).await {
            GroupResp::ConsumerHeartbeat(a) => assert_eq!(a.error, 42, "INVALID_REQUEST: {a:?}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(c.group("g").unwrap().borrow().state, State::Stable);
    });
}
