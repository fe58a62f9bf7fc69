//! The group APIs on the wire: decoded Kafka requests become `GroupReq`s, which travel to
//! the group's core (the core owning its offsets bucket) and are served there by its
//! `Coordinator` (`group::service`); the `GroupResp` comes back and is encoded here for the
//! client's version.
//!
//! FindCoordinator always names this broker: which core holds a group is internal.

use std::rc::Rc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator as WireCoordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::Listener;
use crate::broker::group::coordinator::{
    codes, Coordinator, GroupDescription, JoinRequest, JoinResponse, SyncRequest, SyncResponse,
};
use crate::broker::group::service::{GroupReq, GroupResp};
use crate::broker::shard::{GroupCall, Shard};

pub(super) fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

pub(super) async fn call(shard: &Rc<Shard>, group: &str, req: GroupReq) -> GroupResp {
    let core = shard.group_core(group);
    (shard.ask(core, GroupCall(req)).await)
        .unwrap_or(GroupResp::Code(codes::COORDINATOR_NOT_AVAILABLE))
}

/// Who sent a request, for DescribeGroups.
pub struct Client<'a> {
    pub client_id: &'a str,
    pub host: &'a str,
}

pub async fn find_coordinator(
    shard: &Rc<Shard>,
    version: i16,
    req: &FindCoordinatorRequest,
    listener: usize,
) -> FindCoordinatorResponse {
    // The group's core (its offsets bucket's owner), or the transactional id's (its
    // transaction log bucket's owner), when each core is its own broker. In a cluster a
    // group's (transactional id's) coordinator is its `__consumer_offsets`
    // (`__transaction_state`) partition's leader (the topic is created on first need:
    // COORDINATOR_NOT_AVAILABLE, which clients retry, meanwhile).
    let keys: Vec<&str> = if version >= 4 {
        req.coordinator_keys.iter().map(|k| k.as_str()).collect()
    } else {
        vec![req.key.as_str()]
    };
    let mut endpoints = Vec::with_capacity(keys.len());
    for key in keys {
        let e = match req.key_type {
            0 => shard.group_coordinator(key, listener).await,
            1 => shard.txn_coordinator(key, listener).await,
            _ => None,
        };
        endpoints.push(match e {
            Some(e) => {
                if e.is_err() {
                    shard.ensure_internal_topic(if req.key_type == 1 {
                        crate::broker::txn::TXN_TOPIC
                    } else {
                        crate::broker::group::offsets::OFFSETS_TOPIC
                    });
                }
                e
            }
            None => {
                let core = if req.key_type == 1 {
                    crate::broker::txn::core_of(key, shard.cores)
                } else {
                    Coordinator::core_of(key, shard.cores)
                };
                let node = shard.node_of(core);
                let brokers = shard.brokers(listener);
                Ok(match brokers.iter().find(|b| b.0 == node) {
                    Some((_, h, p)) => (node, h.clone(), *p),
                    None => brokers[0].clone(),
                })
            }
        });
    }
    let mut r = FindCoordinatorResponse::default();
    // key_type 0 = group; 1 = transaction; 2 = share group (v6, KIP-932): not supported.
    // Not COORDINATOR_NOT_AVAILABLE: clients retry that until their timeout and then report
    // only the timeout. UNSUPPORTED_VERSION is fatal for them at once.
    let share_group = !matches!(req.key_type, 0 | 1);
    // The answer for each key: its coordinator, or the error.
    let answers = endpoints.into_iter().map(|e| match e {
        _ if share_group => (
            crate::broker::errors::UNSUPPORTED_VERSION,
            Some(s("weir does not support share groups")),
            -1,
            String::new(),
            -1,
        ),
        Ok((node, host, port)) => (codes::NONE, None, node, host, port),
        Err(e) => (e, None, -1, String::new(), -1),
    });
    if version >= 4 {
        r.coordinators = req
            .coordinator_keys
            .iter()
            .zip(answers)
            .map(|(k, (error, message, node, host, port))| {
                let mut c = WireCoordinator::default();
                c.key = k.clone();
                c.node_id = BrokerId(node);
                c.host = s(&host);
                c.port = port;
                c.error_code = error;
                c.error_message = message;
                c
            })
            .collect();
    } else if let Some((error, message, node, host, port)) = answers.into_iter().next() {
        r.error_code = error;
        r.error_message = message;
        r.node_id = BrokerId(node);
        r.host = s(&host);
        r.port = port;
    }
    r
}

