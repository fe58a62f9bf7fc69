//! Online migration between the classic and the consumer group protocols (KIP-848; Kafka 4's
//! `group.consumer.migration.policy=bidirectional`): a group's consumers are restarted one by
//! one with `group.protocol=consumer` (an upgrade) or back to `classic` (a downgrade), and the
//! group keeps its members, their partitions and its committed offsets throughout.
//!
//! - **Upgrade.** The first ConsumerGroupHeartbeat (epoch 0) to a classic group with members
//!   turns it into a consumer-protocol group whose classic members keep their member ids, their
//!   partitions (from their last SyncGroup) and the generation as their epoch. The joining
//!   member moves the group epoch on, so each classic member's next Heartbeat is
//!   REBALANCE_IN_PROGRESS and it joins again into the broker's assignment
//!   (`consumer/classic.rs`). The group must be of protocol type `consumer` with metadata that
//!   parses, else the heartbeat is refused GROUP_ID_NOT_FOUND as Kafka refuses it. Requests
//!   waiting in the classic group's rebalance are answered REBALANCE_IN_PROGRESS.
//! - **Downgrade.** When the last consumer-protocol member leaves (or is fenced) and classic
//!   members remain, the group becomes a classic group at its members' epoch, each member
//!   holding its target partitions, and a rebalance starts: the classic members join again and their
//!   leader assigns, as in any classic group.
//!
//! Each move is stored: the classic group's stored state is removed and the consumer group's
//! written (an upgrade), or the consumer group's removed (a downgrade; the classic group is
//! stored at its next Stable generation, as any classic group).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::consumer::{
    embedded, ClassicMember, ConsumerGroup, HeartbeatAnswer, Topics, PROTOCOL_TYPE,
};
use super::coordinator::*;

/// A classic member's JoinGroup to a consumer-protocol group; `None` if `req`'s group is
/// not one (the classic coordinator serves it).
pub(super) async fn classic_join(
    coord: &Coordinator,
    req: &JoinRequest,
    topics: &Topics,
) -> Option<JoinResponse> {
    if !coord.consumer.is_live(&req.group_id) {
        return None;
    }
    let fail = |error: i16| JoinResponse {
        error,
        member_id: req.member_id.clone(),
        generation_id: -1,
        ..Default::default()
    };
    if req.session_timeout_ms < coord.config.min_session_timeout_ms
        || req.session_timeout_ms > coord.config.max_session_timeout_ms
    {
        return Some(fail(codes::INVALID_SESSION_TIMEOUT));
    }
    let answer = coord
        .consumer_op(&req.group_id, |c| c.classic_join(req, topics), fail)
        .await;
    if let Some(j) = &answer {
        tracing::debug!(group = %req.group_id, member = %j.member_id, error = j.error,
                generation = j.generation_id, "classic member joined a consumer-protocol group");
    }
    answer
}

/// A classic member's SyncGroup to a consumer-protocol group; `None` if there is none. It
/// changes nothing stored: answered without waiting for the group writes.
pub(super) fn classic_sync(coord: &Coordinator, req: &SyncRequest) -> Option<SyncResponse> {
    let answer = coord.consumer.touch(&req.group_id, |g, now| {
        g.classic_sync(
            &req.member_id,
            req.group_instance_id.as_deref(),
            req.generation_id,
            req.protocol_type.as_deref(),
            req.protocol_name.as_deref(),
            now,
        )
    })?;
    Some(match answer {
        Ok(assignment) => SyncResponse {
            error: codes::NONE,
            protocol_type: req.protocol_type.clone(),
            protocol_name: req.protocol_name.clone(),
            assignment,
        },
        Err(error) => SyncResponse {
            error,
            ..Default::default()
        },
    })
}

/// A classic member's Heartbeat to a consumer-protocol group; `None` if there is none. Like
/// SyncGroup it changes nothing stored.
pub(super) fn classic_heartbeat(
    coord: &Coordinator,
    group: &str,
    member: &str,
    instance: Option<&str>,
    generation: i32,
) -> Option<i16> {
    coord.consumer.touch(group, |g, now| {
        g.classic_heartbeat(member, instance, generation, now)
    })
}

