//! Committing, fetching and deleting offsets: checked against the group's members and
//! generation (or, for a delete, its state and subscriptions) on the group's core, then
//! written to (or read from) its bucket's offset store.

use std::collections::HashSet;
use std::time::Instant;

use super::coordinator::*;
use super::offsets::Committed;

impl Coordinator {
    pub async fn commit_offsets(
        &self,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        instance: Option<&str>,
        parts: Vec<CommitPart>,
    ) -> Vec<i16> {
        self.commit_as(None, group_id, generation_id, member_id, instance, parts)
            .await
    }

    /// TxnOffsetCommit: offsets `producer_id`'s transaction commits for `group_id`, checked
    /// like a commit (member and generation, when given: v3+), kept pending until the
    /// transaction ends ([`Coordinator::txn_end`]).
    pub async fn txn_commit_offsets(
        &self,
        producer_id: i64,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        instance: Option<&str>,
        parts: Vec<CommitPart>,
    ) -> Vec<i16> {
        self.commit_as(
            Some(producer_id),
            group_id,
            generation_id,
            member_id,
            instance,
            parts,
        )
        .await
    }

    /// A commit, or a transaction's (pending) commit when `producer` is set.
    async fn commit_as(
        &self,
        producer: Option<i64>,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        instance: Option<&str>,
        parts: Vec<CommitPart>,
    ) -> Vec<i16> {
        let n = parts.len();
        if !self.offsets.owns(group_id) {
            return vec![codes::NOT_COORDINATOR; n];
        }
        if group_id.is_empty() {
            return vec![codes::INVALID_GROUP_ID; n];
        }
        // A consumer-protocol group (KIP-848) checks member epochs, for OffsetCommit and
        // TxnOffsetCommit alike; a transactional commit without member information (v0-2, or
        // a producer outside the group) is accepted, as Kafka accepts it.
        let code = match self
            .consumer
            .check_commit(group_id, member_id, generation_id)
        {
            Some(_) if producer.is_some() && member_id.is_empty() && generation_id < 0 => {
                codes::NONE
            }
            Some(code) => code,
            None => self.check_committer(group_id, generation_id, member_id, instance),
        };
        if code != codes::NONE {
            return vec![code; n];
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
        let store = match self.offsets.store_for_write(group_id).await {
            Ok(s) => s,
            Err(code) => return vec![code; n],
        };
        let stored = match producer {
            None => store.commit(group_id, entries).await,
            Some(pid) => store.txn_commit(pid, group_id, entries).await,
        };
        match stored {
            Ok(()) => vec![codes::NONE; n],
            Err(e) => {
                tracing::warn!(group = group_id, error = %e, "offset commit failed");
                vec![e.code(); n]
            }
        }
    }

    /// Whether this member (or a committer outside the group: no member id, generation -1)
    /// may commit offsets for `group_id` now: NONE, or the error to answer.
    fn check_committer(
        &self,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        instance: Option<&str>,
    ) -> i16 {
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
                    return code;
                }
            }
        } else if generation_id >= 0 || !member_id.is_empty() {
            return codes::ILLEGAL_GENERATION;
        }
        codes::NONE
    }

    /// A transaction marker for `group_id`: `producer_id`'s pending offsets become
    /// committed (`commit`) or are dropped. Durable before it answers NONE.
    pub async fn txn_end(&self, group_id: &str, producer_id: i64, commit: bool) -> i16 {
        if !self.offsets.owns(group_id) {
            return codes::NOT_COORDINATOR;
        }
        let Some(store) = self.offsets.store(group_id) else {
            return codes::NONE;
        };
        match store.txn_end(producer_id, group_id, commit).await {
            Ok(()) => codes::NONE,
            Err(e) => {
                tracing::warn!(group = group_id, error = %e, "transaction marker for offsets failed");
                e.code()
            }
        }
    }

    /// Committed offsets of `group_id`: for the given partitions (None = all committed).
    /// Missing ones come back as offset -1. `require_stable` (a read_committed consumer): a
    /// partition for which an open transaction holds a pending offset comes back as
    /// [`UNSTABLE`] (answered UNSTABLE_OFFSET_COMMIT; the client retries).
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        wanted: Option<Vec<(String, Vec<i32>)>>,
        require_stable: bool,
    ) -> Result<Vec<(String, i32, Committed)>, i16> {
        if !self.offsets.owns(group_id) {
            return Err(codes::NOT_COORDINATOR);
        }
        let store = self.offsets.store(group_id);
        let get = |t: &str, p: i32| {
            let s = store.as_ref()?;
            if require_stable && s.has_pending(group_id, t, p) {
                return Some(Committed {
                    offset: UNSTABLE,
                    leader_epoch: -1,
                    metadata: String::new(),
                    commit_ms: -1,
                });
            }
            s.get(group_id, t, p)
        };
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

    /// OffsetDelete: deletes `group_id`'s committed offsets of the given partitions, durably.
    /// Kafka's rules: an unknown group is GROUP_ID_NOT_FOUND; a group with members that is
    /// not a consumer group (e.g. Connect) is NON_EMPTY_GROUP; in a consumer group with
    /// members, the partitions of topics a member subscribes to are refused with
    /// GROUP_SUBSCRIBED_TO_TOPIC (and all of them when the subscriptions cannot be read) and
    /// the others deleted. Answers one code per partition, in request order.
    pub async fn delete_offsets(
        &self,
        group_id: &str,
        topics: Vec<(String, Vec<i32>)>,
    ) -> Result<Vec<Vec<i16>>, i16> {
        if !self.offsets.owns(group_id) {
            return Err(codes::NOT_COORDINATOR);
        }
        if group_id.is_empty() {
            return Err(codes::INVALID_GROUP_ID);
        }
        let store = self.offsets.store(group_id);
        let in_memory = self.group(group_id);
        if in_memory.is_none() && !store.as_ref().is_some_and(|s| s.has_group(group_id)) {
            return Err(codes::GROUP_ID_NOT_FOUND);
        }
        // None: every topic may be deleted (no members).
        let subscribed: Option<Option<HashSet<String>>> = match &in_memory {
            Some(g) if !g.borrow().members.is_empty() => {
                let g = g.borrow();
                if g.protocol_type.as_deref() != Some("consumer") {
                    return Err(codes::NON_EMPTY_GROUP);
                }
                Some(subscribed_topics(&g))
            }
            _ => None,
        };
        let is_subscribed = |topic: &str| match &subscribed {
            None => false,
            Some(None) => true,
            Some(Some(set)) => set.contains(topic),
        };
        let mut out = Vec::with_capacity(topics.len());
        let mut doomed = Vec::new();
        for (topic, parts) in &topics {
            let refused = is_subscribed(topic);
            out.push(
                parts
                    .iter()
                    .map(|&p| {
                        if refused {
                            codes::GROUP_SUBSCRIBED_TO_TOPIC
                        } else {
                            doomed.push((topic.clone(), p));
                            codes::NONE
                        }
                    })
                    .collect(),
            );
        }
        if let Some(store) = store {
            if let Err(e) = store.delete_partitions(group_id, &doomed).await {
                tracing::warn!(group = group_id, error = %e, "deleting offsets failed");
                return Err(e.code());
            }
        }
        Ok(out)
    }
}

