//! The consumer-protocol groups of one core: the state machines of `mod.rs` by group id, their
//! session and revocation timeouts ticked with the classic groups', and what
//! ConsumerGroupDescribe, ListGroups and OffsetCommit need of them. Held by the core's
//! `Coordinator`; the group's classic/consumer protocol conflict is checked in `service.rs`.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::time::Instant;

use bytes::Bytes;

use super::{stored, ConsumerConfig, ConsumerGroup, Heartbeat, HeartbeatAnswer, Topics};
use crate::broker::group::state::{JoinRequest, JoinResponse};

/// A group's state to write to its bucket: the new state, or `None` (a tombstone) when the
/// group emptied.
pub type Change = Option<Bytes>;

/// A request served by a consumer-protocol group: the answer, what to store of the group if
/// that changed (written before the answer), and the group if it just went back to the classic
/// protocol.
pub struct Served<T> {
    pub answer: T,
    pub change: Option<Change>,
    pub downgraded: Option<ConsumerGroup>,
}

/// Groups (by id) left with classic members only, going back to the classic protocol.
pub type Downgraded = Vec<(String, ConsumerGroup)>;

/// A consumer-protocol group as ConsumerGroupDescribe shows it.
pub type GroupView = ConsumerGroup;

/// The consumer-protocol groups of one core.
#[derive(Default)]
pub struct ConsumerGroups {
    pub config: ConsumerConfig,
    groups: RefCell<BTreeMap<String, ConsumerGroup>>,
    /// What was last written (or is being written) of each group: a heartbeat that changes
    /// nothing stored writes nothing.
    stored: RefCell<BTreeMap<String, Bytes>>,
    next_member: Cell<u64>,
}

impl ConsumerGroups {
    pub fn new(config: ConsumerConfig) -> ConsumerGroups {
        ConsumerGroups {
            config,
            ..Default::default()
        }
    }

    /// Serves a ConsumerGroupHeartbeat; a group left without members is dropped (its
    /// committed offsets stay). Also what to store of the group, if that changed: the caller
    /// writes it (in the order of the heartbeats) before it answers.
    pub fn heartbeat(&self, hb: &Heartbeat, topics: &Topics) -> Served<HeartbeatAnswer> {
        self.groups
            .borrow_mut()
            .entry(hb.group_id.clone())
            .or_default();
        self.run(&hb.group_id, |g, now| {
            g.heartbeat(hb, topics, &self.config, || self.new_member_id(), now)
        })
        .expect("created above")
    }

    /// Runs `op` on consumer-protocol group `group` (`None` if there is none): a heartbeat, or
    /// a classic member's request (`classic.rs`). A group left without members is dropped;
    /// one left with classic members only goes back to the classic protocol (Kafka's online
    /// downgrade), handed to the caller.
    pub fn run<T>(
        &self,
        group: &str,
        op: impl FnOnce(&mut ConsumerGroup, Instant) -> T,
    ) -> Option<Served<T>> {
        let downgraded = {
            let mut groups = self.groups.borrow_mut();
            let g = groups.get_mut(group)?;
            let before = g.members.len();
            let answer = op(g, Instant::now());
            if g.members.len() != before {
                tracing::info!(
                    group,
                    members = g.members.len(),
                    group_epoch = g.group_epoch,
                    "consumer group membership changed"
                );
            }
            let downgraded = self.settle(&mut groups, group);
            (answer, downgraded)
        };
        Some(Served {
            answer: downgraded.0,
            change: self.change_of(group),
            downgraded: downgraded.1,
        })
    }

    /// Runs `op` on consumer-protocol group `group` (`None` if there is none) where it changes
    /// neither membership nor anything stored — a classic member's Heartbeat or SyncGroup moves
    /// only its session and deadlines — so nothing is encoded, written or waited for.
    pub fn touch<T>(
        &self,
        group: &str,
        op: impl FnOnce(&mut ConsumerGroup, Instant) -> T,
    ) -> Option<T> {
        let mut groups = self.groups.borrow_mut();
        Some(op(groups.get_mut(group)?, Instant::now()))
    }

    /// Drops `id` if it has no members; takes it out if it has classic members only.
    fn settle(
        &self,
        groups: &mut BTreeMap<String, ConsumerGroup>,
        id: &str,
    ) -> Option<ConsumerGroup> {
        let g = groups.get(id)?;
        if g.members.is_empty() {
            groups.remove(id);
            return None;
        }
        if !g.only_classic() {
            return None;
        }
        tracing::info!(
            group = id,
            members = g.members.len(),
            group_epoch = g.group_epoch,
            "the last consumer-protocol member left: the group goes back to the classic protocol"
        );
        groups.remove(id)
    }

    /// A classic member's JoinGroup to consumer-protocol group `group`; `None` if there is none.
    pub fn classic_join(&self, req: &JoinRequest, topics: &Topics) -> Option<Served<JoinResponse>> {
        self.run(&req.group_id, |g, now| {
            g.classic_join(req, topics, &self.config, || self.new_member_id(), now)
        })
    }

