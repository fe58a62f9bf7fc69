//! The consumer-protocol groups of one core: the state machines of `mod.rs` by group id, their
//! session and revocation timeouts ticked with the classic groups', and what
//! ConsumerGroupDescribe, ListGroups and OffsetCommit need of them. Held by the core's
//! `Coordinator`; the group's classic/consumer protocol conflict is checked in `service.rs`.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::time::Instant;

use super::{ConsumerConfig, ConsumerGroup, Heartbeat, HeartbeatAnswer, Topics};

/// A consumer-protocol group as ConsumerGroupDescribe shows it.
pub type GroupView = ConsumerGroup;

/// The consumer-protocol groups of one core.
#[derive(Default)]
pub struct ConsumerGroups {
    pub config: ConsumerConfig,
    groups: RefCell<BTreeMap<String, ConsumerGroup>>,
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
    /// committed offsets stay).
    pub fn heartbeat(&self, hb: &Heartbeat, topics: &Topics) -> HeartbeatAnswer {
        let mut groups = self.groups.borrow_mut();
        let g = groups.entry(hb.group_id.clone()).or_default();
        let before = g.members.len();
        let answer = g.heartbeat(
            hb,
            topics,
            &self.config,
            || self.new_member_id(),
            Instant::now(),
        );
        if g.members.len() != before {
            tracing::info!(group = %hb.group_id, member = %answer.member_id,
                members = g.members.len(), group_epoch = g.group_epoch,
                "consumer group membership changed");
        }
        if g.members.is_empty() {
            groups.remove(&hb.group_id);
        }
        answer
    }

    /// Fences the members past their session or revocation timeouts.
    pub fn tick(&self) {
        let now = Instant::now();
        let mut groups = self.groups.borrow_mut();
        for (id, g) in groups.iter_mut() {
            for m in g.expire(now) {
                tracing::info!(group = %id, member = %m, group_epoch = g.group_epoch,
                    "consumer group member timed out; fenced");
            }
        }
        groups.retain(|_, g| !g.members.is_empty());
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
