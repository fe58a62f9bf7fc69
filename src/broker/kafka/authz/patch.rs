//! The answers for what `split` took out of a request, and the filters of what a reading
//! request returns (topics hidden, errors in place of what the principal may not see).

use kafka_protocol::messages::*;
use weir::acl::{Operation, ResourceType, Session};

use super::super::s;
use super::{
    allowed, cluster, config_key, config_resource_ok, group, may_create, on, topic, topic_error,
    Denied,
};
use crate::broker::errors;
use crate::broker::shard::Shard;

pub(crate) fn patch_create_topics(r: &mut CreateTopicsResponse, denied: &Denied) {
    for n in &denied.names {
        let mut t = create_topics_response::CreatableTopicResult::default();
        t.name = s(n).into();
        t.error_code = errors::TOPIC_AUTHORIZATION_FAILED;
        t.num_partitions = -1;
        t.replication_factor = -1;
        r.topics.push(t);
    }
}

pub(crate) fn patch_delete_topics(r: &mut DeleteTopicsResponse, denied: &Denied) {
    for n in &denied.names {
        let mut t = delete_topics_response::DeletableTopicResult::default();
        t.name = Some(s(n).into());
        t.error_code = errors::TOPIC_AUTHORIZATION_FAILED;
        r.responses.push(t);
    }
}

pub(crate) fn patch_create_partitions(r: &mut CreatePartitionsResponse, denied: &Denied) {
    for n in &denied.names {
        let mut t = create_partitions_response::CreatePartitionsTopicResult::default();
        t.name = s(n).into();
        t.error_code = errors::TOPIC_AUTHORIZATION_FAILED;
        r.results.push(t);
    }
}

pub(crate) fn patch_delete_records(
    r: &mut DeleteRecordsResponse,
    req: &DeleteRecordsRequest,
    denied: &Denied,
) {
    for t in req.topics.iter().filter(|t| topic_error(denied, &t.name)) {
        let mut rt = delete_records_response::DeleteRecordsTopicResult::default();
        rt.name = t.name.clone();
        rt.partitions = t
            .partitions
            .iter()
            .map(|p| {
                let mut rp = delete_records_response::DeleteRecordsPartitionResult::default();
                rp.partition_index = p.partition_index;
                rp.low_watermark = -1;
                rp.error_code = errors::TOPIC_AUTHORIZATION_FAILED;
                rp
            })
            .collect();
        r.topics.push(rt);
    }
}

/// `patch_alter_configs` and `patch_incremental_alter_configs`: the same answer in the two
/// APIs' (distinct, same-shaped) response types.
macro_rules! patch_alter_configs {
    ($name:ident, $resp:ty) => {
        pub(crate) fn $name(
            responses: &mut Vec<$resp>,
            resources: impl Iterator<Item = (i8, String)>,
            denied: &Denied,
        ) {
            for (rtype, name) in resources {
                if topic_error(denied, &config_key(rtype, &name)) {
                    let mut x = <$resp>::default();
                    x.resource_type = rtype;
                    x.resource_name = s(&name);
                    x.error_code = if rtype == 2 {
                        errors::TOPIC_AUTHORIZATION_FAILED
                    } else {
                        errors::CLUSTER_AUTHORIZATION_FAILED
                    };
                    responses.push(x);
                }
            }
        }
    };
}

patch_alter_configs!(
    patch_alter_configs,
    alter_configs_response::AlterConfigsResourceResponse
);
patch_alter_configs!(
    patch_incremental_alter_configs,
    incremental_alter_configs_response::AlterConfigsResourceResponse
);

pub(crate) fn patch_delete_groups(r: &mut DeleteGroupsResponse, denied: &Denied) {
    for g in &denied.names {
        let mut x = delete_groups_response::DeletableGroupResult::default();
        x.group_id = s(g).into();
        x.error_code = errors::GROUP_AUTHORIZATION_FAILED;
        r.results.push(x);
    }
}

