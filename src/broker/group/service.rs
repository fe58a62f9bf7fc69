//! A group operation as it travels between cores: [`GroupReq`] goes to the group's core
//! (the core owning its offsets bucket, `Coordinator::core_of`), which serves it with its
//! [`Coordinator`] ([`serve`]); the [`GroupResp`] comes back. The Kafka side (decoding the
//! group APIs, encoding answers per version) is `kafka::groups`.

use super::coordinator::{
    CommitPart, Coordinator, GroupDescription, JoinRequest, JoinResponse, SyncRequest, SyncResponse,
};
use super::offsets::Committed;

/// The protocol type ListGroups gives a consumer-protocol group; `kafka::groups` answers
/// such a group's type as "consumer" (ListGroups v5, KIP-848) and a classic one's as "classic".
pub const CONSUMER_PROTOCOL: &str = "consumer-kip848";

/// A group operation, sent to the group's core.
#[derive(Debug)]
pub enum GroupReq {
    /// JoinGroup, with the broker's topics (name → partitions) when its protocol type is
    /// `consumer`: a consumer-protocol group assigns for its classic members.
    Join(JoinRequest, super::consumer::Topics),
    Sync(SyncRequest),
    Heartbeat {
        group: String,
        member: String,
        instance: Option<String>,
        generation: i32,
    },
    Leave {
        group: String,
        /// (member id, group instance id).
        members: Vec<(String, Option<String>)>,
    },
    Commit {
        group: String,
        generation: i32,
        member: String,
        instance: Option<String>,
        parts: Vec<CommitPart>,
    },
    /// TxnOffsetCommit: offsets pending until the producer's transaction ends.
    TxnCommit {
        group: String,
        producer_id: i64,
        generation: i32,
        member: String,
        instance: Option<String>,
        parts: Vec<CommitPart>,
    },
    /// A transaction marker for the group's offsets: apply (commit) or drop the producer's
    /// pending offsets.
    TxnEnd {
        group: String,
        producer_id: i64,
        commit: bool,
    },
    Fetch {
        group: String,
        topics: Option<Vec<(String, Vec<i32>)>>,
        /// OffsetFetch require_stable: partitions with pending transactional offsets answer
        /// UNSTABLE_OFFSET_COMMIT.
        require_stable: bool,
        /// OffsetFetch v9's member id and epoch, when the client sent them: checked against a
        /// consumer-protocol group's members (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH).
        member: Option<(String, i32)>,
    },
    /// OffsetDelete: (topic, partitions) whose committed offsets to delete.
    DeleteOffsets {
        group: String,
        topics: Vec<(String, Vec<i32>)>,
    },
    Describe(String),
    /// ConsumerGroupHeartbeat (KIP-848), with the broker's topics (name → partitions).
    ConsumerHeartbeat {
        heartbeat: Box<super::consumer::Heartbeat>,
        topics: super::consumer::Topics,
    },
    /// ConsumerGroupDescribe of one group.
    ConsumerDescribe(String),
    List,
    Delete(String),
    /// A topic was deleted: forget its committed offsets (sent to every core).
    TopicDeleted(String),
}

/// The answer to a [`GroupReq`].
#[derive(Debug)]
pub enum GroupResp {
    Join(JoinResponse),
    Sync(SyncResponse),
    Code(i16),
    Leave(i16, Vec<i16>),
    Commit(Vec<i16>),
    Fetch(Result<Vec<(String, i32, Committed)>, i16>),
    /// Per topic, per partition codes of an OffsetDelete, or the group's error.
    DeleteOffsets(Result<Vec<Vec<i16>>, i16>),
    Describe(GroupDescription),
    List(Vec<(String, String, String)>),
    ConsumerHeartbeat(super::consumer::HeartbeatAnswer),
    /// A consumer-protocol group, or the error of describing it.
    ConsumerDescribe(Result<super::consumer::GroupView, i16>),
    Done,
}

impl GroupReq {
    /// The group the request is for (none for a listing or a deleted topic).
    pub fn group(&self) -> Option<&str> {
        match self {
            GroupReq::Join(j, _) => Some(&j.group_id),
            GroupReq::Sync(s) => Some(&s.group_id),
            GroupReq::Heartbeat { group, .. }
            | GroupReq::Leave { group, .. }
            | GroupReq::Commit { group, .. }
            | GroupReq::TxnCommit { group, .. }
            | GroupReq::TxnEnd { group, .. }
            | GroupReq::Fetch { group, .. }
            | GroupReq::DeleteOffsets { group, .. } => Some(group),
            GroupReq::Describe(g) | GroupReq::Delete(g) | GroupReq::ConsumerDescribe(g) => Some(g),
            GroupReq::ConsumerHeartbeat { heartbeat, .. } => Some(&heartbeat.group_id),
            GroupReq::List | GroupReq::TopicDeleted(_) => None,
        }
    }