pub async fn join_group(
    shard: &Rc<Shard>,
    version: i16,
    req: &JoinGroupRequest,
    client: Client<'_>,
) -> JoinGroupResponse {
    let group = req.group_id.to_string();
    if let Some(reason) = req.reason.as_ref().filter(|r| !r.is_empty()) {
        // JoinGroup v8+ (KIP-800): why the client (re)joins, for the broker's log.
        tracing::debug!(%group, member = %req.member_id.as_str(), reason = %reason.as_str(), "JoinGroup");
    }
    let j = JoinRequest {
        group_id: group.clone(),
        member_id: req.member_id.to_string(),
        group_instance_id: req.group_instance_id.as_ref().map(|s| s.to_string()),
        client_id: client.client_id.to_owned(),
        client_host: client.host.to_owned(),
        session_timeout_ms: req.session_timeout_ms,
        // v0 has no rebalance timeout: it is the session timeout.
        rebalance_timeout_ms: if version >= 1 {
            req.rebalance_timeout_ms
        } else {
            req.session_timeout_ms
        },
        protocol_type: req.protocol_type.to_string(),
        protocols: req
            .protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.clone()))
            .collect(),
    };
    // A consumer-protocol group assigns for its classic members: it needs the topics.
    let topics = if j.protocol_type == crate::broker::group::consumer::PROTOCOL_TYPE {
        topic_index(shard).counts
    } else {
        Default::default()
    };
    let jr = match call(shard, &group, GroupReq::Join(j, topics)).await {
        GroupResp::Join(j) => j,
        GroupResp::Code(c) => JoinResponse {
            error: c,
            generation_id: -1,
            ..Default::default()
        },
        _ => JoinResponse {
            error: codes::UNKNOWN_SERVER_ERROR,
            generation_id: -1,
            ..Default::default()
        },
    };
    let mut r = JoinGroupResponse::default();
    r.error_code = jr.error;
    r.generation_id = jr.generation_id;
    r.protocol_type = jr.protocol_type.as_deref().map(s);
    r.protocol_name = Some(s(jr.protocol_name.as_deref().unwrap_or("")));
    if version >= 7 && jr.protocol_name.is_none() {
        r.protocol_name = None;
    }
    r.leader = s(&jr.leader);
    r.member_id = s(&jr.member_id);
    r.members = jr
        .members
        .into_iter()
        .map(|(id, instance, md)| {
            let mut m = JoinGroupResponseMember::default();
            m.member_id = s(&id);
            m.group_instance_id = instance.as_deref().map(s);
            m.metadata = md;
            m
        })
        .collect();
    r
}

pub async fn sync_group(shard: &Rc<Shard>, req: &SyncGroupRequest) -> SyncGroupResponse {
    let group = req.group_id.to_string();
    let sr = SyncRequest {
        group_id: group.clone(),
        generation_id: req.generation_id,
        member_id: req.member_id.to_string(),
        group_instance_id: req.group_instance_id.as_ref().map(|s| s.to_string()),
        protocol_type: req.protocol_type.as_ref().map(|s| s.to_string()),
        protocol_name: req.protocol_name.as_ref().map(|s| s.to_string()),
        assignments: req
            .assignments
            .iter()
            .map(|a| (a.member_id.to_string(), a.assignment.clone()))
            .collect(),
    };
    let out = match call(shard, &group, GroupReq::Sync(sr)).await {
        GroupResp::Sync(s) => s,
        GroupResp::Code(c) => SyncResponse {
            error: c,
            ..Default::default()
        },
        _ => SyncResponse {
            error: codes::UNKNOWN_SERVER_ERROR,
            ..Default::default()
        },
    };
    let mut r = SyncGroupResponse::default();
    r.error_code = out.error;
    r.protocol_type = out.protocol_type.as_deref().map(s);
    r.protocol_name = out.protocol_name.as_deref().map(s);
    r.assignment = out.assignment;
    r
}

