//! Whole-request refusals: requests about one group or the cluster (JoinGroup, the ACL and
//! user APIs, InitProducerId, ...) answered with the *_AUTHORIZATION_FAILED code in that
//! API's own response, nothing processed.

use std::collections::BTreeSet;

use kafka_protocol::messages::*;
use weir::acl::{self, Operation, Session};

use super::super::{encode_response, s, Body, ProtocolError, Request, Response};
use super::{cluster, group, on, topic, transactional_id};
use crate::broker::errors;
use crate::broker::shard::Shard;

/// The message of a refused ACL request, as Kafka words it; an empty string would show as an
/// empty reason in the Java admin client ("ClusterAuthorizationException: ").
const NOT_AUTHORIZED: &str = "Cluster authorization failed: the principal may not manage ACLs.";
const NOT_AUTHORIZED_QUORUM: &str =
    "Cluster authorization failed: DescribeQuorum needs DESCRIBE on the cluster.";

fn encoded<T: kafka_protocol::protocol::Encodable>(
    req: &Request,
    body: &T,
) -> Result<Option<Response>, ProtocolError> {
    Ok(Some(Some(vec![encode_response(
        req.key,
        req.version,
        req.correlation_id,
        body,
    )?])))
}

/// Whole-request checks: `Some(answer)` when the request is refused as a whole.
pub(crate) fn gate(
    shard: &Shard,
    req: &Request,
    session: &Session,
) -> Result<Option<Response>, ProtocolError> {
    if !on(shard) {
        return Ok(None);
    }
    use Operation::*;
    let cluster_failed = errors::CLUSTER_AUTHORIZATION_FAILED;
    let group_failed = errors::GROUP_AUTHORIZATION_FAILED;
    let txn_failed = errors::TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
    match &req.body {
        Body::DescribeAcls(_) if !cluster(shard, session, Describe) => {
            let mut r = DescribeAclsResponse::default();
            r.error_code = cluster_failed;
            r.error_message = Some(s(NOT_AUTHORIZED));
            encoded(req, &r)
        }
        Body::CreateAcls(c) if !cluster(shard, session, Alter) => {
            let mut r = CreateAclsResponse::default();
            r.results = c
                .creations
                .iter()
                .map(|_| {
                    let mut x = create_acls_response::AclCreationResult::default();
                    x.error_code = cluster_failed;
                    x.error_message = Some(s(NOT_AUTHORIZED));
                    x
                })
                .collect();
            encoded(req, &r)
        }
        Body::DeleteAcls(d) if !cluster(shard, session, Alter) => {
            let mut r = DeleteAclsResponse::default();
            r.filter_results = d
                .filters
                .iter()
                .map(|_| {
                    let mut x = delete_acls_response::DeleteAclsFilterResult::default();
                    x.error_code = cluster_failed;
                    x.error_message = Some(s(NOT_AUTHORIZED));
                    x
                })
                .collect();
            encoded(req, &r)
        }
        Body::DescribeQuorum(_) if !cluster(shard, session, Describe) => {
            let mut r = DescribeQuorumResponse::default();
            r.error_code = cluster_failed;
            r.error_message = Some(s(NOT_AUTHORIZED_QUORUM));
            encoded(req, &r)
        }
        Body::DescribeUserScramCredentials(_) if !cluster(shard, session, Describe) => {
            let mut r = DescribeUserScramCredentialsResponse::default();
            r.error_code = cluster_failed;
            encoded(req, &r)
        }
        Body::AlterUserScramCredentials(a) if !cluster(shard, session, Alter) => {
            let users: BTreeSet<String> = a
                .deletions
                .iter()
                .map(|d| d.name.to_string())
                .chain(a.upsertions.iter().map(|u| u.name.to_string()))
                .collect();
            let mut r = AlterUserScramCredentialsResponse::default();
            r.results = users
                .iter()
                .map(|u| {
                    let mut x =
                        alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default();
                    x.user = s(u);
                    x.error_code = cluster_failed;
                    x
                })
                .collect();
            encoded(req, &r)
        }
        Body::DescribeLogDirs(_) if !cluster(shard, session, Describe) => {
            let mut r = DescribeLogDirsResponse::default();
            r.error_code = cluster_failed;
            encoded(req, &r)
        }
        Body::ElectLeaders(_) if !cluster(shard, session, Alter) => {
            let mut r = ElectLeadersResponse::default();
            r.error_code = cluster_failed;
            encoded(req, &r)
        }
        Body::AlterPartitionReassignments(_) if !cluster(shard, session, Alter) => {
            let mut r = AlterPartitionReassignmentsResponse::default();
            r.error_code = cluster_failed;
            encoded(req, &r)
        }
        Body::ListPartitionReassignments(_) if !cluster(shard, session, Describe) => {
            let mut r = ListPartitionReassignmentsResponse::default();
            r.error_code = cluster_failed;
            encoded(req, &r)
        }
        Body::ListConfigResources(_) if !cluster(shard, session, DescribeConfigs) => {
            let mut r = ListConfigResourcesResponse::default();
            r.error_code = cluster_failed;
            encoded(req, &r)
        }
        Body::AlterReplicaLogDirs(a) if !cluster(shard, session, Alter) => {
            let mut r = AlterReplicaLogDirsResponse::default();
            for dir in &a.dirs {
                for t in &dir.topics {
                    let mut tr =
                        alter_replica_log_dirs_response::AlterReplicaLogDirTopicResult::default();
                    tr.topic_name = t.name.clone();
                    tr.partitions = t
                        .partitions
                        .iter()
                        .map(|&p| {
                            let mut pr =
                                alter_replica_log_dirs_response::AlterReplicaLogDirPartitionResult::default();
                            pr.partition_index = p;
                            pr.error_code = cluster_failed;
                            pr
                        })
                        .collect();
                    r.results.push(tr);
                }
            }
            encoded(req, &r)
        }
        Body::InitProducerId(i) if i.transactional_id.is_none() => {
            // Kafka: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic.
            let cfg = &shard.config.authorizer;
            let meta = shard.metadata();
            if cluster(shard, session, IdempotentWrite)
                || acl::may_write_some_topic(cfg, &meta.acls, session)
            {
                return Ok(None);
            }
            let mut r = InitProducerIdResponse::default();
            r.error_code = cluster_failed;
            r.producer_id = (-1).into();
            r.producer_epoch = -1;
            encoded(req, &r)
        }
        // Transactions: WRITE on the transactional id, as Kafka checks.
        Body::InitProducerId(i)
            if i.transactional_id
                .as_ref()
                .is_some_and(|t| !transactional_id(shard, session, Write, t.as_str())) =>
        {
            let mut r = InitProducerIdResponse::default();
            r.error_code = txn_failed;
            r.producer_id = (-1).into();
            r.producer_epoch = -1;
            encoded(req, &r)
        }
        Body::AddPartitionsToTxn(a) => {
            let id_ok = transactional_id(
                shard,
                session,
                Write,
                a.v3_and_below_transactional_id.as_str(),
            );
            let denied: Vec<bool> = a
                .v3_and_below_topics
                .iter()
                .map(|t| !topic(shard, session, Write, t.name.as_str()))
                .collect();
            if id_ok && !denied.iter().any(|d| *d) {
                return Ok(None);
            }
            let mut r = AddPartitionsToTxnResponse::default();
            r.results_by_topic_v3_and_below = a
                .v3_and_below_topics
                .iter()
                .zip(&denied)
                .map(|(t, &denied)| {
                    let code = match (id_ok, denied) {
                        (false, _) => txn_failed,
                        (true, true) => errors::TOPIC_AUTHORIZATION_FAILED,
                        (true, false) => errors::OPERATION_NOT_ATTEMPTED,
                    };
                    let mut tr = add_partitions_to_txn_response::AddPartitionsToTxnTopicResult::default();
                    tr.name = t.name.clone();
                    tr.results_by_partition = t
                        .partitions
                        .iter()
                        .map(|&p| {
                            let mut pr = add_partitions_to_txn_response::AddPartitionsToTxnPartitionResult::default();
                            pr.partition_index = p;
                            pr.partition_error_code = code;
                            pr
                        })
                        .collect();
                    tr
                })
                .collect();
            encoded(req, &r)
        }
        Body::AddOffsetsToTxn(a) => {
            let code = if !transactional_id(shard, session, Write, a.transactional_id.as_str()) {
                txn_failed
            } else if !group(shard, session, Read, a.group_id.as_str()) {
                group_failed
            } else {
                return Ok(None);
            };
            let mut r = AddOffsetsToTxnResponse::default();
            r.error_code = code;
            encoded(req, &r)
        }
        Body::EndTxn(e)
            if !transactional_id(shard, session, Write, e.transactional_id.as_str()) =>
        {
            let mut r = EndTxnResponse::default();
            r.error_code = txn_failed;
            r.producer_id = (-1).into();
            r.producer_epoch = -1;
            encoded(req, &r)
        }
        Body::TxnOffsetCommit(t) => {
            let code = if !transactional_id(shard, session, Write, t.transactional_id.as_str()) {
                txn_failed
            } else if !group(shard, session, Read, t.group_id.as_str()) {
                group_failed
            } else {
                return Ok(None);
            };
            let mut r = TxnOffsetCommitResponse::default();
            r.topics = t
                .topics
                .iter()
                .map(|tp| {
                    let mut tr = txn_offset_commit_response::TxnOffsetCommitResponseTopic::default();
                    tr.name = tp.name.clone();
                    tr.partitions = tp
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut pr =
                                txn_offset_commit_response::TxnOffsetCommitResponsePartition::default();
                            pr.partition_index = p.partition_index;
                            pr.error_code = code;
                            pr
                        })
                        .collect();
                    tr
                })
                .collect();
            encoded(req, &r)
        }
        Body::JoinGroup(j) if !group(shard, session, Read, j.group_id.as_str()) => {
            let mut r = JoinGroupResponse::default();
            r.error_code = group_failed;
            r.generation_id = -1;
            encoded(req, &r)
        }
        Body::SyncGroup(g) if !group(shard, session, Read, g.group_id.as_str()) => {
            let mut r = SyncGroupResponse::default();
            r.error_code = group_failed;
            encoded(req, &r)
        }
        Body::Heartbeat(h) if !group(shard, session, Read, h.group_id.as_str()) => {
            let mut r = HeartbeatResponse::default();
            r.error_code = group_failed;
            encoded(req, &r)
        }
        Body::ConsumerGroupHeartbeat(h) if !group(shard, session, Read, h.group_id.as_str()) => {
            let mut r = ConsumerGroupHeartbeatResponse::default();
            r.error_code = group_failed;
            r.member_epoch = -1;
            encoded(req, &r)
        }
        // Kafka 4: a member may not name a topic it may not DESCRIBE (its regex only ever
        // matches DESCRIBE-able topics: `group::consumer::subscription`).
        Body::ConsumerGroupHeartbeat(h)
            if h.subscribed_topic_names.as_ref().is_some_and(|names| {
                names
                    .iter()
                    .any(|t| !topic(shard, session, Describe, t.as_str()))
            }) =>
        {
            let mut r = ConsumerGroupHeartbeatResponse::default();
            r.error_code = errors::TOPIC_AUTHORIZATION_FAILED;
            r.error_message = Some(s(
                "the member subscribes to a topic it is not authorized to describe",
            ));
            r.member_epoch = -1;
            encoded(req, &r)
        }
        Body::LeaveGroup(l) if !group(shard, session, Read, l.group_id.as_str()) => {
            let mut r = LeaveGroupResponse::default();
            r.error_code = group_failed;
            encoded(req, &r)
        }
        Body::OffsetCommit(c) if !group(shard, session, Read, c.group_id.as_str()) => {
            let mut r = OffsetCommitResponse::default();
            r.topics = c
                .topics
                .iter()
                .map(|t| {
                    let mut rt = offset_commit_response::OffsetCommitResponseTopic::default();
                    rt.name = t.name.clone();
                    rt.topic_id = t.topic_id;
                    rt.partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            let mut rp =
                                offset_commit_response::OffsetCommitResponsePartition::default();
                            rp.partition_index = p.partition_index;
                            rp.error_code = group_failed;
                            rp
                        })
                        .collect();
                    rt
                })
                .collect();
            encoded(req, &r)
        }
        Body::OffsetDelete(d) if !group(shard, session, Delete, d.group_id.as_str()) => {
            let mut r = OffsetDeleteResponse::default();
            r.error_code = group_failed;
            encoded(req, &r)
        }
        _ => Ok(None),
    }
}
