//! Consumer-protocol groups (KIP-848, `group.protocol=consumer`): the broker assigns. Members
//! send ConsumerGroupHeartbeat with their subscription and the partitions they own; the
//! coordinator keeps
//!
//! - a **group epoch**, bumped when a member joins, leaves or changes its subscription, or a
//!   subscribed topic's partition count changes;
//! - a **target assignment** computed by the server-side assignor (`assign.rs`) for the group
//!   epoch, its **assignment epoch**;
//! - per member a **member epoch** and its current partitions, moved towards its target one
//!   heartbeat at a time (incremental reconciliation): partitions leaving the member are revoked
//!   first (the member keeps its epoch until it says it no longer owns them), and a partition
//!   is given to its new owner only once no other member owns it; then the member gets the
//!   assignment epoch.
//!
//! Members that miss their session timeout, or do not revoke within their rebalance timeout,
//! are fenced (removed; a later heartbeat is answered UNKNOWN_MEMBER_ID or
//! FENCED_MEMBER_EPOCH and the client joins again with epoch 0). A static member
//! (`group.instance.id`) leaving with epoch -2 keeps its place and assignment for its session
//! timeout, and a new member with the same instance id takes them over.
//!
//! The group's state is stored in its offsets bucket (`stored.rs`, record kind 5) whenever a
//! heartbeat or a timeout changes it, before the heartbeat is answered; a restarted broker or
//! a new coordinator after a failover resumes the group with its epochs and assignments.
//!
//! This file is the state machine, free of I/O: `heartbeat` and `expire` change a group and
//! say what to answer; `Coordinator` (`coordinator.rs`) runs it on the group's core.

pub mod assign;
mod checks;
mod classic;
pub use weir::protocol::consumer_protocol as embedded;
mod groups;
mod stored;
pub mod subscription;

pub use classic::{ClassicInfo, ClassicMember, PROTOCOL_TYPE};
pub use groups::{Change, ConsumerGroups, GroupView, Served};

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use assign::{count, intersect, is_subset, minus, union, Partitions};
use subscription::{Regexes, Subscription};

/// Kafka error codes of the consumer-group APIs.
pub mod codes {
    pub const NONE: i16 = 0;
    pub const INVALID_REQUEST: i16 = 42;
    pub const ILLEGAL_GENERATION: i16 = 22;
    pub const UNKNOWN_MEMBER_ID: i16 = 25;
    pub const GROUP_MAX_SIZE_REACHED: i16 = 81;
    pub const UNSUPPORTED_ASSIGNOR: i16 = 112;
    pub const FENCED_MEMBER_EPOCH: i16 = 110;
    pub const UNRELEASED_INSTANCE_ID: i16 = 111;
    pub const STALE_MEMBER_EPOCH: i16 = 113;
    pub const INVALID_REGULAR_EXPRESSION: i16 = 130;
}

/// Settings of consumer-protocol groups, with Kafka's names.
#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// `group.consumer.session.timeout.ms`.
    pub session_timeout: Duration,
    /// `group.consumer.heartbeat.interval.ms`.
    pub heartbeat_interval: Duration,
    /// `group.consumer.max.size`.
    pub max_size: usize,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            session_timeout: Duration::from_secs(45),
            heartbeat_interval: Duration::from_secs(5),
            max_size: 1_000,
        }
    }
}

/// A ConsumerGroupHeartbeat as the coordinator needs it (topic ids already resolved to names
/// by the caller; a partition of an unknown topic id is left out).
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    pub group_id: String,
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    pub owned: Option<Partitions>,
    pub client_id: String,
    pub client_host: String,
    /// With the authorizer on, the topics the member's principal may DESCRIBE: the only
    /// ones its regex may match. `None`: all.
    pub describable: Option<BTreeSet<String>>,
}

/// What to answer a heartbeat.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    pub error: i16,
    pub message: Option<String>,
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The member's partitions, when they changed since it was last told (or it asked with its
    /// full state).
    pub assignment: Option<Partitions>,
}