/// The topics the members of a consumer group subscribe to, read from their metadata for
/// the group's protocol (ConsumerProtocolSubscription: `version i16, topics [string]`, the
/// same start in every version); `None` when that is not known (no protocol chosen yet, or
/// metadata that does not parse), which Kafka treats as "subscribed to everything".
fn subscribed_topics(g: &Group) -> Option<HashSet<String>> {
    let protocol = g.protocol.as_ref()?;
    let mut topics = HashSet::new();
    for m in g.members.values() {
        let (_, md) = m.protocols.iter().find(|(p, _)| p == protocol)?;
        topics.extend(subscription_topics(md)?);
    }
    Some(topics)
}

/// The topic list of a ConsumerProtocolSubscription.
pub(super) fn subscription_topics(mut md: &[u8]) -> Option<Vec<String>> {
    use bytes::Buf;
    if md.remaining() < 6 {
        return None;
    }
    let _version = md.get_i16();
    let n = md.get_i32();
    if n < 0 || n as usize > md.remaining() / 2 {
        return None;
    }
    let mut topics = Vec::with_capacity(n as usize);
    for _ in 0..n {
        if md.remaining() < 2 {
            return None;
        }
        let len = md.get_i16();
        if len < 0 || len as usize > md.remaining() {
            return None;
        }
        topics.push(String::from_utf8(md[..len as usize].to_vec()).ok()?);
        md.advance(len as usize);
    }
    Some(topics)
}