    /// Fences the members past their session or revocation timeouts; the groups whose stored
    /// state that changed, and how; the groups left with classic members only.
    pub fn tick(&self) -> (Vec<(String, Change)>, Downgraded) {
        let now = Instant::now();
        let mut changed = Vec::new();
        let mut downgraded = Vec::new();
        {
            let mut groups = self.groups.borrow_mut();
            for (id, g) in groups.iter_mut() {
                let gone = g.expire(now);
                for m in &gone {
                    tracing::info!(group = %id, member = %m, group_epoch = g.group_epoch,
                        "consumer group member timed out; fenced");
                }
                if !gone.is_empty() {
                    changed.push(id.clone());
                }
            }
            for id in &changed {
                if let Some(g) = self.settle(&mut groups, id) {
                    downgraded.push((id.clone(), g));
                }
            }
        }
        let changes = changed
            .into_iter()
            .filter_map(|id| self.change_of(&id).map(|c| (id, c)))
            .collect();
        (changes, downgraded)
    }

    /// Adds a group converted from a classic one (an online upgrade); nothing of it is
    /// stored yet, so the next request's change writes it whole.
    pub fn adopt(&self, group: &str, g: ConsumerGroup) {
        self.stored.borrow_mut().remove(group);
        self.groups.borrow_mut().insert(group.to_string(), g);
    }

    /// What to write of `group` now, if it differs from what was written; noted as written.
    fn change_of(&self, group: &str) -> Option<Change> {
        let now = self.groups.borrow().get(group).map(stored::encode);
        let mut written = self.stored.borrow_mut();
        match now {
            Some(bytes) if written.get(group) != Some(&bytes) => {
                written.insert(group.to_string(), bytes.clone());
                Some(Some(bytes))
            }
            None if written.remove(group).is_some() => Some(None),
            _ => None,
        }
    }

    /// Resumes a group from its stored state (a bucket loaded at start or on a failover).
    pub fn restore(&self, group: &str, state: &Bytes) {
        match stored::decode(state, &self.config, Instant::now()) {
            Some(g) => {
                tracing::info!(
                    group,
                    members = g.members.len(),
                    group_epoch = g.group_epoch,
                    "consumer group restored from its stored state"
                );
                self.groups.borrow_mut().insert(group.to_string(), g);
                self.stored
                    .borrow_mut()
                    .insert(group.to_string(), state.clone());
            }
            None => tracing::warn!(
                group,
                "a stored consumer group state does not decode; the members will join again"
            ),
        }
    }

    /// Drops `group` after its state could not be written: its members join again.
    pub fn discard(&self, group: &str) {
        self.groups.borrow_mut().remove(group);
        self.stored.borrow_mut().remove(group);
    }

    /// Whether `group` is a consumer-protocol group with members.
    pub fn is_live(&self, group: &str) -> bool {
        self.groups.borrow().contains_key(group)
    }

    pub fn describe(&self, group: &str) -> Option<GroupView> {
        self.groups.borrow().get(group).cloned()
    }

    /// (group id, Kafka state name) of every group.
    pub fn list(&self) -> Vec<(String, &'static str)> {
        self.groups
            .borrow()
            .iter()
            .map(|(id, g)| (id.clone(), g.state_name()))
            .collect()
    }

    /// OffsetFetch v9's check of a consumer-protocol group's member; `None` if `group` is not
    /// one (a classic group ignores them, as Kafka's does).
    pub fn check_fetch(&self, group: &str, member: &str, epoch: i32) -> Option<i16> {
        let groups = self.groups.borrow();
        let g = groups.get(group)?;
        Some(g.check_fetch(member, epoch))
    }

    /// OffsetCommit to a consumer-protocol group: `None` if `group` is not one (the classic
    /// checks apply), else the code for every partition (Kafka's UNKNOWN_MEMBER_ID,
    /// STALE_MEMBER_EPOCH).
    pub fn check_commit(&self, group: &str, member: &str, epoch: i32) -> Option<i16> {
        let groups = self.groups.borrow();
        let g = groups.get(group)?;
        Some(g.check_commit(member, epoch))
    }

    /// Drops the groups `which` picks (their bucket is no longer coordinated here, or was
    /// reloaded): their members' next heartbeat is UNKNOWN_MEMBER_ID and they join again.
    pub fn forget(&self, which: &impl Fn(&str) -> bool) {
        self.stored.borrow_mut().retain(|id, _| !which(id));
        self.groups.borrow_mut().retain(|id, g| {
            let drop = which(id);
            if drop {
                tracing::info!(group = %id, members = g.members.len(),
                    "no longer coordinating this consumer group here");
            }
            !drop
        });
    }

    fn new_member_id(&self) -> String {
        let n = self.next_member.get();
        self.next_member.set(n + 1);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        format!("{nanos:016x}-{n:08x}")
    }
}
