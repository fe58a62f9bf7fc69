//! One consumer group's state machine (Kafka's classic protocol): members, generations,
//! the join and sync phases, static membership; and the request/response types of the
//! group operations.

use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::offsets::{now_ms, StoredGroup, StoredMember};
use crate::broker::sync::Slot;

/// Kafka error codes used by the group APIs.
pub mod codes {
    pub const NONE: i16 = 0;
    pub const UNKNOWN_SERVER_ERROR: i16 = -1;
    pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
    pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    pub const NOT_COORDINATOR: i16 = 16;
    pub const ILLEGAL_GENERATION: i16 = 22;
    pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
    pub const INVALID_GROUP_ID: i16 = 24;
    pub const UNKNOWN_MEMBER_ID: i16 = 25;
    pub const INVALID_SESSION_TIMEOUT: i16 = 26;
    pub const REBALANCE_IN_PROGRESS: i16 = 27;
    pub const KAFKA_STORAGE_ERROR: i16 = 56;
    pub const NON_EMPTY_GROUP: i16 = 68;
    pub const GROUP_ID_NOT_FOUND: i16 = 69;
    pub const GROUP_MAX_SIZE_REACHED: i16 = 81;
    pub const FENCED_INSTANCE_ID: i16 = 82;
    pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;
    pub const UNSTABLE_OFFSET_COMMIT: i16 = 88;
}

/// The offset `fetch_offsets` puts in place of a partition's committed offset while an open
/// transaction holds a pending one and the fetch requires stable offsets: `kafka::group_offsets`
/// answers it as UNSTABLE_OFFSET_COMMIT (never stored: offsets are >= -1).
pub const UNSTABLE: i64 = i64::MIN;