pub async fn heartbeat(shard: &Rc<Shard>, req: &HeartbeatRequest) -> HeartbeatResponse {
    let group = req.group_id.to_string();
    let code = match call(
        shard,
        &group,
        GroupReq::Heartbeat {
            group: group.clone(),
            member: req.member_id.to_string(),
            instance: req.group_instance_id.as_ref().map(|s| s.to_string()),
            generation: req.generation_id,
        },
    )
    .await
    {
        GroupResp::Code(c) => c,
        _ => codes::UNKNOWN_SERVER_ERROR,
    };
    let mut r = HeartbeatResponse::default();
    r.error_code = code;
    r
}

pub async fn leave_group(
    shard: &Rc<Shard>,
    version: i16,
    req: &LeaveGroupRequest,
) -> LeaveGroupResponse {
    let group = req.group_id.to_string();
    for m in req.members.iter().filter(|m| m.reason.is_some()) {
        // LeaveGroup v5+ (KIP-800): the client's reason, logged as Kafka does.
        tracing::info!(%group, member = %m.member_id.as_str(),
            reason = %m.reason.as_ref().map(|r| r.as_str()).unwrap_or(""),
            "member leaves the group");
    }
    let members: Vec<(String, Option<StrBytes>)> = if version >= 3 {
        req.members
            .iter()
            .map(|m| (m.member_id.to_string(), m.group_instance_id.clone()))
            .collect()
    } else {
        vec![(req.member_id.to_string(), None)]
    };
    let ids = members
        .iter()
        .map(|(m, i)| (m.clone(), i.as_ref().map(|i| i.to_string())))
        .collect();
    let (top, each) = match call(
        shard,
        &group,
        GroupReq::Leave {
            group: group.clone(),
            members: ids,
        },
    )
    .await
    {
        GroupResp::Leave(t, e) => (t, e),
        GroupResp::Code(c) => (c, vec![c; members.len()]),
        _ => (
            codes::UNKNOWN_SERVER_ERROR,
            vec![codes::UNKNOWN_SERVER_ERROR; members.len()],
        ),
    };
    let mut r = LeaveGroupResponse::default();
    if version >= 3 {
        // Members carry their own errors.
        let _ = top;
        r.members = members
            .into_iter()
            .zip(each)
            .map(|((id, instance), e)| {
                let mut m = MemberResponse::default();
                m.member_id = s(&id);
                m.group_instance_id = instance;
                m.error_code = e;
                m
            })
            .collect();
    } else {
        r.error_code = top;
    }
    r
}

pub async fn describe_groups(
    shard: &Rc<Shard>,
    version: i16,
    req: &DescribeGroupsRequest,
) -> DescribeGroupsResponse {
    let mut r = DescribeGroupsResponse::default();
    for g in &req.groups {
        let group = g.to_string();
        let d = match call(shard, &group, GroupReq::Describe(group.clone())).await {
            GroupResp::Describe(d) => d,
            _ => GroupDescription {
                error: codes::COORDINATOR_NOT_AVAILABLE,
                state: String::new(),
                protocol_type: String::new(),
                protocol: String::new(),
                members: Vec::new(),
            },
        };
        let mut dg = DescribedGroup::default();
        dg.error_code = d.error;
        // v6 (KIP-1043): a group that does not exist is GROUP_ID_NOT_FOUND, not a Dead one.
        if version >= 6 && d.error == codes::NONE && d.state == "Dead" {
            dg.error_code = codes::GROUP_ID_NOT_FOUND;
            dg.error_message = Some(s(&format!("Group {group} not found.")));
        }
        dg.group_id = g.clone();
        dg.group_state = s(&d.state);
        dg.protocol_type = s(&d.protocol_type);
        dg.protocol_data = s(&d.protocol);
        dg.authorized_operations = i32::MIN;
        dg.members = d
            .members
            .into_iter()
            .map(|m| {
                let mut dm = DescribedGroupMember::default();
                dm.member_id = s(&m.member_id);
                dm.group_instance_id = m.group_instance_id.as_deref().map(s);
                dm.client_id = s(&m.client_id);
                dm.client_host = s(&m.client_host);
                dm.member_metadata = m.metadata;
                dm.member_assignment = m.assignment;
                dm
            })
            .collect();
        r.groups.push(dg);
    }
    r
}