impl HeartbeatAnswer {
    /// The answer `code`, with Kafka's message, and no member epoch.
    pub fn error(code: i16, message: impl Into<String>) -> HeartbeatAnswer {
        HeartbeatAnswer {
            error: code,
            message: Some(message.into()),
            member_epoch: -1,
            ..Default::default()
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Holds its target's partitions at the assignment epoch.
    Stable,
    /// Must give up `revoking` first (its epoch stays until it does).
    UnrevokedPartitions,
    /// At the assignment epoch, waiting for partitions other members still own.
    UnreleasedPartitions,
}

/// One member of a consumer-protocol group.
#[derive(Debug, Clone)]
pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub epoch: i32,
    pub previous_epoch: i32,
    pub state: MemberState,
    /// What it asked for (names, regex).
    pub subscription: Subscription,
    /// The topics that resolves to, as of its last heartbeat.
    pub subscribed: BTreeSet<String>,
    pub assignor: Option<String>,
    pub rebalance_timeout: Duration,
    /// The partitions it owns (being revoked ones not included).
    pub assigned: Partitions,
    /// Partitions it must give up before it gets anything new.
    pub revoking: Partitions,
    /// What it was last told it owns (`None`: nothing yet).
    told: Option<Partitions>,
    session_deadline: Instant,
    revoke_deadline: Option<Instant>,
    /// A static member that left with epoch -2: kept for its instance id until its session
    /// times out.
    away: bool,
    /// A member speaking the classic protocol (JoinGroup/SyncGroup/Heartbeat) in this group
    /// during an online upgrade or downgrade (`classic.rs`); `None`: a consumer-protocol one.
    pub classic: Option<ClassicInfo>,
}

/// A consumer-protocol group.
#[derive(Debug, Clone, Default)]
pub struct ConsumerGroup {
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, Member>,
    /// Member → its target partitions at `assignment_epoch`.
    pub target: BTreeMap<String, Partitions>,
    /// Partition counts of the subscribed topics when the target was computed.
    counts: BTreeMap<String, i32>,
    /// The assignor the target was computed with.
    pub assignor: String,
    /// The members' regexes, resolved for the whole group (not stored: a member's stored
    /// `subscribed` holds until its next heartbeat resolves its regex again).
    regexes: Regexes,
}

/// The topics the broker has: name → partition count.
pub type Topics = BTreeMap<String, i32>;

impl ConsumerGroup {
    /// Kafka's group state names (ConsumerGroupDescribe, ListGroups).
    pub fn state_name(&self) -> &'static str {
        if self.members.values().all(|m| m.away) {
            "Empty"
        } else if self.assignment_epoch < self.group_epoch {
            "Assigning"
        } else if self
            .members
            .values()
            .any(|m| m.epoch != self.assignment_epoch || m.state != MemberState::Stable)
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    /// Serves one heartbeat at `now`, against the broker's topics `topics`.
    pub fn heartbeat(
        &mut self,
        hb: &Heartbeat,
        topics: &Topics,
        config: &ConsumerConfig,
        new_member_id: impl FnOnce() -> String,
        now: Instant,
    ) -> HeartbeatAnswer {
        if let Some(code) = self.invalid(hb) {
            return code;
        }
        // Compiled (and so validated) unless the group already resolves it.
        let regex = match hb
            .subscribed_topic_regex
            .as_deref()
            .filter(|r| !r.is_empty() && !self.regexes.knows(r))
        {
            Some(r) => match subscription::compile(r) {
                Ok(re) => Some(re),
                Err(why) => return HeartbeatAnswer::error(codes::INVALID_REGULAR_EXPRESSION, why),
            },
            None => None,
        };
        if self
            .members
            .get(&hb.member_id)
            .is_some_and(|m| m.classic.is_some())
        {
            // A classic member speaks JoinGroup/Heartbeat (`classic.rs`), never this.
            return HeartbeatAnswer::error(
                codes::UNKNOWN_MEMBER_ID,
                format!("member {} is a classic-protocol member", hb.member_id),
            );
        }
        if hb.member_epoch < 0 {
            return self.leave(hb, topics);
        }
        let joining = hb.member_epoch == 0;
        let member_id = if hb.member_id.is_empty() {
            new_member_id()
        } else {
            hb.member_id.clone()
        };
        if joining {
            if let Some(answer) = self.join(hb, &member_id, config, now) {
                return answer;
            }
        } else {
            let Some(m) = self.members.get(&member_id).filter(|m| !m.away) else {
                return HeartbeatAnswer::error(
                    codes::UNKNOWN_MEMBER_ID,
                    format!("member {member_id} is not in the group"),
                );
            };
            let lost_answer = hb.member_epoch == m.previous_epoch
                && hb.owned.as_ref().is_none_or(|o| is_subset(o, &m.assigned));
            if hb.member_epoch != m.epoch && !lost_answer {
                return HeartbeatAnswer::error(
                    codes::FENCED_MEMBER_EPOCH,
                    format!(
                        "member epoch {} is not the member's {}",
                        hb.member_epoch, m.epoch
                    ),
                );
            }
        }
        self.apply(
            &member_id,
            hb,
            regex,
            joining,
            topics,
            now + config.session_timeout,
            now,
        );
        // A full request (every field set: the client lost track) gets the assignment again.
        let full = joining
            || (hb.rebalance_timeout_ms != -1
                && hb.subscribed_topic_names.is_some()
                && hb.owned.is_some());
        let m = self.members.get_mut(&member_id).expect("a member");
        let assignment = if full || m.told.as_ref() != Some(&m.assigned) {
            m.told = Some(m.assigned.clone());
            Some(m.assigned.clone())
        } else {
            None
        };
        HeartbeatAnswer {
            error: codes::NONE,
            message: None,
            member_id,
            member_epoch: m.epoch,
            heartbeat_interval_ms: config.heartbeat_interval.as_millis() as i32,
            assignment,
        }
    }

