//! The transaction coordinator of the transaction-log buckets this core owns (Kafka's
//! `TransactionCoordinator`): InitProducerId with a transactional id, AddPartitionsToTxn,
//! AddOffsetsToTxn and EndTxn arrive here as [`TxnReq`] (sent by `kafka::txn` to
//! `Shard::txn_core(id)`) and are served by the core's [`TxnCoordinator`] (`serve`; its
//! state in `txn_stores`), which the shard owns and which reaches the shard (metadata,
//! producer ids, markers) through a weak reference. Each state change is durable in the
//! bucket's transaction log (`broker::txn`) before it is acted on. On a standalone broker a
//! core owns the buckets `b % cores == core` for good; in a cluster it owns those whose
//! `__transaction_state` partition it leads (docs/replication.md, "Transaction coordinators
//! in a cluster"): it loads such a bucket (replays the partition) once an entry of its term
//! is committed — at its tick or at the first request, whichever comes first — and drops it
//! at the tick after it lost the leadership. Ending a transaction:
//!
//! 1. `Prepare{Commit,Abort}` is stored;
//! 2. a marker (control batch) is appended and flushed on every partition of the transaction
//!    (`Req::Markers` to each owner core, or in a cluster to each leader: `shard::markers`),
//!    and the pending offsets of its groups are applied
//!    or dropped (`GroupReq::TxnEnd` to each group's core);
//! 3. `Complete{Commit,Abort}` is stored and the client answered.
//!
//! A crash between 1 and 3 leaves `Prepare*` in the log: the coordinator's tick (every
//! second, also right after start-up) finishes it — writing a marker twice is harmless; in a
//! cluster the new leader of the bucket's partition does, once it has loaded it.
//! The tick also aborts transactions open longer than their timeout (bumping the epoch, so
//! the timed-out producer is fenced) and forgets ids idle past
//! `transactional.id.expiration.ms`. One operation per transactional id at a time: another
//! request meanwhile gets CONCURRENT_TRANSACTIONS, which clients retry.

use std::collections::BTreeSet;
use std::rc::Rc;

use tracing::{debug, info, warn};

use super::lifecycle::wall_clock_ms;
use super::msg::{TxnReq, TxnResp};
use super::txn_stores::Busy;
pub use super::txn_stores::TxnCoordinator;
use super::Shard;
use crate::broker::errors;
use crate::broker::txn::{self, TxnMeta, TxnState, TxnStore};

impl TxnCoordinator {
    /// Serves a transaction request on the core that owns its transactional id.
    pub(super) async fn serve(self: &Rc<Self>, req: TxnReq) -> TxnResp {
        let Some(shard) = self.shard.upgrade() else {
            return refused(req, errors::COORDINATOR_NOT_AVAILABLE);
        };
        if let Some(txn_id) = req.txn_id() {
            // In a cluster: a bucket this core has just come to lead is loaded now rather
            // than at the next tick. A failure shows as COORDINATOR_LOAD_IN_PROGRESS below.
            let _ = self.load(txn::bucket_of(txn_id)).await;
        }
        match req {
            TxnReq::Init {
                txn_id,
                timeout_ms,
                producer_id,
                epoch,
            } => self
                .init(&shard, &txn_id, timeout_ms, producer_id, epoch)
                .await
                .unwrap_or_else(|error| TxnResp::Init {
                    error,
                    producer_id: -1,
                    epoch: -1,
                }),
            TxnReq::AddPartitions {
                txn_id,
                producer_id,
                epoch,
                parts,
            } => {
                let n = parts.len();
                match self
                    .add(&shard, &txn_id, producer_id, epoch, parts, None)
                    .await
                {
                    Ok(codes) => TxnResp::Codes(codes),
                    Err(code) => TxnResp::Codes(vec![code; n]),
                }
            }
            TxnReq::AddOffsets {
                txn_id,
                producer_id,
                epoch,
                group,
            } => TxnResp::Code(
                self.add(&shard, &txn_id, producer_id, epoch, Vec::new(), Some(group))
                    .await
                    .err()
                    .unwrap_or(errors::NONE),
            ),
            TxnReq::End {
                txn_id,
                producer_id,
                epoch,
                commit,
            } => TxnResp::Code(
                self.end(&shard, &txn_id, producer_id, epoch, commit)
                    .await
                    .err()
                    .unwrap_or(errors::NONE),
            ),
            TxnReq::Verify {
                txn_id,
                producer_id,
                epoch,
                parts,
            } => TxnResp::Code(match self.checked(&txn_id, producer_id, epoch) {
                Err(code) => code,
                Ok((_, m))
                    if m.state == TxnState::Ongoing
                        && parts.iter().all(|p| m.partitions.contains(p)) =>
                {
                    errors::NONE
                }
                Ok(_) => {
                    debug!(txn = %txn_id, "transactional produce to a partition outside the transaction refused");
                    errors::INVALID_TXN_STATE
                }
            }),
            TxnReq::Describe => {
                TxnResp::Described(self.served().iter().flat_map(|s| s.all()).collect())
            }
        }
    }