/// Group settings, with Kafka's names.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// `group.initial.rebalance.delay.ms`: how long a new group waits for more members
    /// before its first rebalance completes.
    pub initial_rebalance_delay_ms: u64,
    /// `group.min.session.timeout.ms`.
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`.
    pub max_session_timeout_ms: i32,
    /// `group.max.size`.
    pub max_size: usize,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            initial_rebalance_delay_ms: 300,
            min_session_timeout_ms: 1_000,
            max_session_timeout_ms: 1_800_000,
            max_size: 1_000,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Empty => "Empty",
            State::PreparingRebalance => "PreparingRebalance",
            State::CompletingRebalance => "CompletingRebalance",
            State::Stable => "Stable",
        }
    }
}

#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub group_id: String,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
}

#[derive(Debug, Clone, Default)]
pub struct JoinResponse {
    pub error: i16,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Only for the leader: (member id, group instance id, metadata).
    pub members: Vec<(String, Option<String>, Bytes)>,
}

#[derive(Debug, Clone)]
pub struct SyncRequest {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignments: Vec<(String, Bytes)>,
}

#[derive(Debug, Clone, Default)]
pub struct SyncResponse {
    pub error: i16,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

/// A member as DescribeGroups shows it.
#[derive(Debug, Clone)]
pub struct MemberDescription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

#[derive(Debug, Clone)]
pub struct GroupDescription {
    pub error: i16,
    pub state: String,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<MemberDescription>,
}

/// One partition of an OffsetCommit.
#[derive(Debug, Clone)]
pub struct CommitPart {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

pub(super) struct Member {
    pub(super) group_instance_id: Option<String>,
    pub(super) client_id: String,
    pub(super) client_host: String,
    pub(super) session_timeout: Duration,
    pub(super) rebalance_timeout: Duration,
    pub(super) protocol_type: String,
    pub(super) protocols: Vec<(String, Bytes)>,
    pub(super) assignment: Bytes,
    pub(super) last_heartbeat: Instant,
    pub(super) join_waiter: Option<Rc<Slot<JoinResponse>>>,
    pub(super) sync_waiter: Option<Rc<Slot<SyncResponse>>>,
}

impl Member {
    /// Answers the member's waiting JoinGroup and SyncGroup (if any) with `error`.
    pub(super) fn answer_waiters(&mut self, id: &str, error: i16) {
        if let Some(w) = self.join_waiter.take() {
            w.set(JoinResponse {
                error,
                member_id: id.to_owned(),
                generation_id: -1,
                ..Default::default()
            });
        }
        if let Some(w) = self.sync_waiter.take() {
            w.set(SyncResponse {
                error,
                ..Default::default()
            });
        }
    }
}

pub(super) struct Group {
    pub(super) state: State,
    pub(super) generation: i32,
    pub(super) protocol_type: Option<String>,
    pub(super) protocol: Option<String>,
    pub(super) leader: Option<String>,
    pub(super) members: BTreeMap<String, Member>,
    /// Join order, for picking a leader.
    pub(super) order: Vec<String>,
    /// Static members (KIP-345): group instance id → its current member id.
    pub(super) statics: HashMap<String, String>,
    pub(super) rebalance_deadline: Instant,
    pub(super) delay_until: Instant,
    /// Whether the offsets store holds a state of this group (written when a generation
    /// became Stable, or restored from it), which a move to Empty must remove.
    pub(super) persisted: bool,
}

impl Group {
    pub(super) fn new() -> Group {
        let now = Instant::now();
        Group {
            state: State::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            order: Vec::new(),
            statics: HashMap::new(),
            rebalance_deadline: now,
            delay_until: now,
            persisted: false,
        }
    }

    pub(super) fn remove_member(&mut self, id: &str) -> Option<Member> {
        self.order.retain(|m| m != id);
        let m = self.members.remove(id)?;
        if let Some(instance) = &m.group_instance_id {
            if self.statics.get(instance).is_some_and(|cur| cur == id) {
                self.statics.remove(instance);
            }
        }
        if let Some(w) = &m.join_waiter {
            w.set(JoinResponse {
                error: codes::UNKNOWN_MEMBER_ID,
                member_id: id.to_owned(),
                ..Default::default()
            });
        }
        if let Some(w) = &m.sync_waiter {
            w.set(SyncResponse {
                error: codes::UNKNOWN_MEMBER_ID,
                ..Default::default()
            });
        }
        if self.leader.as_deref() == Some(id) {
            self.leader = None;
        }
        Some(m)
    }

    /// Kafka's check of who sends a request: a given instance id must map to `member_id`
    /// (else the sender is an older incarnation of a static member: FENCED_INSTANCE_ID),
    /// and the member must exist.
    pub(super) fn check_member(&self, member_id: &str, instance: Option<&str>) -> i16 {
        if let Some(instance) = instance {
            match self.statics.get(instance) {
                Some(cur) if cur != member_id => return codes::FENCED_INSTANCE_ID,
                Some(_) => {}
                None => return codes::UNKNOWN_MEMBER_ID,
            }
        }
        if self.members.contains_key(member_id) {
            codes::NONE
        } else {
            codes::UNKNOWN_MEMBER_ID
        }
    }

    /// A static member restarted (its instance id arrives with no member id): `new_id`
    /// takes over `old_id`'s place, assignment and leadership. The old incarnation's
    /// pending requests are fenced.
    pub(super) fn replace_static(&mut self, instance: &str, old_id: &str, new_id: &str) {
        let Some(mut m) = self.members.remove(old_id) else {
            return;
        };
        m.answer_waiters(old_id, codes::FENCED_INSTANCE_ID);
        for id in self.order.iter_mut().filter(|id| *id == old_id) {
            *id = new_id.to_owned();
        }
        if self.leader.as_deref() == Some(old_id) {
            self.leader = Some(new_id.to_owned());
        }
        self.members.insert(new_id.to_owned(), m);
        self.statics.insert(instance.to_owned(), new_id.to_owned());
    }

    /// Protocols every member supports, in the first member's order of preference.
    pub(super) fn common_protocols(&self) -> Vec<String> {
        let mut it = self.members.values();
        let Some(first) = it.next() else {
            return Vec::new();
        };
        let mut names: Vec<String> = first.protocols.iter().map(|(n, _)| n.clone()).collect();
        for m in it {
            names.retain(|n| m.protocols.iter().any(|(p, _)| p == n));
        }
        names
    }

    pub(super) fn select_protocol(&self) -> Option<String> {
        let common = self.common_protocols();
        let mut votes: HashMap<&str, usize> = HashMap::new();
        for m in self.members.values() {
            if let Some((p, _)) = m.protocols.iter().find(|(p, _)| common.contains(p)) {
                *votes.entry(p.as_str()).or_default() += 1;
            }
        }
        common
            .iter()
            .max_by_key(|p| {
                (
                    votes.get(p.as_str()).copied().unwrap_or(0),
                    std::cmp::Reverse(common.iter().position(|c| c == *p)),
                )
            })
            .cloned()
    }

    pub(super) fn prepare_rebalance(&mut self, initial_delay: Duration) {
        let now = Instant::now();
        if self.state == State::CompletingRebalance {
            for m in self.members.values_mut() {
                if let Some(w) = m.sync_waiter.take() {
                    w.set(SyncResponse {
                        error: codes::REBALANCE_IN_PROGRESS,
                        ..Default::default()
                    });
                }
            }
        }
        if self.state == State::Empty {
            self.delay_until = now + initial_delay;
        }
        if self.state != State::PreparingRebalance {
            let timeout = self
                .members
                .values()
                .map(|m| m.rebalance_timeout)
                .max()
                .unwrap_or_default();
            self.rebalance_deadline = now + timeout;
            self.state = State::PreparingRebalance;
        }
    }

    /// The answer to a JoinGroup of the current generation for `member_id` (the leader also
    /// gets every member's metadata for the chosen protocol).
    pub(super) fn join_response(&self, member_id: &str) -> JoinResponse {
        let leader = self.leader.clone().unwrap_or_default();
        let members = if leader == member_id {
            self.order
                .iter()
                .filter_map(|id| self.members.get(id).map(|m| (id, m)))
                .map(|(id, m)| {
                    let md = m
                        .protocols
                        .iter()
                        .find(|(p, _)| Some(p) == self.protocol.as_ref())
                        .map(|(_, md)| md.clone())
                        .unwrap_or_default();
                    (id.clone(), m.group_instance_id.clone(), md)
                })
                .collect()
        } else {
            Vec::new()
        };
        JoinResponse {
            error: codes::NONE,
            generation_id: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol.clone(),
            leader,
            member_id: member_id.to_owned(),
            members,
        }
    }

    /// Completes the join phase if every member has rejoined (after the initial delay) or the
    /// rebalance timeout passed.
    pub(super) fn maybe_complete_join(&mut self, group_id: &str) {
        if self.state != State::PreparingRebalance {
            return;
        }
        let now = Instant::now();
        let all_joined = self.members.values().all(|m| m.join_waiter.is_some());
        if !((all_joined && now >= self.delay_until) || now >= self.rebalance_deadline) {
            return;
        }
        let missing: Vec<String> = self
            .members
            .iter()
            .filter(|(_, m)| m.join_waiter.is_none() && m.group_instance_id.is_none())
            .map(|(id, _)| id.clone())
            .collect();
        // Static members that did not rejoin stay (Kafka's rule): they keep their place
        // until their session times out.
        for id in missing {
            tracing::info!(group = group_id, member = %id, "member did not rejoin in time; removed");
            self.remove_member(&id);
        }
        self.generation += 1;
        if self.members.is_empty() {
            self.state = State::Empty;
            self.protocol = None;
            self.protocol_type = None;
            return;
        }
        self.protocol = self.select_protocol();
        if self
            .leader
            .as_ref()
            .is_none_or(|l| !self.members.contains_key(l))
        {
            self.leader = self.order.first().cloned();
        }
        self.state = State::CompletingRebalance;
        tracing::info!(group = group_id, generation = self.generation, members = self.members.len(), protocol = ?self.protocol, "rebalance: join phase complete");
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let response = self.join_response(&id);
            let m = self.members.get_mut(&id).expect("listed above");
            m.last_heartbeat = now;
            m.assignment = Bytes::new();
            if let Some(w) = m.join_waiter.take() {
                w.set(response);
            }
        }
    }
}

/// Persisted membership (`persist.rs`, `offsets/group_state.rs`).
impl Group {
    /// A Stable group's state as it is stored.
    pub(super) fn snapshot(&self) -> StoredGroup {
        StoredGroup {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: self.protocol.clone().unwrap_or_default(),
            leader: self.leader.clone().unwrap_or_default(),
            state_ms: now_ms(),
            members: self
                .order
                .iter()
                .filter_map(|id| self.members.get(id).map(|m| (id, m)))
                .map(|(id, m)| StoredMember {
                    member_id: id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: millis(m.rebalance_timeout),
                    session_timeout_ms: millis(m.session_timeout),
                    protocols: m.protocols.clone(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    /// The group a stored state describes: Stable at its generation, no request waiting, every
    /// member's session starting now.
    pub(super) fn restored(s: &StoredGroup) -> Group {
        let now = Instant::now();
        let mut g = Group::new();
        g.state = State::Stable;
        g.generation = s.generation;
        g.protocol_type = Some(s.protocol_type.clone());
        g.protocol = Some(s.protocol.clone());
        g.leader = (!s.leader.is_empty()).then(|| s.leader.clone());
        g.persisted = true;
        let mut members = BTreeMap::new();
        let mut statics = HashMap::new();
        for m in &s.members {
            if let Some(instance) = &m.group_instance_id {
                statics.insert(instance.clone(), m.member_id.clone());
            }
            g.order.push(m.member_id.clone());
            members.insert(
                m.member_id.clone(),
                Member {
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout: Duration::from_millis(m.session_timeout_ms.max(0) as u64),
                    rebalance_timeout: Duration::from_millis(m.rebalance_timeout_ms.max(0) as u64),
                    protocol_type: s.protocol_type.clone(),
                    protocols: m.protocols.clone(),
                    assignment: m.assignment.clone(),
                    last_heartbeat: now,
                    join_waiter: None,
                    sync_waiter: None,
                },
            );
        }
        g.members = members;
        g.statics = statics;
        g
    }
}

fn millis(d: Duration) -> i32 {
    d.as_millis().min(i32::MAX as u128) as i32
}