    /// The answer meaning "`code`, nothing done" in this request's shape.
    fn refused(&self, code: i16) -> GroupResp {
        match self {
            GroupReq::Join(j, _) => GroupResp::Join(JoinResponse {
                error: code,
                member_id: j.member_id.clone(),
                generation_id: -1,
                ..Default::default()
            }),
            GroupReq::Sync(_) => GroupResp::Sync(SyncResponse {
                error: code,
                ..Default::default()
            }),
            GroupReq::Leave { members, .. } => GroupResp::Leave(code, vec![code; members.len()]),
            GroupReq::Commit { parts, .. } | GroupReq::TxnCommit { parts, .. } => {
                GroupResp::Commit(vec![code; parts.len()])
            }
            GroupReq::Fetch { .. } => GroupResp::Fetch(Err(code)),
            GroupReq::DeleteOffsets { .. } => GroupResp::DeleteOffsets(Err(code)),
            GroupReq::Describe(_) => GroupResp::Describe(GroupDescription {
                error: code,
                state: String::new(),
                protocol_type: String::new(),
                protocol: String::new(),
                members: Vec::new(),
            }),
            GroupReq::ConsumerHeartbeat { .. } => {
                GroupResp::ConsumerHeartbeat(super::consumer::HeartbeatAnswer {
                    error: code,
                    member_epoch: -1,
                    ..Default::default()
                })
            }
            GroupReq::ConsumerDescribe(_) => GroupResp::ConsumerDescribe(Err(code)),
            _ => GroupResp::Code(code),
        }
    }
}

/// Serves a group operation on the core that owns the group.
pub async fn serve(coord: &Coordinator, req: GroupReq) -> GroupResp {
    if let Some(group) = req.group() {
        if let Err(code) = coord.prepare(group).await {
            return req.refused(code);
        }
    }
    match req {
        // A group has classic and consumer-protocol members alike during an online migration
        // (`migrate.rs`): a consumer-protocol group serves its classic members' requests.
        GroupReq::Join(j, topics) => match super::migrate::classic_join(coord, &j, &topics).await {
            Some(answer) => GroupResp::Join(answer),
            None => GroupResp::Join(coord.join(j).await),
        },
        GroupReq::ConsumerHeartbeat { heartbeat, topics } => {
            // A classic group with members: the online upgrade (or its refusal).
            let classic = !coord.consumer.is_live(&heartbeat.group_id)
                && coord
                    .group(&heartbeat.group_id)
                    .is_some_and(|g| !g.borrow().members.is_empty());
            GroupResp::ConsumerHeartbeat(if classic {
                super::migrate::upgrade(coord, &heartbeat, &topics).await
            } else {
                coord.consumer_heartbeat(&heartbeat, &topics).await
            })
        }
        GroupReq::ConsumerDescribe(g) => GroupResp::ConsumerDescribe(
            coord
                .consumer
                .describe(&g)
                .ok_or(super::state::codes::GROUP_ID_NOT_FOUND),
        ),
        GroupReq::Sync(s) => match super::migrate::classic_sync(coord, &s) {
            Some(answer) => GroupResp::Sync(answer),
            None => GroupResp::Sync(coord.sync(s).await),
        },
        GroupReq::Heartbeat {
            group,
            member,
            instance,
            generation,
        } => {
            let instance = instance.as_deref();
            match super::migrate::classic_heartbeat(coord, &group, &member, instance, generation) {
                Some(code) => GroupResp::Code(code),
                None => GroupResp::Code(coord.heartbeat(&group, &member, instance, generation)),
            }
        }
        GroupReq::Leave { group, members } => {
            let (top, each) = match super::migrate::classic_leave(coord, &group, &members).await {
                Some(answer) => answer,
                None => coord.leave(&group, &members).await,
            };
            GroupResp::Leave(top, each)
        }
        GroupReq::Commit {
            group,
            generation,
            member,
            instance,
            parts,
        } => GroupResp::Commit(
            coord
                .commit_offsets(&group, generation, &member, instance.as_deref(), parts)
                .await,
        ),
        GroupReq::TxnCommit {
            group,
            producer_id,
            generation,
            member,
            instance,
            parts,
        } => GroupResp::Commit(
            coord
                .txn_commit_offsets(
                    producer_id,
                    &group,
                    generation,
                    &member,
                    instance.as_deref(),
                    parts,
                )
                .await,
        ),
        GroupReq::TxnEnd {
            group,
            producer_id,
            commit,
        } => GroupResp::Code(coord.txn_end(&group, producer_id, commit).await),
        GroupReq::Fetch {
            group,
            topics,
            require_stable,
            member,
        } => {
            let refused = member
                .and_then(|(id, epoch)| coord.consumer.check_fetch(&group, &id, epoch))
                .filter(|&code| code != super::consumer::codes::NONE);
            match refused {
                Some(code) => GroupResp::Fetch(Err(code)),
                None => GroupResp::Fetch(coord.fetch_offsets(&group, topics, require_stable)),
            }
        }
        GroupReq::DeleteOffsets { group, topics } => {
            GroupResp::DeleteOffsets(coord.delete_offsets(&group, topics).await)
        }
        GroupReq::Describe(g) => GroupResp::Describe(coord.describe(&g)),
        GroupReq::List => {
            let mut all = coord.list();
            let consumer = coord.consumer.list();
            all.retain(|(id, _, _)| !consumer.iter().any(|(c, _)| c == id));
            all.extend(
                consumer
                    .into_iter()
                    .map(|(id, state)| (id, CONSUMER_PROTOCOL.to_string(), state.to_string())),
            );
            all.sort();
            GroupResp::List(all)
        }
        GroupReq::Delete(g) if coord.consumer.is_live(&g) => {
            GroupResp::Code(super::state::codes::NON_EMPTY_GROUP)
        }
        GroupReq::Delete(g) => GroupResp::Code(coord.delete_group(&g).await),
        GroupReq::TopicDeleted(t) => {
            coord.topic_deleted(&t).await;
            GroupResp::Done
        }
    }
}