pub(crate) fn patch_offset_commit(
    r: &mut OffsetCommitResponse,
    req: &OffsetCommitRequest,
    denied: &Denied,
) {
    for t in req.topics.iter().filter(|t| topic_error(denied, &t.name)) {
        let mut rt = offset_commit_response::OffsetCommitResponseTopic::default();
        rt.name = t.name.clone();
        rt.topic_id = t.topic_id;
        rt.partitions = t
            .partitions
            .iter()
            .map(|p| {
                let mut rp = offset_commit_response::OffsetCommitResponsePartition::default();
                rp.partition_index = p.partition_index;
                rp.error_code = errors::TOPIC_AUTHORIZATION_FAILED;
                rp
            })
            .collect();
        r.topics.push(rt);
    }
}

pub(crate) fn patch_txn_offset_commit(
    r: &mut TxnOffsetCommitResponse,
    req: &TxnOffsetCommitRequest,
    denied: &Denied,
) {
    for t in req.topics.iter().filter(|t| topic_error(denied, &t.name)) {
        let mut rt = txn_offset_commit_response::TxnOffsetCommitResponseTopic::default();
        rt.name = t.name.clone();
        rt.partitions = t
            .partitions
            .iter()
            .map(|p| {
                let mut rp =
                    txn_offset_commit_response::TxnOffsetCommitResponsePartition::default();
                rp.partition_index = p.partition_index;
                rp.error_code = errors::TOPIC_AUTHORIZATION_FAILED;
                rp
            })
            .collect();
        r.topics.push(rt);
    }
}

pub(crate) fn patch_offset_delete(
    r: &mut OffsetDeleteResponse,
    req: &OffsetDeleteRequest,
    denied: &Denied,
) {
    for t in req.topics.iter().filter(|t| topic_error(denied, &t.name)) {
        let mut rt = offset_delete_response::OffsetDeleteResponseTopic::default();
        rt.name = t.name.clone();
        rt.partitions = t
            .partitions
            .iter()
            .map(|p| {
                let mut rp = offset_delete_response::OffsetDeleteResponsePartition::default();
                rp.partition_index = p.partition_index;
                rp.error_code = errors::TOPIC_AUTHORIZATION_FAILED;
                rp
            })
            .collect();
        r.topics.push(rt);
    }
}

/// Metadata: topics the principal may not DESCRIBE are left out of an "all topics" answer
/// and answered TOPIC_AUTHORIZATION_FAILED when asked for by name.
pub(crate) fn patch_metadata(
    shard: &Shard,
    session: &Session,
    asked_all: bool,
    r: &mut MetadataResponse,
) {
    if !on(shard) {
        return;
    }
    r.topics.retain_mut(|t| {
        if t.name.is_none() && t.error_code == errors::UNKNOWN_TOPIC_ID {
            return true; // an id that names no topic: nothing to hide
        }
        let name = t.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
        if topic(shard, session, Operation::Describe, &name) {
            return true;
        }
        t.error_code = errors::TOPIC_AUTHORIZATION_FAILED;
        t.partitions.clear();
        t.topic_id = Default::default();
        !asked_all
    });
}

/// Whether Metadata may create the missing topics it names.
pub(crate) fn metadata_may_create(shard: &Shard, session: &Session, m: &MetadataRequest) -> bool {
    !on(shard)
        || m.topics.iter().flatten().all(|t| {
            t.name
                .as_ref()
                .is_none_or(|n| may_create(shard, session, n.as_str()))
        })
}

pub(crate) fn patch_list_offsets(shard: &Shard, session: &Session, r: &mut ListOffsetsResponse) {
    if !on(shard) {
        return;
    }
    for t in &mut r.topics {
        if !topic(shard, session, Operation::Describe, &t.name) {
            for p in &mut t.partitions {
                p.error_code = errors::TOPIC_AUTHORIZATION_FAILED;
                p.offset = -1;
                p.timestamp = -1;
                p.old_style_offsets.clear();
            }
        }
    }
}

pub(crate) fn patch_describe_configs(
    shard: &Shard,
    session: &Session,
    r: &mut DescribeConfigsResponse,
) {
    if !on(shard) {
        return;
    }
    for x in &mut r.results {
        if !config_resource_ok(
            shard,
            session,
            Operation::DescribeConfigs,
            x.resource_type,
            &x.resource_name,
        ) {
            x.error_code = if x.resource_type == 2 {
                errors::TOPIC_AUTHORIZATION_FAILED
            } else {
                errors::CLUSTER_AUTHORIZATION_FAILED
            };
            x.error_message = None;
            x.configs.clear();
        }
    }
}

