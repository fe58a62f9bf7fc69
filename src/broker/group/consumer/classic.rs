//! Classic members of a consumer-protocol group: Kafka's online migration (KIP-848,
//! `group.consumer.migration.policy=bidirectional`, Kafka 4's default). While a group's
//! consumers are restarted one by one from `group.protocol=classic` to `consumer` (or back),
//! both kinds are members of one group and the broker assigns for all of them.
//!
//! A classic member speaks JoinGroup / SyncGroup / Heartbeat / LeaveGroup; here they act on
//! the same state machine as ConsumerGroupHeartbeat (`mod.rs`), as Kafka's coordinator does:
//!
//! - **JoinGroup** is the member's heartbeat with its full state: the subscription and the
//!   partitions it still owns come from its first protocol's metadata
//!   (ConsumerProtocolSubscription, `embedded.rs`); the member moves one step towards its
//!   target and is answered at once — generation = its member epoch, protocol = its own first
//!   one, no leader (the broker assigns, so no member runs an assignor).
//! - **SyncGroup** answers the member's current partitions (those it must give up or still
//!   waits for left out) as a ConsumerProtocolAssignment in its metadata's version.
//! - **Heartbeat** answers REBALANCE_IN_PROGRESS when the member has a step to make (its epoch
//!   is behind the group's, it must give partitions up, or partitions it waits for were
//!   released): it then joins again, giving up what it no longer has (eager members give up
//!   everything, cooperative ones what the last assignment left out).
//! - Its session is its own classic session timeout; a member told to rejoin (or to sync) that
//!   does not within its rebalance timeout is fenced.

use std::time::{Duration, Instant};

use bytes::Bytes;

use super::assign::{minus, union, Partitions};
use super::{embedded, ConsumerConfig, ConsumerGroup, Heartbeat, Member, MemberState, Topics};
use crate::broker::group::state::{codes, JoinRequest, JoinResponse};

/// The protocol type of consumers in classic groups: the only one a consumer-protocol group
/// lets join with JoinGroup.
pub const PROTOCOL_TYPE: &str = "consumer";

/// What a classic member told the group when it joined.
#[derive(Debug, Clone)]
pub struct ClassicInfo {
    /// Its JoinGroup's session timeout (the group's `group.consumer.session.timeout.ms` does
    /// not apply to it).
    pub session_timeout: Duration,
    /// Its protocols (assignor names) and their metadata, in its order of preference.
    pub protocols: Vec<(String, Bytes)>,
    /// When it must have sent its next JoinGroup (told to rebalance) or SyncGroup (joined):
    /// fenced after. Not stored.
    pub deadline: Option<Instant>,
}

/// A classic member as a group conversion carries it (`group::migrate`): from a classic group
/// into a consumer-protocol one and back.
#[derive(Debug, Clone)]
pub struct ClassicMember {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocols: Vec<(String, Bytes)>,
    /// Its rack (ConsumerProtocolSubscription v3), into a consumer group.
    pub rack_id: Option<String>,
    /// Its partitions: what its last SyncGroup gave it (into a consumer group), or its target
    /// (out of one).
    pub assigned: Partitions,
}

