//! Persisted group membership: a group's state (generation, protocol, leader, members and
//! their assignments) is written to its bucket's offsets log when a generation becomes
//! Stable and removed when the group becomes Empty or is deleted (`offsets/group_state.rs`
//! has the record). A coordinator that loads a bucket — a broker starting, or a new leader of
//! the bucket's `__consumer_offsets` partition in a cluster — restores those groups Stable,
//! each member's session timer starting afresh, so the members' heartbeats and commits of the
//! stored generation just succeed: a failover or a restart costs no rebalance.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;

use super::coordinator::*;
use super::offsets::{OffsetStore, StoredGroup};

impl Coordinator {
    /// Restores the stored groups of the open stores `which` picks by bucket (replacing any
    /// group of the same id kept in memory).
    pub(super) fn restore_groups(&self, which: impl Fn(usize) -> bool) {
        for store in self.offsets.open_stores() {
            for (id, state) in store.consumer_group_states() {
                if which(super::offsets::bucket_of(&id)) {
                    self.consumer.restore(&id, &state);
                }
            }
            for (id, state) in store.group_states() {
                if !which(super::offsets::bucket_of(&id)) {
                    continue;
                }
                if self.consumer.is_live(&id) {
                    // Both kinds stored: an upgrade whose removal of the classic state was
                    // lost (`migrate.rs`). The consumer-protocol group is the newer.
                    tracing::warn!(group = %id, "a classic state stored beside the consumer group's; keeping the consumer group");
                    continue;
                }
                tracing::info!(group = %id, generation = state.generation, members = state.members.len(),
                    "group restored from its stored state: Stable, no rebalance");
                self.groups
                    .borrow_mut()
                    .insert(id, Rc::new(RefCell::new(Group::restored(&state))));
            }
        }
    }

    /// Serves a ConsumerGroupHeartbeat (KIP-848), storing the group's state if it changed
    /// before answering (`Coordinator::consumer_op`).
    pub(super) async fn consumer_heartbeat(
        &self,
        hb: &super::consumer::Heartbeat,
        topics: &super::consumer::Topics,
    ) -> super::consumer::HeartbeatAnswer {
        let failed = |code: i16| super::consumer::HeartbeatAnswer {
            error: code,
            member_epoch: -1,
            ..Default::default()
        };
        self.consumer_op(&hb.group_id, |c| Some(c.heartbeat(hb, topics)), failed)
            .await
            .expect("a heartbeat is always served")
    }

    /// Runs a consumer-protocol group's operation `op` (`None`: there is no such group) and
    /// stores the group's state, if it changed, before the answer — in the order of this
    /// core's group writes (`persist_lock`). A state that cannot be written drops the group
    /// here (its members join again) and the request is answered `failed`'s error. A group the
    /// operation left with classic members only becomes a classic group.
    pub(super) async fn consumer_op<T>(
        &self,
        group: &str,
        op: impl FnOnce(&super::consumer::ConsumerGroups) -> Option<super::consumer::Served<T>>,
        failed: impl FnOnce(i16) -> T,
    ) -> Option<T> {
        let Ok(_permit) = self.persist_lock.acquire_permit(1).await else {
            return Some(failed(codes::COORDINATOR_NOT_AVAILABLE));
        };
        let served = op(&self.consumer)?;
        if let Some(g) = served.downgraded {
            super::migrate::downgrade(self, group, g);
        }
        let Some(state) = served.change else {
            return Some(served.answer);
        };
        let written = match self.offsets.store_for_write(group).await {
            Ok(store) => store.store_consumer_group(group, state).await.map_err(|e| {
                tracing::warn!(group, error = %e, "storing the consumer group's state failed");
                e.code_or(codes::COORDINATOR_NOT_AVAILABLE)
            }),
            Err(code) => Err(code),
        };
        Some(match written {
            Ok(()) => served.answer,
            Err(code) => {
                self.consumer.discard(group);
                failed(code)
            }
        })
    }

    /// Fences the consumer-protocol groups' members past their timeouts, stores the states
    /// that changed, and turns the groups left with classic members only into classic groups.
    pub(super) fn tick_consumer_groups(&self) {
        let (changes, downgraded) = self.consumer.tick();
        if !changes.is_empty() {
            self.store_consumer_changes_later(changes);
        }
        for (id, g) in downgraded {
            super::migrate::downgrade(self, &id, g);
        }
    }

    /// Stores the consumer groups' states a tick changed (members fenced), in the background
    /// and in order with the other group writes of this core.
    fn store_consumer_changes_later(&self, changes: Vec<(String, super::consumer::Change)>) {
        for (id, state) in changes {
            let Some(store) = self.offsets.store(&id) else {
                continue;
            };
            let lock = self.persist_lock.clone();
            glommio::spawn_local(async move {
                let Ok(_permit) = lock.acquire_permit(1).await else {
                    return;
                };
                if let Err(e) = store.store_consumer_group(&id, state).await {
                    tracing::warn!(group = %id, error = %e, "storing the consumer group's state failed");
                }
            })
            .detach();
        }
    }

