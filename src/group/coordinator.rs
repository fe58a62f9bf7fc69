//! The group coordinator of one core: the classic Kafka consumer-group protocol with
//! client-side assignment, for the groups whose bucket this core owns.
//!
//! A group moves through Kafka's states:
//!
//! ```text
//!   Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶ CompletingRebalance
//!     ▲                   ▲      ▲                                    │ leader's SyncGroup
//!     │ last member       │      └──────── join, leave, expiry ───────┤
//!     └─── leaves ────────┴───────────────────────────────────── Stable ◀┘
//! ```
//!
//! JoinGroup and a follower's SyncGroup are answered when the rebalance step they wait for
//! completes; everything else is answered at once. Members that stop heartbeating are
//! removed after their session timeout by [`Coordinator::tick`], which the core calls
//! periodically.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use weir_storage::BatchCache;

use super::offsets::{bucket_of, Committed, OffsetStore, BUCKETS};
use crate::sync::Slot;

/// Kafka error codes used by the group APIs.
pub mod codes {
    pub const NONE: i16 = 0;
    pub const UNKNOWN_SERVER_ERROR: i16 = -1;
    pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
    pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
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
}

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

struct Member {
    group_instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    protocol_type: String,
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    last_heartbeat: Instant,
    join_waiter: Option<Rc<Slot<JoinResponse>>>,
    sync_waiter: Option<Rc<Slot<SyncResponse>>>,
}

struct Group {
    state: State,
    generation: i32,
    protocol_type: Option<String>,
    protocol: Option<String>,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// Join order, for picking a leader.
    order: Vec<String>,
    /// Static members (KIP-345): group instance id → its current member id.
    statics: HashMap<String, String>,
    rebalance_deadline: Instant,
    delay_until: Instant,
}