    /// What a member's heartbeat (or a classic member's JoinGroup) says, applied to the
    /// member: its session renewed to `session_deadline`, its subscription and what it still
    /// owns; then the group's target is refreshed and the member moved one step towards it.
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        member_id: &str,
        hb: &Heartbeat,
        regex: Option<regex::Regex>,
        joining: bool,
        topics: &Topics,
        session_deadline: Instant,
        now: Instant,
    ) {
        let m = self.members.get_mut(member_id).expect("joined above");
        m.session_deadline = session_deadline;
        if let Some(client_id) = Some(&hb.client_id).filter(|c| !c.is_empty()) {
            m.client_id.clone_from(client_id);
        }
        if hb.rack_id.is_some() {
            m.rack_id.clone_from(&hb.rack_id);
        }
        if hb.rebalance_timeout_ms > 0 {
            m.rebalance_timeout = Duration::from_millis(hb.rebalance_timeout_ms as u64);
        }
        if let Some(a) = &hb.server_assignor {
            m.assignor = Some(a.clone()).filter(|a| !a.is_empty());
        }
        if let Some(names) = &hb.subscribed_topic_names {
            m.subscription.names = names.iter().cloned().collect();
        }
        let mut pattern_changed = false;
        if let Some(pattern) = &hb.subscribed_topic_regex {
            let pattern = Some(pattern.clone()).filter(|p| !p.is_empty());
            pattern_changed = pattern != m.subscription.regex;
            m.subscription.regex = pattern;
        }
        // The member says it no longer owns what it was revoking: that revocation is done.
        if let Some(owned) = &hb.owned {
            if m.state == MemberState::UnrevokedPartitions
                && intersect(owned, &m.revoking).is_empty()
            {
                m.revoking.clear();
                m.revoke_deadline = None;
            }
        }
        let changed = self.resolve_subscriptions(member_id, hb, regex, pattern_changed, topics);
        self.refresh_target(topics, joining || changed);
        // A classic member's JoinGroup says what it still owns: partitions it already gave up
        // (an eager member gives up everything before it joins) need no revocation round.
        let owned = hb
            .owned
            .as_ref()
            .filter(|_| self.members[member_id].classic.is_some());
        self.reconcile(member_id, owned, now);
    }