/// On the bootstrap port: every group of the broker. On a core's own port (that core is
/// advertised as a broker of its own): only the groups that core coordinates, as a Kafka
/// broker lists only its own groups — clients ask every broker and concatenate the
/// answers, so listing all groups everywhere would show each group once per core.
pub async fn list_groups(
    shard: &Rc<Shard>,
    req: &ListGroupsRequest,
    via: Listener,
) -> ListGroupsResponse {
    let mut r = ListGroupsResponse::default();
    let cores = match via {
        Listener::Core => shard.id..shard.id + 1,
        Listener::Bootstrap => 0..shard.cores,
    };
    for core in cores {
        if let Some(GroupResp::List(gs)) = shard.ask(core, GroupCall(GroupReq::List)).await {
            for (id, ptype, state) in gs {
                // A consumer-protocol group (KIP-848): type "consumer", protocol type
                // "consumer" as Kafka lists it.
                let (ptype, gtype) = if ptype == crate::broker::group::service::CONSUMER_PROTOCOL {
                    ("consumer".to_string(), "consumer")
                } else {
                    (ptype, "classic")
                };
                if !req.states_filter.is_empty()
                    && !req
                        .states_filter
                        .iter()
                        .any(|f| f.as_str().eq_ignore_ascii_case(&state))
                {
                    continue;
                }
                // ListGroups v5 filters by type (KIP-848).
                if !req.types_filter.is_empty()
                    && !req
                        .types_filter
                        .iter()
                        .any(|f| f.as_str().eq_ignore_ascii_case(gtype))
                {
                    continue;
                }
                let mut lg = ListedGroup::default();
                lg.group_id = GroupId(s(&id));
                lg.protocol_type = s(&ptype);
                lg.group_state = s(&state);
                lg.group_type = s(gtype);
                r.groups.push(lg);
            }
        }
    }
    r
}

pub async fn delete_groups(shard: &Rc<Shard>, req: &DeleteGroupsRequest) -> DeleteGroupsResponse {
    let mut r = DeleteGroupsResponse::default();
    for g in &req.groups_names {
        let group = g.to_string();
        let code = match call(shard, &group, GroupReq::Delete(group.clone())).await {
            GroupResp::Code(c) => c,
            _ => codes::UNKNOWN_SERVER_ERROR,
        };
        let mut d = DeletableGroupResult::default();
        d.group_id = g.clone();
        d.error_code = code;
        r.results.push(d);
    }
    r
}

/// Tells every core's coordinator that `topic` is gone.
pub async fn topic_deleted(shard: &Rc<Shard>, topic: &str) {
    for core in 0..shard.cores {
        let deleted = GroupCall(GroupReq::TopicDeleted(topic.to_owned()));
        shard.ask(core, deleted).await;
    }
}

/// The broker's topics as a consumer-protocol group's assignors see them, and their ids both
/// ways (ConsumerGroupHeartbeat and -Describe; a classic member's JoinGroup to such a group).
pub(super) struct TopicIndex {
    pub(super) counts: crate::broker::group::consumer::Topics,
    pub(super) ids: std::collections::BTreeMap<String, uuid::Uuid>,
    pub(super) names: std::collections::BTreeMap<uuid::Uuid, String>,
}

pub(super) fn topic_index(shard: &Shard) -> TopicIndex {
    let meta = shard.metadata();
    let mut ix = TopicIndex {
        counts: Default::default(),
        ids: Default::default(),
        names: Default::default(),
    };
    // A standalone broker's `__consumer_offsets` (`Shard::offsets_view`) is a topic to
    // clients, so a regex may match it as on Kafka.
    let view = shard
        .offsets_view()
        .map(|v| (crate::broker::group::offsets::OFFSETS_TOPIC.to_string(), v));
    for (name, t) in meta.topics.iter().chain(view.iter().map(|(n, v)| (n, v))) {
        let id = super::metadata::topic_uuid(&t.id);
        ix.counts.insert(name.clone(), t.owners.len() as i32);
        ix.ids.insert(name.clone(), id);
        ix.names.insert(id, name.clone());
    }
    ix
}