/// A LeaveGroup to a consumer-protocol group: (group error, one error per member); `None`
/// if there is none.
pub(super) async fn classic_leave(
    coord: &Coordinator,
    group: &str,
    members: &[(String, Option<String>)],
) -> Option<(i16, Vec<i16>)> {
    if !coord.consumer.is_live(group) {
        return None;
    }
    let answer = coord
        .consumer_op(
            group,
            |c| {
                c.run(group, |g, _| {
                    Ok(members
                        .iter()
                        .map(|(id, instance)| g.classic_leave(id, instance.as_deref()))
                        .collect::<Vec<i16>>())
                })
            },
            Err,
        )
        .await?;
    Some(match answer {
        Ok(each) if each.len() == 1 => (each[0], each),
        Ok(each) => (codes::NONE, each),
        Err(code) => (code, vec![code; members.len()]),
    })
}

/// A ConsumerGroupHeartbeat to a classic group with members: the online upgrade when it is a
/// member joining (epoch 0) a group that can become a consumer-protocol group — converted and
/// joined in one step under the core's group-write order, so no other request sees the
/// converted group before the new member is in it — else the error Kafka answers.
pub(super) async fn upgrade(
    coord: &Coordinator,
    hb: &super::consumer::Heartbeat,
    topics: &Topics,
) -> HeartbeatAnswer {
    let group_id = hb.group_id.as_str();
    if hb.member_epoch != 0 {
        return HeartbeatAnswer::error(
            codes::GROUP_ID_NOT_FOUND,
            format!("Group {group_id} is not a consumer group: it has classic-protocol members"),
        );
    }
    if let Some(answer) = ConsumerGroup::refuses(hb) {
        return answer;
    }
    let replaced = std::cell::Cell::new(false);
    let answer = coord
        .consumer_op(
            group_id,
            |c| {
                match convert(coord, hb, topics) {
                    Ok(r) => replaced.set(r),
                    Err(answer) => {
                        return Some(super::consumer::Served {
                            answer,
                            change: None,
                            downgraded: None,
                        })
                    }
                }
                Some(c.heartbeat(hb, topics))
            },
            |code| HeartbeatAnswer::error(code, "the group's state could not be stored"),
        )
        .await
        .expect("a heartbeat is always served");
    if replaced.get() {
        // The classic group's stored state goes (the consumer group's is written above): a
        // restart finding both keeps the consumer group's (`persist::restore_groups`).
        if let Err(code) = coord.persist(group_id, None).await {
            tracing::warn!(
                group = group_id,
                code,
                "removing the upgraded classic group's stored state failed"
            );
        }
    }
    answer
}

/// Turns classic group `hb.group_id` into a consumer-protocol group for `hb`'s member to
/// join, or says why not (the answer to give). A classic group that emptied meanwhile is
/// simply replaced. Whether a classic group was there (its stored state is to be removed).
fn convert(
    coord: &Coordinator,
    hb: &super::consumer::Heartbeat,
    topics: &Topics,
) -> Result<bool, HeartbeatAnswer> {
    let group_id = hb.group_id.as_str();
    let Some(group) = coord.group(group_id) else {
        return Ok(false);
    };
    let max_size = coord.consumer.config.max_size;
    let converted = {
        let mut g = group.borrow_mut();
        if g.members.is_empty() || coord.consumer.is_live(group_id) {
            // Emptied, or a classic state whose removal was lost (the consumer group's is
            // the newer): replaced.
            abandon(&mut g);
            None
        } else if g.state == State::CompletingRebalance {
            // The leader's assignment may be being stored: what the members own is not known
            // until it is answered. The client retries.
            return Err(HeartbeatAnswer::error(
                codes::COORDINATOR_LOAD_IN_PROGRESS,
                format!("Group {group_id} is completing a classic rebalance"),
            ));
        } else if g.members.len() >= max_size {
            return Err(HeartbeatAnswer::error(
                codes::GROUP_MAX_SIZE_REACHED,
                format!("the group has reached its maximum size of {max_size}"),
            ));
        } else if hb
            .instance_id
            .as_ref()
            .is_some_and(|i| g.statics.contains_key(i))
        {
            return Err(HeartbeatAnswer::error(
                super::consumer::codes::UNRELEASED_INSTANCE_ID,
                "the instance id is used by a classic member",
            ));
        } else {
            let cg = convertible(group_id, &g, topics, max_size)
                .map_err(|why| HeartbeatAnswer::error(codes::GROUP_ID_NOT_FOUND, why))?;
            abandon(&mut g);
            Some(cg)
        }
    };
    coord.groups.borrow_mut().remove(group_id);
    if let Some(cg) = converted {
        tracing::info!(group = group_id, members = cg.members.len(), epoch = cg.group_epoch,
            "a consumer-protocol member joins a classic group: the group moves to the consumer protocol");
        coord.consumer.adopt(group_id, cg);
    }
    Ok(true)
}