    /// A member joins (epoch 0): new, rejoining after it was fenced or lost its state (its
    /// old place is dropped), or a static member taking its instance's place.
    fn join(
        &mut self,
        hb: &Heartbeat,
        member_id: &str,
        config: &ConsumerConfig,
        now: Instant,
    ) -> Option<HeartbeatAnswer> {
        let mut inherited: Option<Member> = None;
        if let Some(instance) = &hb.instance_id {
            let holder = self
                .members
                .values()
                .find(|m| m.instance_id.as_ref() == Some(instance) && m.id != member_id)
                .map(|m| (m.id.clone(), m.away));
            match holder {
                Some((_, false)) => {
                    return Some(HeartbeatAnswer::error(
                        codes::UNRELEASED_INSTANCE_ID,
                        format!("instance {instance} is used by another member"),
                    ))
                }
                Some((old, true)) => inherited = self.members.remove(&old),
                None => {}
            }
        }
        if let Some(old) = self.members.remove(member_id) {
            self.target.remove(&old.id);
        }
        let live = self.members.values().filter(|m| !m.away).count();
        if inherited.is_none() && live >= config.max_size {
            return Some(HeartbeatAnswer::error(
                codes::GROUP_MAX_SIZE_REACHED,
                format!(
                    "the group has reached its maximum size of {}",
                    config.max_size
                ),
            ));
        }
        let mut m = Member {
            id: member_id.to_string(),
            instance_id: hb.instance_id.clone(),
            rack_id: hb.rack_id.clone(),
            client_id: hb.client_id.clone(),
            client_host: hb.client_host.clone(),
            epoch: 0,
            previous_epoch: -1,
            state: MemberState::Stable,
            subscription: Subscription::default(),
            subscribed: BTreeSet::new(),
            assignor: None,
            rebalance_timeout: Duration::from_millis(hb.rebalance_timeout_ms.max(0) as u64),
            assigned: Partitions::new(),
            revoking: Partitions::new(),
            told: None,
            session_deadline: now + config.session_timeout,
            revoke_deadline: None,
            away: false,
            classic: None,
        };
        if let Some(old) = inherited {
            // The static member's place: its epoch and partitions, its target under the new id.
            m.epoch = old.epoch;
            m.previous_epoch = old.previous_epoch;
            m.assigned = old.assigned;
            m.revoking = old.revoking;
            m.state = old.state;
            m.revoke_deadline = old.revoke_deadline;
            m.subscription = old.subscription;
            m.subscribed = old.subscribed;
            if let Some(t) = self.target.remove(&old.id) {
                self.target.insert(member_id.to_string(), t);
            }
        }
        self.members.insert(member_id.to_string(), m);
        None
    }

    fn leave(&mut self, hb: &Heartbeat, topics: &Topics) -> HeartbeatAnswer {
        let Some(m) = self.members.get_mut(&hb.member_id) else {
            return HeartbeatAnswer::error(
                codes::UNKNOWN_MEMBER_ID,
                format!("member {} is not in the group", hb.member_id),
            );
        };
        if hb.member_epoch == -2 && m.instance_id.is_some() {
            // A static member leaving for a while: its partitions wait for it (or for a new
            // member with its instance id) until its session times out.
            m.away = true;
        } else {
            self.members.remove(&hb.member_id);
            self.target.remove(&hb.member_id);
            self.regexes
                .retain_used(self.members.values().map(|m| &m.subscription));
            // The others learn of the new target on their own heartbeats: a member's epoch
            // moves only in its own heartbeat (the client sends the epoch it was last told).
            self.refresh_target(topics, true);
        }
        HeartbeatAnswer {
            member_id: hb.member_id.clone(),
            member_epoch: hb.member_epoch,
            ..Default::default()
        }
    }

