//! The transaction coordinator's stores (`shard::txn` drives transactions with them): which
//! transaction-log buckets this core serves. Standalone, the buckets `b % cores == core`, for
//! good; in a cluster, those whose `__transaction_state` partition this core leads at a term
//! whose first entry is committed, each store loaded (the partition replayed) for that term
//! — a store of an older term is never served, and is dropped at the next tick.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::{Rc, Weak};

use tracing::{info, warn};

use super::msg::TxnReq;
use super::Shard;
use crate::broker::errors;
use crate::broker::group::offsets::BucketReplica;
use crate::broker::txn::{self, TxnStore};

/// This core's transaction coordinator.
pub struct TxnCoordinator {
    /// The shard it serves on (which owns it): the metadata, producer ids, markers.
    pub(super) shard: Weak<Shard>,
    /// The stores of the buckets this core serves (in a cluster: loaded so far, each for the
    /// term it was loaded at; only those of the current term are served).
    stores: RefCell<HashMap<usize, Rc<TxnStore>>>,
    /// Transactional ids with an operation under way.
    pub(super) busy: RefCell<HashSet<String>>,
    /// In a cluster: the `__transaction_state` partitions behind the buckets.
    replica: Option<Rc<dyn BucketReplica>>,
    /// One load (replay of a partition) at a time.
    loading: glommio::sync::Semaphore,
}

impl TxnCoordinator {
    /// A coordinator with the stores of `stores` (standalone: every bucket this core owns),
    /// or, in a cluster (`replica`), none yet.
    pub(super) fn new(
        shard: Weak<Shard>,
        stores: HashMap<usize, Rc<TxnStore>>,
        replica: Option<Rc<dyn BucketReplica>>,
    ) -> TxnCoordinator {
        TxnCoordinator {
            shard,
            stores: RefCell::new(stores),
            busy: RefCell::new(HashSet::new()),
            replica,
            loading: glommio::sync::Semaphore::new(1),
        }
    }

    /// The store of `bucket` if this core serves it now: standalone, if it owns it; in a
    /// cluster, if it leads the bucket's partition and the store is loaded for that term.
    fn serving(&self, bucket: usize) -> Option<Rc<TxnStore>> {
        let store = self.stores.borrow().get(&bucket).cloned()?;
        match &self.replica {
            None => Some(store),
            Some(r) => {
                (store.term().is_some() && store.term() == r.serving_term(bucket)).then_some(store)
            }
        }
    }

    /// The store of `txn_id`'s bucket, or why this core does not serve it: in a cluster,
    /// COORDINATOR_LOAD_IN_PROGRESS while it leads the partition but has not loaded it (clients
    /// retry in place), NOT_COORDINATOR when it does not lead it (they look for the
    /// coordinator again).
    pub(super) fn store(&self, txn_id: &str) -> Result<Rc<TxnStore>, i16> {
        let bucket = txn::bucket_of(txn_id);
        self.serving(bucket).ok_or(match &self.replica {
            Some(r) if r.leads(bucket) => errors::COORDINATOR_LOAD_IN_PROGRESS,
            _ => errors::NOT_COORDINATOR,
        })
    }

    /// The stores this core serves now.
    pub(super) fn served(&self) -> Vec<Rc<TxnStore>> {
        (0..txn::BUCKETS).filter_map(|b| self.serving(b)).collect()
    }

    /// In a cluster, loads `bucket` if this core leads its partition at a term whose first
    /// entry is committed and has not loaded it for that term: replays the partition (Kafka's
    /// "loading" of a transaction-log partition). Standalone: nothing to do. An error is
    /// COORDINATOR_LOAD_IN_PROGRESS (the next request or tick tries again).
    pub(super) async fn load(&self, bucket: usize) -> Result<(), i16> {
        let Some(replica) = &self.replica else {
            return Ok(());
        };
        if replica.serving_term(bucket).is_none() || self.serving(bucket).is_some() {
            return Ok(());
        }
        let _one = self
            .loading
            .acquire_permit(1)
            .await
            .map_err(|_| errors::COORDINATOR_NOT_AVAILABLE)?;
        let Some(term) = replica.serving_term(bucket) else {
            return Ok(());
        };
        if self.serving(bucket).is_some() {
            return Ok(());
        }
        let started = std::time::Instant::now();
        match TxnStore::open_replicated(replica.clone(), bucket, term).await {
            Ok(s) => {
                info!(
                    bucket,
                    term,
                    ids = s.all().len(),
                    ms = started.elapsed().as_millis() as u64,
                    "transaction state partition loaded: coordinating its transactional ids"
                );
                self.stores.borrow_mut().insert(bucket, Rc::new(s));
                Ok(())
            }
            Err(e) => {
                warn!(bucket, term, error = %e, "loading a transaction state partition failed");
                Err(errors::COORDINATOR_LOAD_IN_PROGRESS)
            }
        }
    }

    /// In a cluster: loads the buckets whose partition this core has come to lead, and drops
    /// those it no longer serves (lost leadership, or loaded for an older term).
    pub(super) async fn follow_leadership(&self) {
        let Some(replica) = &self.replica else {
            return;
        };
        for bucket in 0..txn::BUCKETS {
            if replica.serving_term(bucket).is_some() {
                // A failure is logged; the next tick tries again.
                let _ = self.load(bucket).await;
            }
        }
        let lost: Vec<usize> = self
            .stores
            .borrow()
            .keys()
            .copied()
            .filter(|&b| self.serving(b).is_none())
            .collect();
        for bucket in lost {
            self.stores.borrow_mut().remove(&bucket);
            info!(
                bucket,
                "no longer coordinating this transaction state partition"
            );
        }
    }

    pub async fn close(self) {
        for (_, s) in self.stores.into_inner() {
            if let Ok(s) = Rc::try_unwrap(s) {
                if let Err(e) = s.close().await {
                    warn!(error = %e, "closing a transaction log failed");
                }
            }
        }
    }
}

impl TxnReq {
    /// The transactional id the request is about (`None`: DescribeTransactions and
    /// ListTransactions, about every id of a core).
    pub(super) fn txn_id(&self) -> Option<&str> {
        match self {
            TxnReq::Init { txn_id, .. }
            | TxnReq::AddPartitions { txn_id, .. }
            | TxnReq::AddOffsets { txn_id, .. }
            | TxnReq::End { txn_id, .. }
            | TxnReq::Verify { txn_id, .. } => Some(txn_id),
            TxnReq::Describe => None,
        }
    }
}

/// Marks a transactional id busy for as long as it lives.
pub(super) struct Busy<'a>(&'a RefCell<HashSet<String>>, String);

impl<'a> Busy<'a> {
    pub(super) fn take(set: &'a RefCell<HashSet<String>>, id: &str) -> Option<Busy<'a>> {
        set.borrow_mut()
            .insert(id.to_owned())
            .then(|| Busy(set, id.to_owned()))
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.borrow_mut().remove(&self.1);
    }
}
