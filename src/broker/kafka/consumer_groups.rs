//! ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848) on the wire: topic ids are
//! resolved to names against this core's metadata snapshot, the heartbeat travels to the
//! group's core (`group::consumer`, served by its `Coordinator`), and the answer's partitions
//! go back as topic ids.

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment as DescribedAssignment, DescribedGroup, Member as DescribedMember,
    TopicPartitions as DescribedPartitions,
};
use kafka_protocol::messages::consumer_group_heartbeat_response::{
    Assignment, TopicPartitions as AssignedPartitions,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::groups::{call, topic_index, TopicIndex};
use crate::broker::group::consumer::assign::Partitions;
use crate::broker::group::consumer::{codes, Heartbeat};
use crate::broker::group::service::{GroupReq, GroupResp};
use crate::broker::shard::Shard;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

pub async fn heartbeat(
    shard: &Rc<Shard>,
    req: &ConsumerGroupHeartbeatRequest,
    client_id: &str,
    session: &weir::acl::Session,
) -> ConsumerGroupHeartbeatResponse {
    shard.wait_metadata_current().await;
    let ix = topic_index(shard);
    // With the authorizer on, what the member's regex may match: the topics its principal
    // may DESCRIBE (checked here, where the session is; the group's core has none).
    let describable = super::authz::on(shard).then(|| {
        ix.counts
            .keys()
            .filter(|t| super::authz::topic(shard, session, weir::acl::Operation::Describe, t))
            .cloned()
            .collect()
    });
    let owned = req.topic_partitions.as_ref().map(|tps| {
        let mut p = Partitions::new();
        for tp in tps {
            // A partition of a topic this broker no longer has is not owned any more.
            if let Some(name) = ix.names.get(&tp.topic_id) {
                p.entry(name.clone())
                    .or_default()
                    .extend(tp.partitions.iter().copied());
            }
        }
        p
    });
    let hb = Heartbeat {
        group_id: req.group_id.to_string(),
        member_id: req.member_id.to_string(),
        member_epoch: req.member_epoch,
        instance_id: req.instance_id.as_ref().map(|s| s.to_string()),
        rack_id: req.rack_id.as_ref().map(|s| s.to_string()),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        subscribed_topic_names: req
            .subscribed_topic_names
            .as_ref()
            .map(|ts| ts.iter().map(|t| t.to_string()).collect()),
        subscribed_topic_regex: req.subscribed_topic_regex.as_ref().map(|s| s.to_string()),
        server_assignor: req.server_assignor.as_ref().map(|s| s.to_string()),
        owned,
        client_id: client_id.to_string(),
        client_host: format!("/{}", session.host),
        describable,
    };
    let group = hb.group_id.clone();
    let mut r = ConsumerGroupHeartbeatResponse::default();
    r.member_epoch = -1;
    if group.is_empty() {
        r.error_code = codes::INVALID_REQUEST;
        r.error_message = Some(s("GroupId can't be empty"));
        return r;
    }
    let answer = match call(
        shard,
        &group,
        GroupReq::ConsumerHeartbeat {
            heartbeat: Box::new(hb),
            topics: ix.counts.clone(),
        },
    )
    .await
    {
        GroupResp::ConsumerHeartbeat(a) => a,
        GroupResp::Code(code) => {
            r.error_code = code;
            return r;
        }
        _ => {
            r.error_code = crate::broker::errors::UNKNOWN_SERVER_ERROR;
            return r;
        }
    };
    r.error_code = answer.error;
    r.error_message = answer.message.as_deref().map(s);
    r.member_id = Some(answer.member_id.as_str())
        .filter(|m| !m.is_empty())
        .map(s);
    r.member_epoch = answer.member_epoch;
    r.heartbeat_interval_ms = answer.heartbeat_interval_ms;
    r.assignment = answer.assignment.map(|a| {
        let mut out = Assignment::default();
        out.topic_partitions = a
            .into_iter()
            .filter_map(|(t, ps)| {
                let mut tp = AssignedPartitions::default();
                tp.topic_id = *ix.ids.get(&t)?;
                tp.partitions = ps.into_iter().collect();
                Some(tp)
            })
            .collect();
        out
    });
    r
}

fn described(ix: &TopicIndex, p: &Partitions) -> DescribedAssignment {
    let mut a = DescribedAssignment::default();
    a.topic_partitions = p
        .iter()
        .filter_map(|(t, ps)| {
            let mut tp = DescribedPartitions::default();
            tp.topic_id = *ix.ids.get(t)?;
            tp.topic_name = TopicName(s(t));
            tp.partitions = ps.iter().copied().collect();
            Some(tp)
        })
        .collect();
    a
}

pub async fn describe(
    shard: &Rc<Shard>,
    req: &ConsumerGroupDescribeRequest,
    may_describe: impl Fn(&str) -> bool,
) -> ConsumerGroupDescribeResponse {
    let ix = topic_index(shard);
    let mut r = ConsumerGroupDescribeResponse::default();
    for g in &req.group_ids {
        let id = g.to_string();
        let mut d = DescribedGroup::default();
        d.group_id = g.clone();
        d.authorized_operations = i32::MIN;
        if !may_describe(&id) {
            d.error_code = crate::broker::errors::GROUP_AUTHORIZATION_FAILED;
            r.groups.push(d);
            continue;
        }
        match call(shard, &id, GroupReq::ConsumerDescribe(id.clone())).await {
            GroupResp::ConsumerDescribe(Ok(view)) => {
                d.group_state = s(view.state_name());
                d.group_epoch = view.group_epoch;
                d.assignment_epoch = view.assignment_epoch;
                d.assignor_name = s(&view.assignor);
                for m in view.members.values() {
                    let mut dm = DescribedMember::default();
                    dm.member_id = s(&m.id);
                    dm.instance_id = m.instance_id.as_deref().map(s);
                    dm.rack_id = m.rack_id.as_deref().map(s);
                    dm.member_epoch = m.epoch;
                    dm.client_id = s(&m.client_id);
                    dm.client_host = s(&m.client_host);
                    dm.subscribed_topic_names = m
                        .subscription
                        .names
                        .iter()
                        .map(|t| TopicName(s(t)))
                        .collect();
                    dm.subscribed_topic_regex = m.subscription.regex.as_deref().map(s);
                    dm.assignment = described(&ix, &m.assigned);
                    let empty = BTreeMap::<String, BTreeSet<i32>>::new();
                    dm.target_assignment = described(&ix, view.target.get(&m.id).unwrap_or(&empty));
                    // v1: 0 = a classic member (an online migration), 1 = a consumer-protocol one.
                    dm.member_type = if m.classic.is_some() { 0 } else { 1 };
                    d.members.push(dm);
                }
            }
            GroupResp::ConsumerDescribe(Err(code)) | GroupResp::Code(code) => {
                d.error_code = code;
                if code == crate::broker::group::coordinator::codes::GROUP_ID_NOT_FOUND {
                    d.error_message = Some(s(&format!("Group {id} not found.")));
                }
            }
            _ => d.error_code = crate::broker::errors::UNKNOWN_SERVER_ERROR,
        }
        r.groups.push(d);
    }
    r
}