    /// Fences members past their session timeout, or past their rebalance timeout with
    /// partitions still to revoke; the ids of those fenced.
    pub fn expire(&mut self, now: Instant) -> Vec<String> {
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                now >= m.session_deadline
                    || m.revoke_deadline.is_some_and(|d| now >= d)
                    || m.classic
                        .as_ref()
                        .and_then(|c| c.deadline)
                        .is_some_and(|d| now >= d)
            })
            .map(|m| m.id.clone())
            .collect();
        if gone.is_empty() {
            return gone;
        }
        for id in &gone {
            self.members.remove(id);
            self.target.remove(id);
        }
        self.regexes
            .retain_used(self.members.values().map(|m| &m.subscription));
        let topics = self.counts.clone();
        self.refresh_target(&topics, true);
        gone
    }

    /// Bumps the group epoch when `changed` (a member joined, left or changed its
    /// subscription) or a subscribed topic's partition count changed — once for both — and
    /// recomputes the target when the group epoch moved past it.
    fn refresh_target(&mut self, topics: &Topics, changed: bool) {
        let subscribed: BTreeSet<&String> = self
            .members
            .values()
            .flat_map(|m| m.subscribed.iter())
            .collect();
        let counts: BTreeMap<String, i32> = subscribed
            .iter()
            .filter_map(|t| topics.get(*t).map(|n| ((*t).clone(), *n)))
            .collect();
        if changed || counts != self.counts {
            self.counts = counts;
            self.group_epoch += 1;
        }
        if self.assignment_epoch >= self.group_epoch {
            return;
        }
        // The assignor most members asked for, the default if none did.
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some(a) = m.assignor.as_deref() {
                *votes.entry(a).or_default() += 1;
            }
        }
        let assignor = votes
            .iter()
            .max_by_key(|(a, n)| (**n, std::cmp::Reverse(**a)))
            .map_or(assign::ASSIGNORS[0], |(a, _)| *a)
            .to_string();
        let subscriptions: BTreeMap<String, BTreeSet<String>> = self
            .members
            .values()
            .map(|m| {
                let s = m
                    .subscribed
                    .iter()
                    .filter(|t| self.counts.contains_key(*t))
                    .cloned()
                    .collect();
                (m.id.clone(), s)
            })
            .collect();
        self.target = assign::assign(&assignor, &subscriptions, &self.counts, &self.target);
        self.assignor = assignor;
        self.assignment_epoch = self.group_epoch;
    }

    /// Moves member `id` one step towards its target: revoke first; then, at the assignment
    /// epoch, take what no other member owns any more.
    fn reconcile(&mut self, id: &str, owned: Option<&Partitions>, now: Instant) {
        let Some(m) = self.members.get(id) else {
            return;
        };
        if m.state == MemberState::UnrevokedPartitions && !m.revoking.is_empty() {
            return;
        }
        if m.epoch == self.assignment_epoch && m.state == MemberState::Stable {
            return;
        }
        let target = self.target.get(id).cloned().unwrap_or_default();
        let owned_elsewhere: Partitions = self
            .members
            .values()
            .filter(|o| o.id != id)
            .fold(Partitions::new(), |acc, o| {
                union(&union(&acc, &o.assigned), &o.revoking)
            });
        let assignment_epoch = self.assignment_epoch;
        let m = self.members.get_mut(id).expect("checked above");
        let keep = intersect(&m.assigned, &target);
        let revoke = minus(&m.assigned, &target);
        if !revoke.is_empty() && owned.is_none_or(|o| !intersect(o, &revoke).is_empty()) {
            m.assigned = keep;
            m.revoking = revoke;
            m.state = MemberState::UnrevokedPartitions;
            m.revoke_deadline = Some(now + m.rebalance_timeout);
            return;
        }
        let wanted = minus(&target, &m.assigned);
        let free = minus(&wanted, &owned_elsewhere);
        m.assigned = union(&keep, &free);
        if m.epoch != assignment_epoch {
            m.previous_epoch = m.epoch;
            m.epoch = assignment_epoch;
        }
        m.state = if count(&free) < count(&wanted) {
            MemberState::UnreleasedPartitions
        } else {
            MemberState::Stable
        };
    }
}

#[cfg(test)]
mod classic_tests;
#[cfg(test)]
mod tests;
