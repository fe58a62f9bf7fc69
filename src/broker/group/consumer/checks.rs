//! What a consumer-protocol group refuses before it serves a request: a heartbeat Kafka calls
//! invalid whatever the group, and the member checks of OffsetFetch and OffsetCommit.

use super::assign::count;
use super::{assign, codes, ConsumerGroup, Heartbeat, HeartbeatAnswer};

impl ConsumerGroup {
    /// What any group answers `hb` before looking at its members (an invalid request, a
    /// regex that does not compile): checked before a classic group is converted for it.
    pub fn refuses(hb: &Heartbeat) -> Option<HeartbeatAnswer> {
        if let Some(answer) = ConsumerGroup::default().invalid(hb) {
            return Some(answer);
        }
        let regex = hb
            .subscribed_topic_regex
            .as_deref()
            .filter(|r| !r.is_empty())?;
        super::subscription::compile(regex)
            .err()
            .map(|why| HeartbeatAnswer::error(codes::INVALID_REGULAR_EXPRESSION, why))
    }

    /// A request Kafka refuses before looking at the group.
    pub(super) fn invalid(&self, hb: &Heartbeat) -> Option<HeartbeatAnswer> {
        let bad = |why: &str| Some(HeartbeatAnswer::error(codes::INVALID_REQUEST, why));
        if hb.member_epoch == 0 {
            if hb.rebalance_timeout_ms < 0 {
                return bad("RebalanceTimeoutMs must be provided in the first request");
            }
            if hb.subscribed_topic_names.is_none() && hb.subscribed_topic_regex.is_none() {
                return bad(
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in the first request",
                );
            }
            if hb.owned.as_ref().is_some_and(|o| count(o) > 0) {
                return bad("TopicPartitions must be empty when (re-)joining");
            }
        } else if hb.member_epoch < -2 {
            return bad("MemberEpoch must be -2, -1, 0 or positive");
        } else if hb.member_id.is_empty() {
            return bad("MemberId can't be empty");
        }
        if let Some(a) = hb.server_assignor.as_deref().filter(|a| !a.is_empty()) {
            if !assign::ASSIGNORS.contains(&a) {
                return Some(HeartbeatAnswer::error(
                    codes::UNSUPPORTED_ASSIGNOR,
                    format!("assignor {a} is not one of {:?}", assign::ASSIGNORS),
                ));
            }
        }
        None
    }

    /// Whether `member` at `epoch` may fetch committed offsets (OffsetFetch v9): Kafka asks for
    /// the member's current epoch exactly.
    pub fn check_fetch(&self, member: &str, epoch: i32) -> i16 {
        match self.members.get(member).filter(|m| !m.away) {
            None => codes::UNKNOWN_MEMBER_ID,
            Some(m) if epoch != m.epoch => codes::STALE_MEMBER_EPOCH,
            Some(_) => codes::NONE,
        }
    }

    /// Whether `member` at `epoch` may commit offsets (OffsetCommit v9+): Kafka's
    /// UNKNOWN_MEMBER_ID / STALE_MEMBER_EPOCH checks.
    pub fn check_commit(&self, member: &str, epoch: i32) -> i16 {
        match self.members.get(member).filter(|m| !m.away) {
            None => codes::UNKNOWN_MEMBER_ID,
            // A classic member commits with its generation: its member epoch exactly.
            Some(m) if m.classic.is_some() && epoch != m.epoch => codes::ILLEGAL_GENERATION,
            Some(m) if m.classic.is_some() => codes::NONE,
            Some(m) if epoch > m.epoch => codes::STALE_MEMBER_EPOCH,
            // An older epoch may still commit the partitions it owned then (Kafka allows
            // the previous epoch while the member reconciles).
            Some(m) if epoch < m.epoch && epoch != m.previous_epoch => codes::STALE_MEMBER_EPOCH,
            Some(_) => codes::NONE,
        }
    }
}
