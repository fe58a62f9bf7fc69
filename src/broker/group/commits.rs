//! Committing and fetching offsets: checked against the group's members and generation on
//! the group's core, then written to (or read from) its bucket's offset store.

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
        let n = parts.len();
        if !self.offsets.owns(group_id) {
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
        let store = match self.offsets.store_for_write(group_id).await {
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
        if !self.offsets.owns(group_id) {
            return Err(codes::NOT_COORDINATOR);
        }
        let store = self.offsets.store(group_id);
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
}