    /// The stored state of `txn_id`, checked against the producer id and epoch a client
    /// sent: INVALID_PRODUCER_ID_MAPPING for an unknown id or another producer id,
    /// PRODUCER_FENCED for another epoch.
    fn checked(
        &self,
        txn_id: &str,
        producer_id: i64,
        epoch: i16,
    ) -> Result<(Rc<TxnStore>, TxnMeta), i16> {
        let store = self.store(txn_id)?;
        let m = store
            .get(txn_id)
            .ok_or(errors::INVALID_PRODUCER_ID_MAPPING)?;
        if m.producer_id != producer_id {
            return Err(errors::INVALID_PRODUCER_ID_MAPPING);
        }
        if m.epoch != epoch {
            return Err(errors::PRODUCER_FENCED);
        }
        Ok((store, m))
    }

    /// A local storage error is COORDINATOR_NOT_AVAILABLE (the client retries); in a cluster
    /// a lost leadership is NOT_COORDINATOR (it finds the new coordinator).
    async fn put(store: &TxnStore, txn_id: &str, m: Option<TxnMeta>) -> Result<(), i16> {
        store.put(txn_id, m).await.map_err(|e| {
            warn!(txn = txn_id, error = %e, "writing the transaction log failed");
            e.code_or(errors::COORDINATOR_NOT_AVAILABLE)
        })
    }

    /// InitProducerId for a transactional id: a new producer id, or the id's producer id
    /// with its epoch bumped — which fences the previous instance; a transaction it left
    /// open is aborted first.
    async fn init(
        &self,
        shard: &Rc<Shard>,
        txn_id: &str,
        timeout_ms: i32,
        producer_id: i64,
        epoch: i16,
    ) -> Result<TxnResp, i16> {
        let max = shard.config.transaction_max_timeout_ms;
        if timeout_ms <= 0 || i64::from(timeout_ms) > max {
            return Err(errors::INVALID_TRANSACTION_TIMEOUT);
        }
        let store = self.store(txn_id)?;
        let _busy = Busy::take(&self.busy, txn_id).ok_or(errors::CONCURRENT_TRANSACTIONS)?;
        let now = wall_clock_ms();
        let mut m = match store.get(txn_id) {
            None => TxnMeta {
                producer_id: shard.new_producer_id(),
                epoch: 0,
                timeout_ms,
                state: TxnState::Empty,
                partitions: BTreeSet::new(),
                groups: BTreeSet::new(),
                start_ms: -1,
                update_ms: now,
            },
            Some(old) => {
                // KIP-360: a producer that knows its id and epoch may bump it only if they
                // are current; anyone else is a zombie.
                if producer_id >= 0 && (producer_id != old.producer_id || epoch != old.epoch) {
                    return Err(errors::PRODUCER_FENCED);
                }
                let mut m = old.clone();
                if let Some(commit) = m.state.preparing() {
                    m = self.finish(shard, &store, txn_id, m, commit).await?;
                }
                if m.state == TxnState::Ongoing {
                    // Abort with the next epoch: the old instance is fenced on every
                    // partition it wrote to, and the new one continues with that epoch.
                    info!(
                        txn = txn_id,
                        epoch = m.epoch,
                        "fencing the previous instance: aborting its open transaction"
                    );
                    fence(&mut m);
                    m.state = TxnState::PrepareAbort;
                    Self::put(&store, txn_id, Some(m.clone())).await?;
                    m = self.finish(shard, &store, txn_id, m, false).await?;
                } else {
                    bump(&mut m, shard);
                }
                m.timeout_ms = timeout_ms;
                m.state = TxnState::Empty;
                m.partitions.clear();
                m.groups.clear();
                m.start_ms = -1;
                m.update_ms = now;
                m
            }
        };
        m.update_ms = now;
        Self::put(&store, txn_id, Some(m.clone())).await?;
        debug!(
            txn = txn_id,
            producer_id = m.producer_id,
            epoch = m.epoch,
            "transactional producer initialised"
        );
        Ok(TxnResp::Init {
            error: errors::NONE,
            producer_id: m.producer_id,
            epoch: m.epoch,
        })
    }

