//! OffsetCommit and OffsetFetch: checked and answered on the group's core, encoded here for
//! the client's version.

use std::rc::Rc;

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::*;

use super::groups::{call, s};
use crate::broker::group::coordinator::{codes, CommitPart};
use crate::broker::group::offsets::Committed;
use crate::broker::group::service::{GroupReq, GroupResp};
use crate::broker::shard::Shard;

pub async fn offset_commit(shard: &Rc<Shard>, req: &OffsetCommitRequest) -> OffsetCommitResponse {
    let group = req.group_id.to_string();
    let meta = shard.metadata();
    // Kafka answers UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist (unknown
    // topic or index out of range), group or not, and commits the others.
    let known: Vec<bool> = req
        .topics
        .iter()
        .flat_map(|t| {
            let name = t.name.to_string();
            let meta = &meta;
            t.partitions
                .iter()
                .map(move |p| meta.has_partition(&name, p.partition_index))
        })
        .collect();
    // Kafka also refuses (does not cut) metadata over offset.metadata.max.bytes, per partition.
    let max_metadata = shard.config.offset_metadata_max_bytes;
    let refusal: Vec<Option<i16>> = req
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter())
        .zip(&known)
        .map(|(p, &k)| {
            if !k {
                Some(crate::broker::errors::UNKNOWN_TOPIC_OR_PARTITION)
            } else if p
                .committed_metadata
                .as_ref()
                .is_some_and(|m| m.len() > max_metadata)
            {
                Some(codes::OFFSET_METADATA_TOO_LARGE)
            } else {
                None
            }
        })
        .collect();
    let mut parts = Vec::new();
    for (t, p) in req
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t, p)))
        .zip(&refusal)
        .filter(|(_, r)| r.is_none())
        .map(|(tp, _)| tp)
    {
        parts.push(CommitPart {
            topic: t.name.to_string(),
            partition: p.partition_index,
            offset: p.committed_offset,
            leader_epoch: p.committed_leader_epoch,
            metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
        });
    }
    let n = parts.len();
    let codes_out = if n == 0 && !refusal.is_empty() {
        Vec::new()
    } else {
        match call(
            shard,
            &group,
            GroupReq::Commit {
                group: group.clone(),
                generation: req.generation_id_or_member_epoch,
                member: req.member_id.to_string(),
                instance: req.group_instance_id.as_ref().map(|s| s.to_string()),
                parts,
            },
        )
        .await
        {
            GroupResp::Commit(c) => c,
            GroupResp::Code(c) => vec![c; n],
            _ => vec![codes::UNKNOWN_SERVER_ERROR; n],
        }
    };
    let mut it = codes_out.into_iter();
    let mut refusal = refusal.into_iter();
    let mut r = OffsetCommitResponse::default();
    r.topics = req
        .topics
        .iter()
        .map(|t| {
            let mut tr = OffsetCommitResponseTopic::default();
            tr.name = t.name.clone();
            tr.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut pr = OffsetCommitResponsePartition::default();
                    pr.partition_index = p.partition_index;
                    pr.error_code = match refusal.next().flatten() {
                        Some(code) => code,
                        None => it.next().unwrap_or(codes::UNKNOWN_SERVER_ERROR),
                    };
                    pr
                })
                .collect();
            tr
        })
        .collect();
    r
}

pub(super) async fn fetch_one(
    shard: &Rc<Shard>,
    group: &str,
    topics: Option<Vec<(String, Vec<i32>)>>,
    require_stable: bool,
    member: Option<(String, i32)>,
) -> Result<Vec<(String, i32, Committed)>, i16> {
    match call(
        shard,
        group,
        GroupReq::Fetch {
            group: group.to_owned(),
            topics,
            require_stable,
            member,
        },
    )
    .await
    {
        GroupResp::Fetch(r) => r,
        GroupResp::Code(c) => Err(c),
        _ => Err(codes::UNKNOWN_SERVER_ERROR),
    }
}

/// A fetched offset and its error: a partition with offsets pending in an open transaction
/// (`commits::UNSTABLE`, asked with require_stable) is UNSTABLE_OFFSET_COMMIT, offset -1.
fn stable(offset: i64) -> (i64, i16) {
    if offset == crate::broker::group::coordinator::UNSTABLE {
        (-1, codes::UNSTABLE_OFFSET_COMMIT)
    } else {
        (offset, codes::NONE)
    }
}

/// Groups (topic, partition, committed) rows by topic, keeping first-seen topic order.
pub(super) fn by_topic(
    rows: Vec<(String, i32, Committed)>,
) -> Vec<(String, Vec<(i32, Committed)>)> {
    let mut out: Vec<(String, Vec<(i32, Committed)>)> = Vec::new();
    for (t, p, c) in rows {
        match out.iter_mut().find(|(n, _)| *n == t) {
            Some((_, v)) => v.push((p, c)),
            None => out.push((t, vec![(p, c)])),
        }
    }
    out
}