pub(crate) fn patch_describe_groups(
    shard: &Shard,
    session: &Session,
    r: &mut DescribeGroupsResponse,
) {
    if !on(shard) {
        return;
    }
    for g in &mut r.groups {
        if !group(shard, session, Operation::Describe, &g.group_id) {
            let id = g.group_id.clone();
            *g = describe_groups_response::DescribedGroup::default();
            g.group_id = id;
            g.error_code = errors::GROUP_AUTHORIZATION_FAILED;
        }
    }
}

pub(crate) fn patch_list_groups(shard: &Shard, session: &Session, r: &mut ListGroupsResponse) {
    if !on(shard) || cluster(shard, session, Operation::Describe) {
        return;
    }
    r.groups
        .retain(|g| group(shard, session, Operation::Describe, &g.group_id));
}

pub(crate) fn patch_find_coordinator(
    shard: &Shard,
    session: &Session,
    req: &FindCoordinatorRequest,
    r: &mut FindCoordinatorResponse,
) {
    // DESCRIBE on the group (key type 0) or on the transactional id (1), as Kafka checks.
    let (denied_code, rtype) = match req.key_type {
        0 => (errors::GROUP_AUTHORIZATION_FAILED, ResourceType::Group),
        1 => (
            errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            ResourceType::TransactionalId,
        ),
        _ => return,
    };
    if !on(shard) {
        return;
    }
    let denied = |key: &str| !allowed(shard, session, Operation::Describe, rtype, key);
    if denied(&req.key) && r.coordinators.is_empty() {
        r.error_code = denied_code;
        r.node_id = (-1).into();
        r.host = s("");
        r.port = -1;
    }
    for c in &mut r.coordinators {
        if denied(&c.key) {
            c.error_code = denied_code;
            c.node_id = (-1).into();
            c.host = s("");
            c.port = -1;
        }
    }
}

pub(crate) fn patch_offset_fetch(
    shard: &Shard,
    session: &Session,
    req: &OffsetFetchRequest,
    r: &mut OffsetFetchResponse,
) {
    if !on(shard) {
        return;
    }
    let may_see = |t: &str| topic(shard, session, Operation::Describe, t);
    if !group(shard, session, Operation::Describe, &req.group_id) && req.groups.is_empty() {
        r.error_code = errors::GROUP_AUTHORIZATION_FAILED;
        r.topics.clear();
    }
    r.topics
        .retain(|t| req.topics.is_some() || may_see(&t.name));
    for t in &mut r.topics {
        if !may_see(&t.name) {
            for p in &mut t.partitions {
                p.error_code = errors::TOPIC_AUTHORIZATION_FAILED;
                p.committed_offset = -1;
            }
        }
    }
    for g in &mut r.groups {
        if !group(shard, session, Operation::Describe, &g.group_id) {
            g.error_code = errors::GROUP_AUTHORIZATION_FAILED;
            g.topics.clear();
            continue;
        }
        let asked_all = req
            .groups
            .iter()
            .find(|q| q.group_id == g.group_id)
            .is_none_or(|q| q.topics.is_none());
        g.topics.retain(|t| !asked_all || may_see(&t.name));
        for t in &mut g.topics {
            if !may_see(&t.name) {
                for p in &mut t.partitions {
                    p.error_code = errors::TOPIC_AUTHORIZATION_FAILED;
                    p.committed_offset = -1;
                }
            }
        }
    }
}

pub(crate) fn patch_describe_producers(
    shard: &Shard,
    session: &Session,
    r: &mut DescribeProducersResponse,
) {
    if !on(shard) {
        return;
    }
    for t in &mut r.topics {
        if !topic(shard, session, Operation::Read, &t.name) {
            for p in &mut t.partitions {
                p.error_code = errors::TOPIC_AUTHORIZATION_FAILED;
                p.error_message = None;
                p.active_producers.clear();
            }
        }
    }
}