    /// AddPartitionsToTxn (`parts`) or AddOffsetsToTxn (`group`): the transaction is open
    /// from here on.
    async fn add(
        &self,
        shard: &Shard,
        txn_id: &str,
        producer_id: i64,
        epoch: i16,
        parts: Vec<(String, i32)>,
        group: Option<String>,
    ) -> Result<Vec<i16>, i16> {
        let _busy = Busy::take(&self.busy, txn_id).ok_or(errors::CONCURRENT_TRANSACTIONS)?;
        let (store, mut m) = self.checked(txn_id, producer_id, epoch)?;
        if m.state.preparing().is_some() {
            return Err(errors::CONCURRENT_TRANSACTIONS);
        }
        let meta = shard.metadata();
        // In a cluster a partition may be led by another broker (its markers are written
        // there): it must only exist.
        let unknown: Vec<bool> = parts
            .iter()
            .map(|(t, p)| {
                meta.topics
                    .get(t)
                    .is_none_or(|tm| usize::try_from(*p).map_or(true, |p| p >= tm.owners.len()))
            })
            .collect();
        if unknown.iter().any(|u| *u) {
            return Ok(unknown
                .iter()
                .map(|&u| {
                    if u {
                        errors::UNKNOWN_TOPIC_OR_PARTITION
                    } else {
                        errors::OPERATION_NOT_ATTEMPTED
                    }
                })
                .collect());
        }
        let n = parts.len();
        let before = m.clone();
        if m.state != TxnState::Ongoing {
            m.state = TxnState::Ongoing;
            m.partitions.clear();
            m.groups.clear();
            m.start_ms = wall_clock_ms();
        }
        m.partitions.extend(parts);
        m.groups.extend(group);
        if m != before {
            m.update_ms = wall_clock_ms();
            Self::put(&store, txn_id, Some(m)).await?;
        }
        Ok(vec![errors::NONE; n])
    }