/// Answers the requests waiting in a classic group's rebalance REBALANCE_IN_PROGRESS (the
/// group is converted or replaced): the members join again.
fn abandon(g: &mut Group) {
    for (id, m) in g.members.iter_mut() {
        m.answer_waiters(id, codes::REBALANCE_IN_PROGRESS);
    }
}

/// The online downgrade: consumer-protocol group `group_id`, left with classic members
/// only, becomes a classic group that rebalances at once.
pub(super) fn downgrade(coord: &Coordinator, group_id: &str, cg: ConsumerGroup) {
    // The members' epoch (the group's before the last consumer-protocol member left): a
    // member at it is told REBALANCE_IN_PROGRESS and rejoins keeping its partitions until
    // it gives them up, where another generation would have it lose them.
    let generation = cg
        .members
        .values()
        .map(|m| m.epoch)
        .max()
        .unwrap_or(cg.group_epoch);
    let members = cg.into_classic();
    let now = Instant::now();
    let mut g = Group::new();
    g.state = State::Stable;
    g.generation = generation;
    g.protocol_type = Some(PROTOCOL_TYPE.to_string());
    for c in members {
        let metadata = c
            .protocols
            .first()
            .map(|(_, md)| md.clone())
            .unwrap_or_default();
        if let Some(instance) = &c.instance_id {
            g.statics.insert(instance.clone(), c.id.clone());
        }
        g.order.push(c.id.clone());
        g.members.insert(
            c.id.clone(),
            Member {
                group_instance_id: c.instance_id,
                client_id: c.client_id,
                client_host: c.client_host,
                session_timeout: c.session_timeout,
                rebalance_timeout: c.rebalance_timeout.max(c.session_timeout),
                protocol_type: PROTOCOL_TYPE.to_string(),
                protocols: c.protocols,
                assignment: embedded::encode_assignment(
                    embedded::version_of(&metadata),
                    &c.assigned,
                ),
                last_heartbeat: now,
                join_waiter: None,
                sync_waiter: None,
            },
        );
    }
    g.protocol = g.select_protocol();
    g.prepare_rebalance(Duration::ZERO);
    tracing::info!(
        group = group_id,
        generation,
        members = g.members.len(),
        "the group is a classic group again; its members rebalance"
    );
    let replaced = coord
        .groups
        .borrow_mut()
        .insert(group_id.to_string(), Rc::new(RefCell::new(g)));
    if let Some(old) = replaced {
        abandon(&mut old.borrow_mut());
    }
}

/// Classic group `g` as a consumer-protocol group, or why it cannot be one.
fn convertible(
    group_id: &str,
    g: &Group,
    topics: &Topics,
    max_size: usize,
) -> Result<ConsumerGroup, String> {
    if g.protocol_type.as_deref() != Some(PROTOCOL_TYPE) {
        return Err(format!(
            "Group {group_id} is not a consumer group: its protocol type is {:?}",
            g.protocol_type.as_deref().unwrap_or_default()
        ));
    }
    if g.members.len() > max_size {
        return Err(format!(
            "Group {group_id} has {} members, more than group.consumer.max.size {max_size}",
            g.members.len()
        ));
    }
    let mut members = Vec::with_capacity(g.members.len());
    let mut subscriptions = Vec::with_capacity(g.members.len());
    for (id, m) in &g.members {
        let metadata = m
            .protocols
            .iter()
            .find(|(p, _)| Some(p) == g.protocol.as_ref())
            .or(m.protocols.first())
            .map(|(_, md)| md.clone())
            .unwrap_or_default();
        let bad = || {
            format!(
                "Group {group_id}'s member {id} sent metadata that is not a consumer subscription"
            )
        };
        let sub = embedded::decode_subscription(&metadata).ok_or_else(bad)?;
        let assigned = embedded::decode_assignment(&m.assignment).ok_or_else(bad)?;
        subscriptions.push(sub.topics);
        members.push(ClassicMember {
            rack_id: sub.rack_id.clone(),
            id: id.clone(),
            instance_id: m.group_instance_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            session_timeout: m.session_timeout,
            rebalance_timeout: m.rebalance_timeout,
            protocols: m.protocols.clone(),
            assigned,
        });
    }
    Ok(ConsumerGroup::from_classic(
        g.generation,
        members,
        subscriptions,
        topics,
        Instant::now(),
    ))
}
