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
//!
//! A generation that becomes Stable is stored in the group's offsets bucket before SyncGroup
//! is answered, and removed when the group becomes Empty (`persist.rs`): a coordinator that
//! loads the bucket (a restart, a failover in a cluster) resumes the group without a
//! rebalance.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use weir_storage::BatchCache;

use super::routing::OffsetRouter;
pub use super::state::*;
use crate::broker::sync::Slot;

/// The group coordinator of one core.
pub struct Coordinator {
    pub(super) config: GroupConfig,
    pub(super) groups: RefCell<HashMap<String, Rc<RefCell<Group>>>>,
    /// Where each group's committed offsets live (this core's offset buckets).
    pub(super) offsets: OffsetRouter,
    next_member: std::cell::Cell<u64>,
    /// Orders the writes of group states (`persist.rs`).
    pub(super) persist_lock: Rc<glommio::sync::Semaphore>,
    /// The consumer-protocol groups (KIP-848) of this core's buckets.
    pub(super) consumer: super::consumer::ConsumerGroups,
}

impl Coordinator {
    /// Opens the offset stores with data of the buckets `core` owns (bucket % cores == core).
    pub async fn open(
        data_dir: &Path,
        core: usize,
        cores: usize,
        cache: Rc<BatchCache>,
        config: GroupConfig,
        consumer_config: super::consumer::ConsumerConfig,
    ) -> Result<Coordinator, weir_storage::Error> {
        let c = Coordinator {
            config,
            groups: RefCell::new(HashMap::new()),
            offsets: OffsetRouter::open(data_dir, core, cores, cache).await?,
            next_member: std::cell::Cell::new(0),
            persist_lock: Rc::new(glommio::sync::Semaphore::new(1)),
            consumer: super::consumer::ConsumerGroups::new(consumer_config),
        };
        // A standalone broker resumes its groups as they were stored (in a cluster
        // `set_replica` drops these: groups follow the replicated partitions' leadership).
        c.restore_groups(|_| true);
        Ok(c)
    }

    /// The core that owns `group` on a standalone broker (in a cluster: the core of this
    /// broker's replica of the group's `__consumer_offsets` partition, `Shard::group_core`).
    pub fn core_of(group: &str, cores: usize) -> usize {
        OffsetRouter::core_of(group, cores)
    }

    /// On a standalone broker, the offset store of `bucket` if it is open (one of this
    /// core's buckets with something committed to it).
    pub fn bucket_store(&self, bucket: usize) -> Option<Rc<super::offsets::OffsetStore>> {
        self.offsets.bucket_store(bucket)
    }

    pub(super) fn group(&self, id: &str) -> Option<Rc<RefCell<Group>>> {
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

    pub(super) fn initial_delay(&self) -> Duration {
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
        if !self.offsets.owns(&req.group_id) {
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
        // Set when a static member took its old place in a Stable group: the answer, once the
        // group's state (with the new member id) is stored.
        let stored_answer: Option<(JoinResponse, super::offsets::StoredGroup)> = 'locked: {
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
                            let answer = JoinResponse {
                                error: codes::NONE,
                                generation_id: g.generation,
                                protocol_type: g.protocol_type.clone(),
                                protocol_name: g.protocol.clone(),
                                leader: leader_before,
                                member_id: new_id,
                                members: Vec::new(),
                            };
                            break 'locked Some((answer, g.snapshot()));
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
            None
        };
        if let Some((answer, state)) = stored_answer {
            // The stored state must name the new member id: a coordinator restoring the old
            // one would fence the member (FENCED_INSTANCE_ID) after a failover.
            if let Err(code) = self.persist(&req.group_id, Some(state)).await {
                return fail(code, &answer.member_id);
            }
            self.stored(&req.group_id, &group);
            return answer;
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
        let (ptype, pname, stored) = {
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
            if g.leader.as_deref() != Some(req.member_id.as_str()) {
                (ptype, pname, None)
            } else {
                let assignments: HashMap<String, Bytes> = req.assignments.into_iter().collect();
                for (id, m) in g.members.iter_mut() {
                    m.assignment = assignments.get(id).cloned().unwrap_or_default();
                }
                (ptype, pname, Some((g.generation, g.snapshot())))
            }
        };
        // Kafka's order: the generation is stored before any member hears its assignment, so
        // a coordinator that takes over after a member acted on it knows that generation. The
        // members wait one durable write (an fdatasync, or a Raft commit in a cluster).
        if let Some((generation, state)) = stored {
            let written = self.persist(&req.group_id, Some(state)).await;
            self.complete_sync(&req.group_id, &group, generation, written, ptype, pname);
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
    /// error per member. When the last member leaves, the group's stored state is removed
    /// before the answer.
    pub async fn leave(
        &self,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> (i16, Vec<i16>) {
        let Some(group) = self.group(group_id) else {
            return (
                codes::UNKNOWN_MEMBER_ID,
                vec![codes::UNKNOWN_MEMBER_ID; members.len()],
            );
        };
        let errs = {
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
            errs
        };
        self.forget_if_empty(group_id, &group).await;
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
        self.drop_lost_groups();
        self.tick_consumer_groups();
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
            let empty = g.state == State::Empty && g.persisted;
            drop(g);
            if empty {
                self.forget_if_empty_later(&id, &group);
            }
        }
    }

    /// Closes the offset logs (clean shutdown).
    pub async fn close(self) {
        for store in self.offsets.into_stores() {
            if let Ok(store) = Rc::try_unwrap(store) {
                let _ = store.close().await;
            }
        }
    }
}