    /// EndTxn: writes the markers and answers once they are durable everywhere.
    async fn end(
        &self,
        shard: &Rc<Shard>,
        txn_id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
    ) -> Result<(), i16> {
        let _busy = Busy::take(&self.busy, txn_id).ok_or(errors::CONCURRENT_TRANSACTIONS)?;
        let (store, mut m) = self.checked(txn_id, producer_id, epoch)?;
        match (m.state, commit) {
            (TxnState::Ongoing, _) => {}
            // A retry of an EndTxn that completed.
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => return Ok(()),
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
                self.finish(shard, &store, txn_id, m, commit).await?;
                return Ok(());
            }
            _ => return Err(errors::INVALID_TXN_STATE),
        }
        m.state = if commit {
            TxnState::PrepareCommit
        } else {
            TxnState::PrepareAbort
        };
        m.update_ms = wall_clock_ms();
        Self::put(&store, txn_id, Some(m.clone())).await?;
        self.finish(shard, &store, txn_id, m, commit).await?;
        Ok(())
    }

    /// Writes the markers of a prepared transaction and stores its completion.
    async fn finish(
        &self,
        shard: &Rc<Shard>,
        store: &TxnStore,
        txn_id: &str,
        mut m: TxnMeta,
        commit: bool,
    ) -> Result<TxnMeta, i16> {
        shard
            .write_markers(
                m.producer_id,
                m.epoch,
                commit,
                m.start_ms,
                &m.partitions,
                &m.groups,
            )
            .await?;
        m.state = if commit {
            TxnState::CompleteCommit
        } else {
            TxnState::CompleteAbort
        };
        m.partitions.clear();
        m.groups.clear();
        m.update_ms = wall_clock_ms();
        Self::put(store, txn_id, Some(m.clone())).await?;
        let ended = if commit {
            &shard.metrics.txn_commits
        } else {
            &shard.metrics.txn_aborts
        };
        ended.set(ended.get() + 1);
        debug!(txn = txn_id, commit, "transaction ended");
        Ok(m)
    }

    /// Finishes prepared transactions (after a crash, a failed marker write, or — in a
    /// cluster — what the previous leader of a bucket left), aborts timed-out ones, forgets
    /// expired ids: over the buckets this core serves, after (in a cluster) loading those it
    /// has come to lead and dropping those it lost.
    pub(super) async fn tick(&self, shard: &Rc<Shard>) {
        self.follow_leadership().await;
        let now = wall_clock_ms();
        let expiration = shard.config.transactional_id_expiration_ms;
        for store in &self.served() {
            for (id, m) in store.all() {
                let Some(_busy) = Busy::take(&self.busy, &id) else {
                    continue;
                };
                let r = if let Some(commit) = m.state.preparing() {
                    self.finish(shard, store, &id, m, commit).await.map(drop)
                } else if m.state == TxnState::Ongoing && now - m.start_ms > i64::from(m.timeout_ms)
                {
                    info!(txn = %id, timeout_ms = m.timeout_ms, "transaction timed out: aborting it");
                    let timeouts = &shard.metrics.txn_timeouts;
                    timeouts.set(timeouts.get() + 1);
                    let mut m = m;
                    fence(&mut m);
                    m.state = TxnState::PrepareAbort;
                    m.update_ms = now;
                    match Self::put(store, &id, Some(m.clone())).await {
                        Ok(()) => self.finish(shard, store, &id, m, false).await.map(drop),
                        Err(e) => Err(e),
                    }
                } else if m.state != TxnState::Ongoing && now - m.update_ms > expiration {
                    debug!(txn = %id, "transactional id expired");
                    Self::put(store, &id, None).await
                } else {
                    Ok(())
                };
                if r.is_err() {
                    debug!(txn = %id, "transaction tick left work for the next one");
                }
                glommio::yield_if_needed().await;
            }
        }
    }
}

/// The answer to `req` when no coordinator here can serve it: `code` for each part of it.
pub fn refused(req: TxnReq, code: i16) -> TxnResp {
    match req {
        TxnReq::Init { .. } => TxnResp::Init {
            error: code,
            producer_id: -1,
            epoch: -1,
        },
        TxnReq::AddPartitions { parts, .. } => TxnResp::Codes(vec![code; parts.len()]),
        TxnReq::Describe => TxnResp::Described(Vec::new()),
        _ => TxnResp::Code(code),
    }
}

/// The epoch an abort that fences the current instance is written with (the producer id
/// stays: the markers must end its transaction).
fn fence(m: &mut TxnMeta) {
    m.epoch = m.epoch.saturating_add(1).min(i16::MAX - 1);
}

/// The next epoch of a transactional id's producer (a new producer id when the epoch is
/// exhausted, as Kafka does).
fn bump(m: &mut TxnMeta, shard: &Shard) {
    if m.epoch >= i16::MAX - 1 {
        m.producer_id = shard.new_producer_id();
        m.epoch = 0;
    } else {
        m.epoch += 1;
    }
}