impl Group {
    fn new() -> Group {
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
        }
    }

    fn remove_member(&mut self, id: &str) -> Option<Member> {
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
    fn check_member(&self, member_id: &str, instance: Option<&str>) -> i16 {
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
    fn replace_static(&mut self, instance: &str, old_id: &str, new_id: &str) {
        let Some(mut m) = self.members.remove(old_id) else {
            return;
        };
        if let Some(w) = m.join_waiter.take() {
            w.set(JoinResponse {
                error: codes::FENCED_INSTANCE_ID,
                member_id: old_id.to_owned(),
                generation_id: -1,
                ..Default::default()
            });
        }
        if let Some(w) = m.sync_waiter.take() {
            w.set(SyncResponse {
                error: codes::FENCED_INSTANCE_ID,
                ..Default::default()
            });
        }
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
    fn common_protocols(&self) -> Vec<String> {
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

    fn select_protocol(&self) -> Option<String> {
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

    fn prepare_rebalance(&mut self, initial_delay: Duration) {
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
    fn join_response(&self, member_id: &str) -> JoinResponse {
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
    fn maybe_complete_join(&mut self, group_id: &str) {
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

/// The group coordinator of one core.
pub struct Coordinator {
    config: GroupConfig,
    groups: RefCell<HashMap<String, Rc<RefCell<Group>>>>,
    /// Offset stores opened so far, by bucket. A bucket with no offsets on disk is opened
    /// (its log created) on its first commit, so a broker without groups creates nothing.
    stores: RefCell<HashMap<usize, Rc<OffsetStore>>>,
    owned: Vec<usize>,
    data_dir: std::path::PathBuf,
    cache: Rc<BatchCache>,
    open_lock: glommio::sync::Semaphore,
    next_member: std::cell::Cell<u64>,
}

impl Coordinator {
    /// Opens the offset stores with data of the buckets `core` owns (bucket % cores == core).
    pub async fn open(
        data_dir: &Path,
        core: usize,
        cores: usize,
        cache: Rc<BatchCache>,
        config: GroupConfig,
    ) -> Result<Coordinator, weir_storage::Error> {
        let owned: Vec<usize> = (0..BUCKETS).filter(|b| b % cores.max(1) == core).collect();
        let mut stores = HashMap::new();
        for &bucket in &owned {
            if OffsetStore::exists(data_dir, bucket) {
                stores.insert(
                    bucket,
                    Rc::new(OffsetStore::open(data_dir, bucket, cache.clone()).await?),
                );
            }
        }
        Ok(Coordinator {
            config,
            groups: RefCell::new(HashMap::new()),
            stores: RefCell::new(stores),
            owned,
            data_dir: data_dir.to_owned(),
            cache,
            open_lock: glommio::sync::Semaphore::new(1),
            next_member: std::cell::Cell::new(0),
        })
    }

    /// The core that owns `group`.
    pub fn core_of(group: &str, cores: usize) -> usize {
        bucket_of(group) % cores.max(1)
    }

    /// Whether this core coordinates `group`.
    fn owns(&self, group: &str) -> bool {
        self.owned.contains(&bucket_of(group))
    }

    /// The group's offset store if it is open (an unopened store holds no offsets).
    fn store(&self, group: &str) -> Option<Rc<OffsetStore>> {
        self.stores.borrow().get(&bucket_of(group)).cloned()
    }

    /// The group's offset store, opened (created) if needed.
    async fn store_for_write(&self, group: &str) -> Result<Rc<OffsetStore>, i16> {
        if !self.owns(group) {
            return Err(codes::NOT_COORDINATOR);
        }
        if let Some(s) = self.store(group) {
            return Ok(s);
        }
        let _permit = self
            .open_lock
            .acquire_permit(1)
            .await
            .map_err(|_| codes::COORDINATOR_NOT_AVAILABLE)?;
        if let Some(s) = self.store(group) {
            return Ok(s);
        }
        let bucket = bucket_of(group);
        match OffsetStore::open(&self.data_dir, bucket, self.cache.clone()).await {
            Ok(s) => {
                let s = Rc::new(s);
                self.stores.borrow_mut().insert(bucket, s.clone());
                Ok(s)
            }
            Err(e) => {
                tracing::warn!(bucket, error = %e, "opening an offsets log failed");
                Err(codes::KAFKA_STORAGE_ERROR)
            }
        }
    }

    fn group(&self, id: &str) -> Option<Rc<RefCell<Group>>> {
        self.groups.borrow().get(id).cloned()
    }

    /// A fresh member id: the client id and a unique suffix, as Kafka makes them.
    fn new_member_id(&self, client_id: &str) -> String {
        let n = self.next_member.get();
        self.next_member.set(n + 1);
        let client = if client_id.is_empty() {
            "member"
        } else {
            client_id
        };
        format!(
            "{client}-{:016x}{n:04x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
        )
    }

    fn initial_delay(&self) -> Duration {
        Duration::from_millis(self.config.initial_rebalance_delay_ms)
    }

    pub async fn join(&self, req: JoinRequest) -> JoinResponse {
        let fail = |error: i16, member_id: &str| JoinResponse {
            error,
            member_id: member_id.to_owned(),
            generation_id: -1,
            ..Default::default()
        };
        if req.group_id.is_empty() {
            return fail(codes::INVALID_GROUP_ID, &req.member_id);
        }
        if !self.owns(&req.group_id) {
            return fail(codes::NOT_COORDINATOR, &req.member_id);
        }
        if req.session_timeout_ms < self.config.min_session_timeout_ms
            || req.session_timeout_ms > self.config.max_session_timeout_ms
        {
            return fail(codes::INVALID_SESSION_TIMEOUT, &req.member_id);
        }
        if req.protocols.is_empty() || req.protocol_type.is_empty() {
            return fail(codes::INCONSISTENT_GROUP_PROTOCOL, &req.member_id);
        }
        let group = {
            let mut groups = self.groups.borrow_mut();
            if !req.member_id.is_empty() && !groups.contains_key(&req.group_id) {
                return fail(codes::UNKNOWN_MEMBER_ID, &req.member_id);
            }
            groups
                .entry(req.group_id.clone())
                .or_insert_with(|| Rc::new(RefCell::new(Group::new())))
                .clone()
        };
        let slot = Rc::new(Slot::default());
        {
            let mut g = group.borrow_mut();
            if !g.members.is_empty() {
                if g.protocol_type
                    .as_deref()
                    .is_some_and(|t| t != req.protocol_type)
                {
                    return fail(codes::INCONSISTENT_GROUP_PROTOCOL, &req.member_id);
                }
                let supported = g.common_protocols();
                let others_ok = g.members.len() == 1 && g.members.contains_key(&req.member_id);
                if !others_ok && !req.protocols.iter().any(|(p, _)| supported.contains(p)) {
                    return fail(codes::INCONSISTENT_GROUP_PROTOCOL, &req.member_id);
                }
            }
            let instance = req.group_instance_id.as_deref();
            let known_static = instance.and_then(|i| g.statics.get(i).cloned());
            // Set when a restarted static member took over its old member id.
            let mut replaced = false;
            let member_id = if req.member_id.is_empty() {
                if let (Some(instance), Some(old)) = (instance, known_static) {
                    let new_id = self.new_member_id(&req.client_id);
                    let leader_before = g.leader.clone().unwrap_or_default();
                    g.replace_static(instance, &old, &new_id);
                    tracing::info!(group = %req.group_id, instance, old = %old, member = %new_id,
                        state = g.state.name(), "static member rejoined with a new member id");
                    replaced = true;
                    if g.state == State::Stable {
                        let m = g.members.get_mut(&new_id).expect("just replaced");
                        let (old_protocols, old_type) =
                            (m.protocols.clone(), m.protocol_type.clone());
                        m.protocols = req.protocols.clone();
                        m.protocol_type = req.protocol_type.clone();
                        // Kafka's rule (KIP-345): a static member coming back to a Stable group
                        // that does not change the group's protocol gets the current generation
                        // and no rebalance; the previous leader id is returned so it does not
                        // run an assignment a Stable group would ignore.
                        if g.select_protocol() == g.protocol {
                            let m = g.members.get_mut(&new_id).expect("just replaced");
                            m.session_timeout =
                                Duration::from_millis(req.session_timeout_ms.max(0) as u64);
                            m.rebalance_timeout = Duration::from_millis(
                                req.rebalance_timeout_ms.max(req.session_timeout_ms).max(0) as u64,
                            );
                            m.last_heartbeat = Instant::now();
                            return JoinResponse {
                                error: codes::NONE,
                                generation_id: g.generation,
                                protocol_type: g.protocol_type.clone(),
                                protocol_name: g.protocol.clone(),
                                leader: leader_before,
                                member_id: new_id,
                                members: Vec::new(),
                            };
                        }
                        let m = g.members.get_mut(&new_id).expect("just replaced");
                        m.protocols = old_protocols;
                        m.protocol_type = old_type;
                    }
                    new_id
                } else {
                    if g.members.len() >= self.config.max_size {
                        return fail(codes::GROUP_MAX_SIZE_REACHED, "");
                    }
                    self.new_member_id(&req.client_id)
                }
            } else {
                let code = g.check_member(&req.member_id, instance);
                if code != codes::NONE {
                    return fail(code, &req.member_id);
                }
                req.member_id.clone()
            };
            if g.members.is_empty() {
                g.protocol_type = Some(req.protocol_type.clone());
            }
            let now = Instant::now();
            let is_new = !g.members.contains_key(&member_id);
            // A known member rejoining with the same protocols does not start a rebalance
            // (Kafka's rule): during CompletingRebalance, or in Stable unless it is the
            // leader (a leader's rejoin asks for a new assignment). It gets the current
            // generation back.
            if !is_new {
                tracing::debug!(group = %req.group_id, member = %member_id, state = g.state.name(),
                    leader = g.leader.as_deref() == Some(member_id.as_str()),
                    same_protocols = g.members.get(&member_id).is_some_and(|m| m.protocols == req.protocols),
                    "known member rejoins");
            }
            if !is_new && !replaced && matches!(g.state, State::CompletingRebalance | State::Stable)
            {
                let leader = g.leader.as_deref() == Some(member_id.as_str());
                let state = g.state;
                let m = g.members.get_mut(&member_id).expect("known member");
                let unchanged =
                    m.protocols == req.protocols && m.protocol_type == req.protocol_type;
                if unchanged && (state == State::CompletingRebalance || !leader) {
                    m.last_heartbeat = now;
                    return g.join_response(&member_id);
                }
            }
            let m = g
                .members
                .entry(member_id.clone())
                .or_insert_with(|| Member {
                    group_instance_id: req.group_instance_id.clone(),
                    client_id: req.client_id.clone(),
                    client_host: req.client_host.clone(),
                    session_timeout: Duration::ZERO,
                    rebalance_timeout: Duration::ZERO,
                    protocol_type: req.protocol_type.clone(),
                    protocols: Vec::new(),
                    assignment: Bytes::new(),
                    last_heartbeat: now,
                    join_waiter: None,
                    sync_waiter: None,
                });
            m.session_timeout = Duration::from_millis(req.session_timeout_ms.max(0) as u64);
            m.rebalance_timeout = Duration::from_millis(
                req.rebalance_timeout_ms.max(req.session_timeout_ms).max(0) as u64,
            );
            m.protocol_type = req.protocol_type.clone();
            m.protocols = req.protocols.clone();
            m.last_heartbeat = now;
            if let Some(old) = m.join_waiter.replace(slot.clone()) {
                old.set(JoinResponse {
                    error: codes::UNKNOWN_MEMBER_ID,
                    member_id: member_id.clone(),
                    generation_id: -1,
                    ..Default::default()
                });
            }
            if is_new {
                if let Some(instance) = &req.group_instance_id {
                    g.statics.insert(instance.clone(), member_id.clone());
                }
                g.order.push(member_id.clone());
                tracing::info!(group = %req.group_id, member = %member_id, "member joined");
            }
            g.prepare_rebalance(self.initial_delay());
            g.maybe_complete_join(&req.group_id);
        }
        slot.take().await
    }

    pub async fn sync(&self, req: SyncRequest) -> SyncResponse {
        let fail = |error: i16| SyncResponse {
            error,
            ..Default::default()
        };
        let Some(group) = self.group(&req.group_id) else {
            return fail(codes::UNKNOWN_MEMBER_ID);
        };
        let slot = Rc::new(Slot::default());
        {
            let mut g = group.borrow_mut();
            let code = g.check_member(&req.member_id, req.group_instance_id.as_deref());
            if code != codes::NONE {
                return fail(code);
            }
            if req.generation_id != g.generation {
                return fail(codes::ILLEGAL_GENERATION);
            }
            if req
                .protocol_type
                .as_ref()
                .is_some_and(|t| Some(t) != g.protocol_type.as_ref())
                || req
                    .protocol_name
                    .as_ref()
                    .is_some_and(|p| Some(p) != g.protocol.as_ref())
            {
                return fail(codes::INCONSISTENT_GROUP_PROTOCOL);
            }
            let (ptype, pname) = (g.protocol_type.clone(), g.protocol.clone());
            match g.state {
                State::Empty => return fail(codes::UNKNOWN_MEMBER_ID),
                State::PreparingRebalance => return fail(codes::REBALANCE_IN_PROGRESS),
                State::Stable => {
                    let m = g.members.get_mut(&req.member_id).expect("checked above");
                    m.last_heartbeat = Instant::now();
                    return SyncResponse {
                        error: codes::NONE,
                        protocol_type: ptype,
                        protocol_name: pname,
                        assignment: m.assignment.clone(),
                    };
                }
                State::CompletingRebalance => {}
            }
            {
                let m = g.members.get_mut(&req.member_id).expect("checked above");
                m.last_heartbeat = Instant::now();
                m.sync_waiter = Some(slot.clone());
            }
            if g.leader.as_deref() == Some(req.member_id.as_str()) {
                let assignments: HashMap<String, Bytes> = req.assignments.into_iter().collect();
                for (id, m) in g.members.iter_mut() {
                    m.assignment = assignments.get(id).cloned().unwrap_or_default();
                    if let Some(w) = m.sync_waiter.take() {
                        w.set(SyncResponse {
                            error: codes::NONE,
                            protocol_type: ptype.clone(),
                            protocol_name: pname.clone(),
                            assignment: m.assignment.clone(),
                        });
                    }
                }
                g.state = State::Stable;
                tracing::info!(group = %req.group_id, generation = g.generation, "rebalance complete: group stable");
            }
        }
        slot.take().await
    }

    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        instance: Option<&str>,
        generation_id: i32,
    ) -> i16 {
        let Some(group) = self.group(group_id) else {
            return codes::UNKNOWN_MEMBER_ID;
        };
        let mut g = group.borrow_mut();
        let code = g.check_member(member_id, instance);
        if code != codes::NONE {
            return code;
        }
        let (state, generation) = (g.state, g.generation);
        let Some(m) = g.members.get_mut(member_id) else {
            return codes::UNKNOWN_MEMBER_ID;
        };
        if generation_id != generation {
            return codes::ILLEGAL_GENERATION;
        }
        m.last_heartbeat = Instant::now();
        match state {
            State::PreparingRebalance => codes::REBALANCE_IN_PROGRESS,
            State::Empty => codes::UNKNOWN_MEMBER_ID,
            _ => codes::NONE,
        }
    }

    /// Removes members, each named by member id and/or group instance id (LeaveGroup v3+
    /// may name a static member by instance id alone); returns the group error and one
    /// error per member.
    pub fn leave(&self, group_id: &str, members: &[(String, Option<String>)]) -> (i16, Vec<i16>) {
        let Some(group) = self.group(group_id) else {
            return (
                codes::UNKNOWN_MEMBER_ID,
                vec![codes::UNKNOWN_MEMBER_ID; members.len()],
            );
        };
        let mut g = group.borrow_mut();
        let mut errs = Vec::with_capacity(members.len());
        let mut removed = false;
        for (id, instance) in members {
            let id = match instance.as_deref() {
                // Kafka's rule: an instance id names its current member; a different,
                // non-empty member id is an older incarnation and is fenced.
                Some(instance) => match g.statics.get(instance) {
                    Some(cur) if !id.is_empty() && cur != id => {
                        errs.push(codes::FENCED_INSTANCE_ID);
                        continue;
                    }
                    Some(cur) => cur.clone(),
                    None => {
                        errs.push(codes::UNKNOWN_MEMBER_ID);
                        continue;
                    }
                },
                None => id.clone(),
            };
            if g.remove_member(&id).is_some() {
                tracing::info!(group = group_id, member = %id, "member left");
                removed = true;
                errs.push(codes::NONE);
            } else {
                errs.push(codes::UNKNOWN_MEMBER_ID);
            }
        }
        if removed {
            self.after_removal(group_id, &mut g);
        }
        let top = if errs.len() == 1 {
            errs[0]
        } else {
            codes::NONE
        };
        (top, errs)
    }

    fn after_removal(&self, group_id: &str, g: &mut Group) {
        if g.members.is_empty() {
            if g.state != State::Empty {
                g.generation += 1;
            }
            g.state = State::Empty;
            g.protocol = None;
            g.leader = None;
        } else {
            g.prepare_rebalance(self.initial_delay());
            g.maybe_complete_join(group_id);
        }
    }

    /// Expires members whose session timed out and completes rebalances whose time came.
    /// Called periodically by the core (every 100 ms or so).
    pub fn tick(&self) {
        let now = Instant::now();
        let groups: Vec<(String, Rc<RefCell<Group>>)> = self
            .groups
            .borrow()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (id, group) in groups {
            let mut g = group.borrow_mut();
            let expired: Vec<String> = g
                .members
                .iter()
                .filter(|(_, m)| {
                    m.join_waiter.is_none()
                        && now.duration_since(m.last_heartbeat) > m.session_timeout
                })
                .map(|(mid, _)| mid.clone())
                .collect();
            if !expired.is_empty() {
                for mid in &expired {
                    tracing::info!(group = %id, member = %mid, "member session timed out; removed");
                    g.remove_member(mid);
                }
                self.after_removal(&id, &mut g);
            }
            g.maybe_complete_join(&id);
        }
    }

    pub async fn commit_offsets(
        &self,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        instance: Option<&str>,
        parts: Vec<CommitPart>,
    ) -> Vec<i16> {
        let n = parts.len();
        if !self.owns(group_id) {
            return vec![codes::NOT_COORDINATOR; n];
        }
        if group_id.is_empty() {
            return vec![codes::INVALID_GROUP_ID; n];
        }
        if let Some(group) = self.group(group_id) {
            let mut g = group.borrow_mut();
            if !g.members.is_empty()
                || generation_id >= 0
                || !member_id.is_empty()
                || instance.is_some()
            {
                let (state, generation) = (g.state, g.generation);
                let no_members = g.members.is_empty();
                let check = g.check_member(member_id, instance);
                // Kafka's rule: a member of the current generation may commit while the
                // group prepares a rebalance (that is how offsets of partitions being
                // revoked stick); only between the join and the sync phase is it refused.
                let code = match g.members.get_mut(member_id) {
                    None if generation_id < 0
                        && member_id.is_empty()
                        && instance.is_none()
                        && no_members =>
                    {
                        codes::NONE
                    }
                    _ if check != codes::NONE => check,
                    None => codes::UNKNOWN_MEMBER_ID,
                    Some(_) if generation_id != generation => codes::ILLEGAL_GENERATION,
                    Some(_) if state == State::CompletingRebalance => codes::REBALANCE_IN_PROGRESS,
                    Some(m) => {
                        m.last_heartbeat = Instant::now();
                        codes::NONE
                    }
                };
                if code != codes::NONE {
                    return vec![code; n];
                }
            }
        } else if generation_id >= 0 || !member_id.is_empty() {
            return vec![codes::ILLEGAL_GENERATION; n];
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let entries = parts
            .into_iter()
            .map(|p| {
                (
                    p.topic,
                    p.partition,
                    Committed {
                        offset: p.offset,
                        leader_epoch: p.leader_epoch,
                        metadata: p.metadata.unwrap_or_default(),
                        commit_ms: now,
                    },
                )
            })
            .collect();
        let store = match self.store_for_write(group_id).await {
            Ok(s) => s,
            Err(code) => return vec![code; n],
        };
        match store.commit(group_id, entries).await {
            Ok(()) => vec![codes::NONE; n],
            Err(e) => {
                tracing::warn!(group = group_id, error = %e, "offset commit failed");
                vec![codes::KAFKA_STORAGE_ERROR; n]
            }
        }
    }

    /// Committed offsets of `group_id`: for the given partitions (None = all committed).
    /// Missing ones come back as offset -1.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        wanted: Option<Vec<(String, Vec<i32>)>>,
    ) -> Result<Vec<(String, i32, Committed)>, i16> {
        if !self.owns(group_id) {
            return Err(codes::NOT_COORDINATOR);
        }
        let store = self.store(group_id);
        let get = |t: &str, p: i32| store.as_ref().and_then(|s| s.get(group_id, t, p));
        match wanted {
            None => Ok(store.as_ref().map(|s| s.all(group_id)).unwrap_or_default()),
            Some(topics) => Ok(topics
                .into_iter()
                .flat_map(|(t, ps)| ps.into_iter().map(move |p| (t.clone(), p)))
                .map(|(t, p)| {
                    let c = get(&t, p).unwrap_or(Committed {
                        offset: -1,
                        leader_epoch: -1,
                        metadata: String::new(),
                        commit_ms: -1,
                    });
                    (t, p, c)
                })
                .collect()),
        }
    }

    pub fn describe(&self, group_id: &str) -> GroupDescription {
        let mut d = GroupDescription {
            error: codes::NONE,
            state: "Dead".into(),
            protocol_type: String::new(),
            protocol: String::new(),
            members: Vec::new(),
        };
        if !self.owns(group_id) {
            d.error = codes::NOT_COORDINATOR;
            return d;
        }
        let Some(group) = self.group(group_id) else {
            if self
                .store(group_id)
                .is_some_and(|s| !s.all(group_id).is_empty())
            {
                d.state = "Empty".into();
            }
            return d;
        };
        let g = group.borrow();
        d.state = g.state.name().into();
        d.protocol_type = g.protocol_type.clone().unwrap_or_default();
        d.protocol = g.protocol.clone().unwrap_or_default();
        for id in &g.order {
            let Some(m) = g.members.get(id) else { continue };
            d.members.push(MemberDescription {
                member_id: id.clone(),
                group_instance_id: m.group_instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                metadata: m
                    .protocols
                    .iter()
                    .find(|(p, _)| Some(p) == g.protocol.as_ref())
                    .map(|(_, md)| md.clone())
                    .unwrap_or_default(),
                assignment: m.assignment.clone(),
            });
            let _ = &m.protocol_type;
        }
        d
    }

    /// Groups on this core: (group id, protocol type, state).
    pub fn list(&self) -> Vec<(String, String, String)> {
        let mut out: BTreeMap<String, (String, String)> = BTreeMap::new();
        for store in self.stores.borrow().values() {
            for g in store.groups() {
                out.insert(g, ("consumer".into(), "Empty".into()));
            }
        }
        for (id, g) in self.groups.borrow().iter() {
            let g = g.borrow();
            out.insert(
                id.clone(),
                (
                    g.protocol_type.clone().unwrap_or_else(|| "consumer".into()),
                    g.state.name().into(),
                ),
            );
        }
        out.into_iter().map(|(k, (t, s))| (k, t, s)).collect()
    }

    pub async fn delete_group(&self, group_id: &str) -> i16 {
        if !self.owns(group_id) {
            return codes::NOT_COORDINATOR;
        }
        let store = self.store(group_id);
        let in_memory = self.group(group_id);
        if let Some(g) = &in_memory {
            if !g.borrow().members.is_empty() {
                return codes::NON_EMPTY_GROUP;
            }
        }
        let had_offsets = store.as_ref().is_some_and(|s| !s.all(group_id).is_empty());
        if in_memory.is_none() && !had_offsets {
            return codes::GROUP_ID_NOT_FOUND;
        }
        let deleted = match &store {
            Some(s) => s.delete(Some(group_id), None).await.map(|_| ()),
            None => Ok(()),
        };
        if let Err(e) = deleted {
            tracing::warn!(group = group_id, error = %e, "deleting group offsets failed");
            return codes::KAFKA_STORAGE_ERROR;
        }
        self.groups.borrow_mut().remove(group_id);
        codes::NONE
    }

    /// Forgets the committed offsets of a deleted topic, in every group on this core.
    pub async fn topic_deleted(&self, topic: &str) {
        let stores: Vec<Rc<OffsetStore>> = self.stores.borrow().values().cloned().collect();
        for store in stores {
            if let Err(e) = store.delete(None, Some(topic)).await {
                tracing::warn!(topic, error = %e, "deleting offsets of a deleted topic failed");
            }
        }
    }

    /// Closes the offset logs (clean shutdown).
    pub async fn close(self) {
        for (_, store) in self.stores.into_inner() {
            if let Ok(store) = Rc::try_unwrap(store) {
                let _ = store.close().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<F, Fut>(f: F)
    where
        F: FnOnce(std::path::PathBuf) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + 'static,
    {
        // Under target/, on the real filesystem (direct I/O does not work on tmpfs).
        let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-tmp");
        std::fs::create_dir_all(&base).expect("test tmp dir");
        let dir = tempfile::tempdir_in(base).expect("tempdir");
        let path = dir.path().to_owned();
        glommio::LocalExecutorBuilder::default()
            .io_memory(1 << 20)
            .spawn(move || async move {
                weir_storage::io::prime_dma_probe(&path)
                    .await
                    .expect("prime");
                f(path).await
            })
            .expect("spawn")
            .join()
            .expect("join");
        drop(dir);
    }

    fn config() -> GroupConfig {
        GroupConfig {
            initial_rebalance_delay_ms: 50,
            min_session_timeout_ms: 10,
            ..GroupConfig::default()
        }
    }

    fn join_req(member: &str, session_ms: i32) -> JoinRequest {
        JoinRequest {
            group_id: "g".into(),
            member_id: member.into(),
            group_instance_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: session_ms,
            rebalance_timeout_ms: session_ms,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::from_static(b"md"))],
        }
    }

    /// Opens a coordinator and drives its `tick`, as the broker's core does.
    async fn open(dir: &Path) -> Rc<Coordinator> {
        let c = Rc::new(
            Coordinator::open(dir, 0, 1, BatchCache::new(1 << 20), config())
                .await
                .expect("open"),
        );
        let weak = Rc::downgrade(&c);
        glommio::spawn_local(async move {
            while let Some(c) = weak.upgrade() {
                c.tick();
                drop(c);
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        })
        .detach();
        c
    }

    /// Joins `n` new members concurrently and syncs them (the leader assigns "a-<member>").
    async fn form_group(c: &Rc<Coordinator>, n: usize, session_ms: i32) -> Vec<JoinResponse> {
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let c = c.clone();
                glommio::spawn_local(async move { c.join(join_req("", session_ms)).await })
            })
            .collect();
        let mut joins = Vec::new();
        for t in tasks {
            joins.push(t.await);
        }
        joins
    }

    async fn sync_all(c: &Rc<Coordinator>, joins: &[JoinResponse]) -> Vec<SyncResponse> {
        let tasks: Vec<_> = joins
            .iter()
            .map(|j| {
                let c = c.clone();
                let j = j.clone();
                glommio::spawn_local(async move {
                    let assignments = j
                        .members
                        .iter()
                        .map(|(m, _, _)| (m.clone(), Bytes::from(format!("a-{m}"))))
                        .collect();
                    c.sync(SyncRequest {
                        group_id: "g".into(),
                        generation_id: j.generation_id,
                        member_id: j.member_id.clone(),
                        group_instance_id: None,
                        protocol_type: Some("consumer".into()),
                        protocol_name: j.protocol_name.clone(),
                        assignments,
                    })
                    .await
                })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await);
        }
        out
    }

    #[test]
    fn members_join_sync_and_get_their_assignment() {
        run(|dir| async move {
            let c = open(&dir).await;
            let joins = form_group(&c, 3, 10_000).await;
            assert!(joins
                .iter()
                .all(|j| j.error == codes::NONE && j.generation_id == 1));
            let leaders: Vec<_> = joins.iter().filter(|j| !j.members.is_empty()).collect();
            assert_eq!(leaders.len(), 1, "exactly one leader gets the member list");
            assert_eq!(leaders[0].members.len(), 3);
            assert!(joins.iter().all(|j| j.leader == leaders[0].member_id));
            let syncs = sync_all(&c, &joins).await;
            for (j, s) in joins.iter().zip(&syncs) {
                assert_eq!(s.error, codes::NONE);
                assert_eq!(s.assignment, Bytes::from(format!("a-{}", j.member_id)));
            }
            assert_eq!(c.describe("g").state, "Stable");
            assert_eq!(c.heartbeat("g", &joins[0].member_id, None, 1), codes::NONE);
            assert_eq!(
                c.heartbeat("g", &joins[0].member_id, None, 0),
                codes::ILLEGAL_GENERATION
            );
            assert_eq!(
                c.heartbeat("g", "nobody", None, 1),
                codes::UNKNOWN_MEMBER_ID
            );
        });
    }

    #[test]
    fn a_new_member_triggers_a_rebalance_and_leaving_another() {
        run(|dir| async move {
            let c = open(&dir).await;
            let joins = form_group(&c, 2, 10_000).await;
            sync_all(&c, &joins).await;
            // A third member arrives: the others learn it from their heartbeat and rejoin.
            let c3 = c.clone();
            let third = glommio::spawn_local(async move { c3.join(join_req("", 10_000)).await });
            futures_lite::future::yield_now().await;
            assert_eq!(
                c.heartbeat("g", &joins[0].member_id, None, 1),
                codes::REBALANCE_IN_PROGRESS
            );
            let rejoin: Vec<_> = joins
                .iter()
                .map(|j| {
                    let c = c.clone();
                    let id = j.member_id.clone();
                    glommio::spawn_local(async move { c.join(join_req(&id, 10_000)).await })
                })
                .collect();
            let mut joins2 = vec![third.await];
            for t in rejoin {
                joins2.push(t.await);
            }
            assert!(
                joins2
                    .iter()
                    .all(|j| j.error == codes::NONE && j.generation_id == 2),
                "{joins2:?}"
            );
            sync_all(&c, &joins2).await;
            // One leaves: the rest rebalance to generation 3.
            let (err, _) = c.leave("g", &[(joins2[0].member_id.clone(), None)]);
            assert_eq!(err, codes::NONE);
            assert_eq!(c.describe("g").state, "PreparingRebalance");
            let rest: Vec<_> = joins2[1..]
                .iter()
                .map(|j| {
                    let c = c.clone();
                    let id = j.member_id.clone();
                    glommio::spawn_local(async move { c.join(join_req(&id, 10_000)).await })
                })
                .collect();
            for t in rest {
                let j = t.await;
                assert_eq!((j.error, j.generation_id), (codes::NONE, 3));
            }
        });
    }

    /// KIP-345 (issue 21): weir only recorded group.instance.id, so a restarted static
    /// member was a new member (rebalance), its old incarnation was not fenced and
    /// LeaveGroup by instance id did not find it.
    #[test]
    fn static_member_restart_fencing_and_leave_by_instance_id() {
        run(|dir| async move {
            let c = open(&dir).await;
            let stat = |member: &str| JoinRequest {
                group_instance_id: Some("i1".into()),
                ..join_req(member, 10_000)
            };
            let first = c.join(stat("")).await;
            assert_eq!(first.error, codes::NONE);
            sync_all(&c, std::slice::from_ref(&first)).await;
            // The restart: no member id, same instance id, same protocols.
            let again = c.join(stat("")).await;
            assert_eq!(again.error, codes::NONE);
            assert_ne!(again.member_id, first.member_id);
            assert_eq!(again.generation_id, first.generation_id, "no rebalance");
            assert_eq!(c.describe("g").state, "Stable");
            let sync = c
                .sync(SyncRequest {
                    group_id: "g".into(),
                    generation_id: again.generation_id,
                    member_id: again.member_id.clone(),
                    group_instance_id: Some("i1".into()),
                    protocol_type: None,
                    protocol_name: None,
                    assignments: Vec::new(),
                })
                .await;
            assert_eq!(sync.error, codes::NONE);
            assert_eq!(sync.assignment, format!("a-{}", first.member_id).as_bytes());
            let gen = again.generation_id;
            assert_eq!(
                c.heartbeat("g", &first.member_id, Some("i1"), gen),
                codes::FENCED_INSTANCE_ID
            );
            assert_eq!(
                c.heartbeat("g", &again.member_id, Some("i1"), gen),
                codes::NONE
            );
            let part = CommitPart {
                topic: "t".into(),
                partition: 0,
                offset: 1,
                leader_epoch: -1,
                metadata: None,
            };
            assert_eq!(
                c.commit_offsets("g", gen, &first.member_id, Some("i1"), vec![part])
                    .await,
                vec![codes::FENCED_INSTANCE_ID]
            );
            let (_, errs) = c.leave(
                "g",
                &[
                    (first.member_id.clone(), Some("i1".into())),
                    (String::new(), Some("nobody".into())),
                ],
            );
            assert_eq!(
                errs,
                vec![codes::FENCED_INSTANCE_ID, codes::UNKNOWN_MEMBER_ID]
            );
            let (_, errs) = c.leave("g", &[(String::new(), Some("i1".into()))]);
            assert_eq!(errs, vec![codes::NONE]);
            assert_eq!(c.describe("g").members.len(), 0);
        });
    }

    #[test]
    fn a_silent_member_is_removed_after_its_session_timeout() {
        run(|dir| async move {
            let c = open(&dir).await;
            let joins = form_group(&c, 2, 200).await;
            sync_all(&c, &joins).await;
            let start = Instant::now();
            // Member 0 keeps heartbeating; member 1 goes silent.
            loop {
                glommio::timer::sleep(Duration::from_millis(50)).await;
                let hb = c.heartbeat("g", &joins[0].member_id, None, 1);
                c.tick();
                if hb == codes::REBALANCE_IN_PROGRESS {
                    break;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(3),
                    "silent member never expired"
                );
            }
            assert!(start.elapsed() >= Duration::from_millis(200));
            let j = c.join(join_req(&joins[0].member_id, 200)).await;
            assert_eq!(
                (j.error, j.generation_id, j.members.len()),
                (codes::NONE, 2, 1)
            );
        });
    }

    #[test]
    fn offsets_are_durable_checked_and_deleted_with_the_group() {
        run(|dir| async move {
            let c = open(&dir).await;
            let part = |offset| CommitPart {
                topic: "t".into(),
                partition: 0,
                offset,
                leader_epoch: -1,
                metadata: Some("m".into()),
            };
            // A consumer that uses assign() commits without membership.
            assert_eq!(
                c.commit_offsets("g", -1, "", None, vec![part(5)]).await,
                vec![codes::NONE]
            );
            let joins = form_group(&c, 1, 10_000).await;
            sync_all(&c, &joins).await;
            assert_eq!(
                c.commit_offsets("g", 7, &joins[0].member_id, None, vec![part(6)])
                    .await,
                vec![codes::ILLEGAL_GENERATION]
            );
            assert_eq!(
                c.commit_offsets("g", 1, "stranger", None, vec![part(6)])
                    .await,
                vec![codes::UNKNOWN_MEMBER_ID]
            );
            assert_eq!(
                c.commit_offsets("g", 1, &joins[0].member_id, None, vec![part(9)])
                    .await,
                vec![codes::NONE]
            );
            assert_eq!(c.delete_group("g").await, codes::NON_EMPTY_GROUP);
            c.leave("g", &[(joins[0].member_id.clone(), None)]);
            drop(c);
            let c = open(&dir).await;
            let got = c
                .fetch_offsets("g", Some(vec![("t".into(), vec![0, 1])]))
                .expect("fetch");
            assert_eq!(got[0].2.offset, 9, "the last commit survives a restart");
            assert_eq!(got[0].2.metadata, "m");
            assert_eq!(got[1].2.offset, -1, "uncommitted partitions answer -1");
            assert_eq!(c.list().len(), 1);
            assert_eq!(c.delete_group("g").await, codes::NONE);
            assert_eq!(c.delete_group("g").await, codes::GROUP_ID_NOT_FOUND);
            assert!(c.fetch_offsets("g", None).expect("fetch").is_empty());
        });
    }

    #[test]
    fn many_commits_keep_the_offsets_log_small() {
        run(|dir| async move {
            let c = open(&dir).await;
            let md = "x".repeat(2000);
            for i in 0..3000 {
                let parts = vec![CommitPart {
                    topic: "t".into(),
                    partition: 0,
                    offset: i,
                    leader_epoch: -1,
                    metadata: Some(md.clone()),
                }];
                assert_eq!(
                    c.commit_offsets("g", -1, "", None, parts).await,
                    vec![codes::NONE]
                );
            }
            let store = c.store("g").expect("store");
            let (_, bytes) = store.log_size();
            assert!(
                bytes < 24 << 20,
                "offsets log holds {bytes} bytes for one live offset"
            );
            drop(store);
            drop(c);
            let c = open(&dir).await;
            assert_eq!(c.fetch_offsets("g", None).expect("fetch")[0].2.offset, 2999);
        });
    }
}
