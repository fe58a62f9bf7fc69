//! Transaction markers: a coordinator writes a commit or abort marker on every partition of
//! a transaction, each where the partition is led (an owner core here; in a cluster, the core
//! holding this broker's replica, or another broker), and ends the transaction's offsets on
//! each group's coordinator (`shard::txn`, step 2 of ending a transaction).

use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use tracing::{debug, warn};

use super::lifecycle::wall_clock_ms;
use super::peer_calls::Place;
use super::{GroupCall, MarkersCall, Shard};
use crate::broker::errors;
use crate::broker::group::service::{GroupReq, GroupResp};
use crate::broker::peer::call::{PeerAnswer, PeerCall};
use crate::broker::sync::join_all;

/// Endings remembered at most (the coordinator moved away from most of them).
const MEMO_MAX: usize = 10_000;

/// What an ending of a transaction that failed somewhere wrote already: the partitions whose
/// markers are written and the groups whose offsets are ended. Kept in memory by the
/// coordinator core until the ending succeeds, so a retry (the client's EndTxn, the tick)
/// writes only what is missing — as Kafka's coordinator retries only the markers that failed.
/// Lost at a restart: the next attempt writes everything again, which is harmless (a second
/// marker for a closed transaction changes nothing). Left behind when the coordinator moves
/// away mid-ending: still true if it comes back to the same ending (what it wrote is
/// committed), and never taken for another transaction (the key holds the transaction's
/// start).
#[derive(Debug, Clone, Default)]
pub struct MarkersWritten {
    parts: BTreeSet<(String, i32)>,
    groups: BTreeSet<String>,
}

impl Shard {
    /// Appends (and flushes) a commit or abort marker on every partition, each where it is
    /// led: on its owner core here, or — in a cluster — through the partition's Raft group on
    /// the core holding its leader's replica, here or on another broker (a `PeerCall`); and
    /// ends the transaction's offsets on each group's coordinator, here or on another broker.
    /// A partition whose topic is gone needs no marker; any other failure (no leader known,
    /// the leader moved, a broker out of reach) is COORDINATOR_NOT_AVAILABLE: the client
    /// retries, the tick finishes the transaction, and a marker written twice is harmless.
    pub(super) async fn write_markers(
        self: &Rc<Self>,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        started_ms: i64,
        parts: &BTreeSet<(String, i32)>,
        groups: &BTreeSet<String>,
    ) -> Result<(), i16> {
        // What an earlier attempt of this ending already wrote is not written again. The
        // transaction's start tells it from a later one of the same producer and epoch.
        let key = (producer_id, epoch, commit, started_ms);
        let done = self
            .markers_written
            .borrow()
            .get(&key)
            .cloned()
            .unwrap_or_default();
        let mut by_place: BTreeMap<Place, Vec<(String, i32)>> = BTreeMap::new();
        let mut ok = true;
        for (t, p) in parts.iter().filter(|tp| !done.parts.contains(*tp)) {
            match self.marker_place(t, *p).await {
                Some(Ok(place)) => by_place.entry(place).or_default().push((t.clone(), *p)),
                Some(Err(())) => {
                    debug!(topic = %t, partition = p, "no leader known for a transaction marker");
                    ok = false;
                }
                None => {}
            }
        }
        let calls = by_place.into_iter().map(|(place, parts)| {
            let shard = self.clone();
            async move {
                let asked = parts.clone();
                let codes = match place {
                    Place::Core(core) => {
                        let markers = MarkersCall {
                            producer_id,
                            epoch,
                            commit,
                            parts,
                        };
                        (shard.ask(core, markers).await).unwrap_or_default()
                    }
                    Place::Broker(b) => match shard
                        .peer_call(
                            b,
                            PeerCall::Markers {
                                producer_id,
                                epoch,
                                commit,
                                parts,
                            },
                        )
                        .await
                    {
                        Some(PeerAnswer::Codes(codes)) => codes,
                        _ => Vec::new(),
                    },
                };
                // Each partition asked, and whether its marker is written (or not needed).
                let n = asked.len();
                asked
                    .into_iter()
                    .zip(codes.into_iter().chain(std::iter::repeat(-1)))
                    .take(n)
                    .map(|(tp, c)| {
                        (
                            tp,
                            c == errors::NONE || c == errors::UNKNOWN_TOPIC_OR_PARTITION,
                        )
                    })
                    .collect::<Vec<_>>()
            }
        });
        let mut written = done;
        for (tp, w) in join_all(calls.collect()).await.into_iter().flatten() {
            ok &= w;
            if w {
                written.parts.insert(tp);
            }
        }
        let ended_before = written.groups.clone();
        for group in groups.iter().filter(|g| !ended_before.contains(*g)) {
            let code = match self.group_place(group).await {
                Some(Place::Core(core)) => {
                    let req = GroupCall(GroupReq::TxnEnd {
                        group: group.clone(),
                        producer_id,
                        commit,
                    });
                    match self.ask(core, req).await {
                        Some(GroupResp::Code(c)) => c,
                        _ => errors::COORDINATOR_NOT_AVAILABLE,
                    }
                }
                Some(Place::Broker(b)) => {
                    let call = PeerCall::GroupTxnEnd {
                        group: group.clone(),
                        producer_id,
                        commit,
                    };
                    match self.peer_call(b, call).await {
                        Some(PeerAnswer::Code(c)) => c,
                        _ => errors::COORDINATOR_NOT_AVAILABLE,
                    }
                }
                None => errors::COORDINATOR_NOT_AVAILABLE,
            };
            if code == errors::NONE {
                written.groups.insert(group.clone());
            } else {
                ok = false;
            }
        }
        let mut memo = self.markers_written.borrow_mut();
        if ok {
            memo.remove(&key);
            Ok(())
        } else {
            if memo.len() >= MEMO_MAX {
                memo.clear(); // endings abandoned here (their coordinator moved): forgotten
            }
            memo.insert(key, written);
            drop(memo);
            warn!(
                producer_id,
                commit, "writing transaction markers failed; the coordinator retries"
            );
            Err(errors::COORDINATOR_NOT_AVAILABLE)
        }
    }

    /// On a partition's owner: appends and flushes a marker on each partition.
    pub(super) async fn markers_local(
        self: &Rc<Self>,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        parts: Vec<(String, i32)>,
    ) -> Vec<i16> {
        let now = wall_clock_ms();
        let writes = parts.into_iter().map(|(topic, partition)| async move {
            let Some(part) = self.partition(&topic, partition) else {
                // Owned here but not open (yet: a coordinator finishing a transaction right
                // after start-up may ask before this core opened its logs; or its open
                // failed): the marker must still be written, so the coordinator retries.
                // Not owned here any more: the topic is gone, no marker is needed.
                return if self.metadata().owner(&topic, partition) == Some(self.id) {
                    errors::NOT_LEADER_OR_FOLLOWER
                } else {
                    errors::UNKNOWN_TOPIC_OR_PARTITION
                };
            };
            // On a replicated partition an entry of its Raft log like any batch, written by
            // every replica, answered once a majority has it (and refused unless this replica
            // leads: the coordinator asks again).
            let marker = weir_storage::batch::marker_batch(producer_id, epoch, commit, 0, now);
            let code = part.write_marker(&self.replica_host, marker).await;
            if code != errors::NONE {
                debug!(topic, partition, code, "transaction marker not committed");
            }
            code
        });
        // All at once: each log writes and syncs its own file.
        join_all(writes.collect()).await
    }
}