impl ConsumerGroup {
    /// Serves a classic member's JoinGroup.
    pub fn classic_join(
        &mut self,
        req: &JoinRequest,
        topics: &Topics,
        config: &ConsumerConfig,
        new_member_id: impl FnOnce() -> String,
        now: Instant,
    ) -> JoinResponse {
        let fail = |error: i16| JoinResponse {
            error,
            member_id: req.member_id.clone(),
            generation_id: -1,
            ..Default::default()
        };
        if req.protocol_type != PROTOCOL_TYPE || !self.supports(&req.member_id, &req.protocols) {
            return fail(codes::INCONSISTENT_GROUP_PROTOCOL);
        }
        let Some((protocol, sub)) = req
            .protocols
            .first()
            .and_then(|(p, md)| Some((p.clone(), embedded::decode_subscription(md)?)))
        else {
            return fail(codes::INCONSISTENT_GROUP_PROTOCOL);
        };
        let member_id = if req.member_id.is_empty() {
            new_member_id()
        } else {
            req.member_id.clone()
        };
        if let Some(instance) = &req.group_instance_id {
            let holder = self
                .members
                .values()
                .find(|m| m.instance_id.as_ref() == Some(instance) && !m.away)
                .map(|m| m.id.clone());
            match holder {
                // A known member id must be the instance's current one.
                Some(h) if !req.member_id.is_empty() && h != req.member_id => {
                    return fail(codes::FENCED_INSTANCE_ID)
                }
                // A restarted static member (no member id) takes the instance's place at once,
                // as Kafka lets a classic one.
                Some(h) if req.member_id.is_empty() => {
                    self.members.get_mut(&h).expect("found above").away = true;
                }
                None if !req.member_id.is_empty() && !self.members.contains_key(&member_id) => {
                    return fail(codes::UNKNOWN_MEMBER_ID)
                }
                _ => {}
            }
        }
        let existing = self.members.get(&member_id).filter(|m| !m.away);
        // A member id the group does not know (or a consumer-protocol member's) is refused,
        // as Kafka refuses it; only a JoinGroup without one is a new member.
        let taken_over = req.member_id.is_empty();
        if existing.is_some_and(|m| m.classic.is_none()) || (existing.is_none() && !taken_over) {
            return fail(codes::UNKNOWN_MEMBER_ID);
        }
        let joining = existing.is_none();
        let rebalance_timeout_ms = req.rebalance_timeout_ms.max(req.session_timeout_ms);
        let mut hb = Heartbeat {
            member_id: member_id.clone(),
            member_epoch: existing.map_or(0, |m| m.epoch),
            instance_id: req.group_instance_id.clone(),
            rack_id: sub.rack_id,
            rebalance_timeout_ms,
            subscribed_topic_names: Some(sub.topics),
            owned: Some(Partitions::new()),
            client_id: req.client_id.clone(),
            client_host: req.client_host.clone(),
            ..Default::default()
        };
        if joining {
            if let Some(refused) = self.join(&hb, &member_id, config, now) {
                return fail(refused.error);
            }
        }
        // Only partitions of topics the broker has count as owned (Kafka drops the others).
        hb.owned = Some(
            sub.owned
                .into_iter()
                .filter(|(t, _)| topics.contains_key(t))
                .collect(),
        );
        let session_timeout = Duration::from_millis(req.session_timeout_ms.max(0) as u64);
        let m = self.members.get_mut(&member_id).expect("joined above");
        m.classic = Some(ClassicInfo {
            session_timeout,
            protocols: req.protocols.clone(),
            deadline: None,
        });
        self.apply(
            &member_id,
            &hb,
            None,
            joining,
            topics,
            now + session_timeout,
            now,
        );
        let m = self.members.get_mut(&member_id).expect("a member");
        let sync_by = now + m.rebalance_timeout;
        let classic = m.classic.as_mut().expect("set above");
        classic.deadline = Some(sync_by);
        JoinResponse {
            error: codes::NONE,
            generation_id: m.epoch,
            protocol_type: Some(PROTOCOL_TYPE.to_string()),
            protocol_name: Some(protocol),
            leader: String::new(),
            member_id,
            members: Vec::new(),
        }
    }

    /// Serves a classic member's SyncGroup: its partitions, encoded for it.
    pub fn classic_sync(
        &mut self,
        member_id: &str,
        instance: Option<&str>,
        generation: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
        now: Instant,
    ) -> Result<Bytes, i16> {
        let group_epoch = self.group_epoch;
        let m = self.classic_member(member_id, instance)?;
        if generation != m.epoch {
            return Err(codes::ILLEGAL_GENERATION);
        }
        let classic = m.classic.as_mut().expect("a classic member");
        let (first, metadata) = classic.protocols.first().cloned().unwrap_or_default();
        if protocol_type.is_some_and(|t| t != PROTOCOL_TYPE)
            || protocol_name.is_some_and(|p| p != first)
        {
            return Err(codes::INCONSISTENT_GROUP_PROTOCOL);
        }
        if group_epoch > m.epoch && m.state != MemberState::UnrevokedPartitions {
            classic.deadline.get_or_insert(now + m.rebalance_timeout);
            return Err(codes::REBALANCE_IN_PROGRESS);
        }
        classic.deadline = None;
        m.session_deadline = now + classic.session_timeout;
        Ok(embedded::encode_assignment(
            embedded::version_of(&metadata),
            &m.assigned,
        ))
    }

    /// Serves a classic member's Heartbeat: NONE, or REBALANCE_IN_PROGRESS when it has a step
    /// to make towards its target (it must join again).
    pub fn classic_heartbeat(
        &mut self,
        member_id: &str,
        instance: Option<&str>,
        generation: i32,
        now: Instant,
    ) -> i16 {
        let group_epoch = self.group_epoch;
        let released = self.released_for(member_id);
        let m = match self.classic_member(member_id, instance) {
            Ok(m) => m,
            Err(code) => return code,
        };
        if generation != m.epoch {
            return codes::ILLEGAL_GENERATION;
        }
        let classic = m.classic.as_mut().expect("a classic member");
        m.session_deadline = now + classic.session_timeout;
        let step = m.epoch < group_epoch
            || m.state == MemberState::UnrevokedPartitions
            || (m.state == MemberState::UnreleasedPartitions && released);
        if !step {
            return codes::NONE;
        }
        classic.deadline.get_or_insert(now + m.rebalance_timeout);
        codes::REBALANCE_IN_PROGRESS
    }

    /// Serves a classic member's LeaveGroup (member id and/or group instance id).
    pub fn classic_leave(&mut self, member_id: &str, instance: Option<&str>) -> i16 {
        let id = match instance {
            Some(instance) => match self
                .members
                .values()
                .find(|m| m.instance_id.as_deref() == Some(instance) && !m.away)
            {
                Some(m) if !member_id.is_empty() && m.id != member_id => {
                    return codes::FENCED_INSTANCE_ID
                }
                Some(m) => m.id.clone(),
                None => return codes::UNKNOWN_MEMBER_ID,
            },
            None => member_id.to_string(),
        };
        if self.members.get(&id).is_none_or(|m| m.classic.is_none()) {
            return codes::UNKNOWN_MEMBER_ID;
        }
        self.members.remove(&id);
        self.target.remove(&id);
        self.regexes
            .retain_used(self.members.values().map(|m| &m.subscription));
        let topics = self.counts.clone();
        self.refresh_target(&topics, true);
        codes::NONE
    }