pub async fn offset_fetch(
    shard: &Rc<Shard>,
    version: i16,
    req: &OffsetFetchRequest,
) -> OffsetFetchResponse {
    let mut r = OffsetFetchResponse::default();
    if version >= 8 {
        for g in &req.groups {
            let group = g.group_id.to_string();
            let wanted = g.topics.as_ref().map(|ts| {
                ts.iter()
                    .map(|t| (t.name.to_string(), t.partition_indexes.clone()))
                    .collect()
            });
            let mut gr = OffsetFetchResponseGroup::default();
            gr.group_id = g.group_id.clone();
            // v9: a consumer-protocol member names itself and its epoch (KIP-848); an admin
            // client sends neither.
            let member = (g.member_id.is_some() || g.member_epoch >= 0).then(|| {
                let id = g.member_id.as_ref().map(|m| m.to_string());
                (id.unwrap_or_default(), g.member_epoch)
            });
            match fetch_one(shard, &group, wanted, req.require_stable, member).await {
                Ok(rows) => {
                    gr.topics = by_topic(rows)
                        .into_iter()
                        .map(|(t, ps)| {
                            let mut tr = OffsetFetchResponseTopics::default();
                            tr.name = TopicName(s(&t));
                            tr.partitions = ps
                                .into_iter()
                                .map(|(p, c)| {
                                    let mut pr = OffsetFetchResponsePartitions::default();
                                    pr.partition_index = p;
                                    (pr.committed_offset, pr.error_code) = stable(c.offset);
                                    pr.committed_leader_epoch = c.leader_epoch;
                                    pr.metadata = Some(s(&c.metadata));
                                    pr
                                })
                                .collect();
                            tr
                        })
                        .collect();
                }
                Err(code) => gr.error_code = code,
            }
            r.groups.push(gr);
        }
        return r;
    }
    let group = req.group_id.to_string();
    // v0-1 have no null (= all) topic list.
    let wanted = req.topics.as_ref().map(|ts| {
        ts.iter()
            .map(|t| (t.name.to_string(), t.partition_indexes.clone()))
            .collect()
    });
    match fetch_one(shard, &group, wanted, req.require_stable, None).await {
        Ok(rows) => {
            r.topics = by_topic(rows)
                .into_iter()
                .map(|(t, ps)| {
                    let mut tr = OffsetFetchResponseTopic::default();
                    tr.name = TopicName(s(&t));
                    tr.partitions = ps
                        .into_iter()
                        .map(|(p, c)| {
                            let mut pr = OffsetFetchResponsePartition::default();
                            pr.partition_index = p;
                            (pr.committed_offset, pr.error_code) = stable(c.offset);
                            pr.committed_leader_epoch = c.leader_epoch;
                            pr.metadata = Some(s(&c.metadata));
                            pr
                        })
                        .collect();
                    tr
                })
                .collect();
        }
        Err(code) => {
            if version >= 2 {
                r.error_code = code;
            }
            // v0-1 carry errors per partition only.
            if let Some(ts) = &req.topics {
                r.topics = ts
                    .iter()
                    .map(|t| {
                        let mut tr = OffsetFetchResponseTopic::default();
                        tr.name = t.name.clone();
                        tr.partitions = t
                            .partition_indexes
                            .iter()
                            .map(|&p| {
                                let mut pr = OffsetFetchResponsePartition::default();
                                pr.partition_index = p;
                                pr.committed_offset = -1;
                                pr.committed_leader_epoch = -1;
                                pr.error_code = code;
                                pr
                            })
                            .collect();
                        tr
                    })
                    .collect();
            }
        }
    }
    r
}

/// OffsetDelete: a partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION before the
/// group's core is asked (as for OffsetCommit); the group's core applies Kafka's rules
/// (`Coordinator::delete_offsets`). A group-level error answers no partitions.
pub async fn offset_delete(shard: &Rc<Shard>, req: &OffsetDeleteRequest) -> OffsetDeleteResponse {
    use kafka_protocol::messages::offset_delete_response::{
        OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
    };
    let group = req.group_id.to_string();
    let meta = shard.metadata();
    let known: Vec<Vec<bool>> = req
        .topics
        .iter()
        .map(|t| {
            t.partitions
                .iter()
                .map(|p| meta.has_partition(t.name.as_str(), p.partition_index))
                .collect()
        })
        .collect();
    let asked: Vec<(String, Vec<i32>)> = req
        .topics
        .iter()
        .zip(&known)
        .map(|(t, k)| {
            let parts = t
                .partitions
                .iter()
                .zip(k)
                .filter(|(_, &k)| k)
                .map(|(p, _)| p.partition_index)
                .collect();
            (t.name.to_string(), parts)
        })
        .collect();
    let mut r = OffsetDeleteResponse::default();
    let codes_out = match call(
        shard,
        &group,
        GroupReq::DeleteOffsets {
            group: group.clone(),
            topics: asked,
        },
    )
    .await
    {
        GroupResp::DeleteOffsets(Ok(c)) => c,
        GroupResp::DeleteOffsets(Err(code)) | GroupResp::Code(code) => {
            r.error_code = code;
            return r;
        }
        _ => {
            r.error_code = codes::UNKNOWN_SERVER_ERROR;
            return r;
        }
    };
    for ((t, k), topic_codes) in req.topics.iter().zip(&known).zip(codes_out) {
        let mut tr = OffsetDeleteResponseTopic::default();
        tr.name = t.name.clone();
        let mut it = topic_codes.into_iter();
        for (p, &k) in t.partitions.iter().zip(k) {
            let mut pr = OffsetDeleteResponsePartition::default();
            pr.partition_index = p.partition_index;
            pr.error_code = if k {
                it.next().unwrap_or(codes::UNKNOWN_SERVER_ERROR)
            } else {
                crate::broker::errors::UNKNOWN_TOPIC_OR_PARTITION
            };
            tr.partitions.push(pr);
        }
        r.topics.push(tr);
    }
    r
}