    /// Durably stores `group_id`'s state (`None`: removes it). The error is the code a group
    /// request answers.
    pub(super) async fn persist(
        &self,
        group_id: &str,
        state: Option<StoredGroup>,
    ) -> Result<(), i16> {
        let store = self.offsets.store_for_write(group_id).await?;
        store_state(&store, &self.persist_lock, group_id, state).await
    }

    /// The end of a leader's SyncGroup once the generation's state was written (`written`):
    /// every waiting member hears its assignment and the group is Stable — or, when the
    /// write failed, they hear the error and the group rebalances (Kafka's answer). If the
    /// group moved on meanwhile (a join, a leave, an expiry, a lost bucket), that move
    /// answered the waiting members already; the state stored is then of a past generation,
    /// as Kafka's can be, and the next Stable one replaces it.
    pub(super) fn complete_sync(
        &self,
        group_id: &str,
        group: &Rc<RefCell<Group>>,
        generation: i32,
        written: Result<(), i16>,
        protocol_type: Option<String>,
        protocol_name: Option<String>,
    ) {
        if written.is_ok() {
            self.stored(group_id, group);
        }
        let mut g = group.borrow_mut();
        if g.generation != generation || g.state != State::CompletingRebalance {
            return;
        }
        let error = written.err().unwrap_or(codes::NONE);
        for m in g.members.values_mut() {
            if let Some(w) = m.sync_waiter.take() {
                w.set(SyncResponse {
                    error,
                    protocol_type: protocol_type.clone(),
                    protocol_name: protocol_name.clone(),
                    assignment: if error == codes::NONE {
                        m.assignment.clone()
                    } else {
                        Bytes::new()
                    },
                });
            }
        }
        if error == codes::NONE {
            g.state = State::Stable;
            tracing::info!(
                group = group_id,
                generation,
                "rebalance complete: group stable"
            );
        } else {
            for m in g.members.values_mut() {
                m.assignment = Bytes::new();
            }
            g.prepare_rebalance(self.initial_delay());
        }
    }

    /// Notes that `group`'s state is stored. If the group emptied while it was being written
    /// (its last member left or expired meanwhile, finding nothing stored to remove), the
    /// state is removed again, so a restart does not bring back members who left.
    pub(super) fn stored(&self, group_id: &str, group: &Rc<RefCell<Group>>) {
        group.borrow_mut().persisted = true;
        self.forget_if_empty_later(group_id, group);
    }

    /// If `g` just became Empty and its state is stored: removes that state (`g` is marked
    /// as not persisted at once, so this is asked once). Awaited by LeaveGroup, so a group its
    /// last member left is not restored with that member after a restart.
    pub(super) async fn forget_if_empty(&self, group_id: &str, group: &Rc<RefCell<Group>>) {
        if take_persisted_if_empty(group) && self.persist(group_id, None).await.is_err() {
            group.borrow_mut().persisted = true;
        }
    }

    /// [`Coordinator::forget_if_empty`] in the background (from `tick`, which cannot wait).
    pub(super) fn forget_if_empty_later(&self, group_id: &str, group: &Rc<RefCell<Group>>) {
        let Some(store) = self.offsets.store(group_id) else {
            return;
        };
        if !take_persisted_if_empty(group) {
            return;
        }
        let (lock, id, group) = (
            self.persist_lock.clone(),
            group_id.to_owned(),
            group.clone(),
        );
        glommio::spawn_local(async move {
            if store_state(&store, &lock, &id, None).await.is_err() {
                group.borrow_mut().persisted = true;
            }
        })
        .detach();
    }
}

/// Whether `group` is Empty with a stored state, marking it not persisted if so. (A state
/// whose removal then fails restores members who are gone: they expire after their session
/// timeout and the group empties again, and is forgotten then.)
fn take_persisted_if_empty(group: &Rc<RefCell<Group>>) -> bool {
    let mut g = group.borrow_mut();
    if g.state != State::Empty || !g.persisted {
        return false;
    }
    g.persisted = false;
    true
}

/// Writes a group's state to `store`. Writes of one core's groups are made one at a time,
/// in the order they are asked for (`lock`), so a group's records land in the order its
/// states changed.
async fn store_state(
    store: &OffsetStore,
    lock: &glommio::sync::Semaphore,
    group_id: &str,
    state: Option<StoredGroup>,
) -> Result<(), i16> {
    let _permit = lock
        .acquire_permit(1)
        .await
        .map_err(|_| codes::COORDINATOR_NOT_AVAILABLE)?;
    let generation = state.as_ref().map(|s| s.generation);
    store.store_group(group_id, state).await.map_err(|e| {
        tracing::warn!(group = group_id, ?generation, error = %e, "storing the group's state failed");
        e.code_or(codes::COORDINATOR_NOT_AVAILABLE)
    })
}