    /// The classic member `member_id`, checked as Kafka checks the sender of a classic request.
    fn classic_member(
        &mut self,
        member_id: &str,
        instance: Option<&str>,
    ) -> Result<&mut Member, i16> {
        let m = self
            .members
            .get_mut(member_id)
            .filter(|m| !m.away && m.classic.is_some())
            .ok_or(codes::UNKNOWN_MEMBER_ID)?;
        if instance.is_some() && m.instance_id.as_deref() != instance {
            return Err(codes::FENCED_INSTANCE_ID);
        }
        Ok(m)
    }

    /// Whether a member waiting for partitions others owned can now take some of them.
    fn released_for(&self, member_id: &str) -> bool {
        let Some(m) = self.members.get(member_id) else {
            return false;
        };
        let empty = Partitions::new();
        let wanted = minus(self.target.get(member_id).unwrap_or(&empty), &m.assigned);
        let owned_elsewhere = self
            .members
            .values()
            .filter(|o| o.id != member_id)
            .fold(Partitions::new(), |acc, o| {
                union(&union(&acc, &o.assigned), &o.revoking)
            });
        minus(&wanted, &owned_elsewhere) != Partitions::new()
    }

    /// Whether a classic member offering `protocols` may join: one of them must be supported
    /// by every other classic member (Kafka's INCONSISTENT_GROUP_PROTOCOL rule).
    fn supports(&self, member_id: &str, protocols: &[(String, Bytes)]) -> bool {
        let others: Vec<&ClassicInfo> = self
            .members
            .values()
            .filter(|m| m.id != member_id && !m.away)
            .filter_map(|m| m.classic.as_ref())
            .collect();
        protocols.iter().any(|(p, _)| {
            others
                .iter()
                .all(|c| c.protocols.iter().any(|(q, _)| q == p))
        })
    }

    /// Whether the group has members and every one of them is a classic member: the last
    /// consumer-protocol member left, and the group goes back to the classic protocol.
    pub fn only_classic(&self) -> bool {
        !self.members.is_empty()
            && self
                .members
                .values()
                .all(|m| m.classic.is_some() && !m.away)
    }

    /// A consumer-protocol group made of a classic group's members (an online upgrade): the
    /// group and every member at the classic generation, each holding what its last SyncGroup
    /// gave it, which is also the target; the new member's heartbeat then moves the group on.
    pub fn from_classic(
        generation: i32,
        members: Vec<ClassicMember>,
        subscriptions: Vec<Vec<String>>,
        topics: &Topics,
        now: Instant,
    ) -> ConsumerGroup {
        let mut g = ConsumerGroup {
            group_epoch: generation,
            assignment_epoch: generation,
            assignor: super::assign::ASSIGNORS[0].to_string(),
            ..Default::default()
        };
        for (c, names) in members.into_iter().zip(subscriptions) {
            let subscribed: std::collections::BTreeSet<String> = names.into_iter().collect();
            for t in &subscribed {
                if let Some(n) = topics.get(t) {
                    g.counts.insert(t.clone(), *n);
                }
            }
            g.target.insert(c.id.clone(), c.assigned.clone());
            g.members.insert(
                c.id.clone(),
                Member {
                    id: c.id,
                    instance_id: c.instance_id,
                    rack_id: c.rack_id,
                    client_id: c.client_id,
                    client_host: c.client_host,
                    epoch: generation,
                    previous_epoch: generation,
                    state: MemberState::Stable,
                    subscription: super::subscription::Subscription {
                        names: subscribed.clone(),
                        regex: None,
                    },
                    subscribed,
                    assignor: None,
                    rebalance_timeout: c.rebalance_timeout,
                    assigned: c.assigned,
                    revoking: Partitions::new(),
                    told: None,
                    session_deadline: now + c.session_timeout,
                    revoke_deadline: None,
                    away: false,
                    classic: Some(ClassicInfo {
                        session_timeout: c.session_timeout,
                        protocols: c.protocols,
                        deadline: None,
                    }),
                },
            );
        }
        g
    }

    /// The members of a group going back to the classic protocol, each with its target
    /// partitions (what the classic group's first rebalance starts from).
    pub fn into_classic(self) -> Vec<ClassicMember> {
        let ConsumerGroup {
            members, target, ..
        } = self;
        members
            .into_values()
            .filter_map(|m| {
                let c = m.classic?;
                Some(ClassicMember {
                    assigned: target.get(&m.id).cloned().unwrap_or_default(),
                    id: m.id,
                    instance_id: m.instance_id,
                    rack_id: m.rack_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    session_timeout: c.session_timeout,
                    rebalance_timeout: m.rebalance_timeout,
                    protocols: c.protocols,
                })
            })
            .collect()
    }
}
