//! Offset-store routing: which core coordinates a group (its bucket, `bucket % cores`), and
//! the offset stores (one `weir_storage::Log` each) of the buckets this core owns, opened on
//! first use.
//!
//! In a cluster ([`OffsetRouter::set_replica`]) a bucket is a partition of the replicated
//! `__consumer_offsets`: this core coordinates the groups of the buckets whose partition it
//! leads, each store loaded (the partition replayed) for the term it leads at; a store of an
//! older term is never served.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use weir_storage::BatchCache;

use super::offsets::{bucket_of, BucketReplica, OffsetStore, BUCKETS};
use super::state::codes;

/// The offset stores of this core's buckets.
pub struct OffsetRouter {
    /// Offset stores opened so far, by bucket. A bucket with no offsets on disk is opened
    /// (its log created) on its first commit, so a broker without groups creates nothing.
    stores: RefCell<HashMap<usize, Rc<OffsetStore>>>,
    owned: Vec<usize>,
    data_dir: PathBuf,
    cache: Rc<BatchCache>,
    open_lock: glommio::sync::Semaphore,
    /// In a cluster: the replicated partitions behind the buckets.
    replica: RefCell<Option<Rc<dyn BucketReplica>>>,
}

impl OffsetRouter {
    /// Opens the offset stores with data of the buckets `core` owns (bucket % cores == core).
    pub async fn open(
        data_dir: &Path,
        core: usize,
        cores: usize,
        cache: Rc<BatchCache>,
    ) -> Result<OffsetRouter, weir_storage::Error> {
        let owned: Vec<usize> = (0..BUCKETS).filter(|b| b % cores.max(1) == core).collect();
        let mut stores = HashMap::new();
        for &bucket in &owned {
            if OffsetStore::exists(data_dir, bucket) {
                stores.insert(
                    bucket,
                    Rc::new(OffsetStore::open(data_dir, bucket, cache.clone()).await?),
                );
            }
        }
        Ok(OffsetRouter {
            stores: RefCell::new(stores),
            owned,
            data_dir: data_dir.to_owned(),
            cache,
            open_lock: glommio::sync::Semaphore::new(1),
            replica: RefCell::new(None),
        })
    }

    /// Makes this a cluster's router: buckets are `__consumer_offsets` partitions.
    pub fn set_replica(&self, replica: Rc<dyn BucketReplica>) {
        *self.replica.borrow_mut() = Some(replica);
    }

    /// In a cluster, why this core does not serve `group` now: it leads the group's
    /// partition but has not loaded it yet (COORDINATOR_LOAD_IN_PROGRESS, which clients retry
    /// in place), or it does not lead it (NOT_COORDINATOR: they look for the coordinator
    /// again). Kafka's two answers; the difference matters to librdkafka, whose OffsetFetch
    /// treats NOT_COORDINATOR as "find the coordinator" — which crashes its admin client
    /// (librdkafka issue 5040) — and LOAD_IN_PROGRESS as "retry".
    pub fn not_serving(&self, group: &str) -> i16 {
        match self.replica() {
            Some(r) if r.leads(bucket_of(group)) => codes::COORDINATOR_LOAD_IN_PROGRESS,
            _ => codes::NOT_COORDINATOR,
        }
    }

    /// Whether this is a cluster's router.
    pub fn is_cluster(&self) -> bool {
        self.replica.borrow().is_some()
    }

    fn replica(&self) -> Option<Rc<dyn BucketReplica>> {
        self.replica.borrow().clone()
    }

    /// In a cluster, the store of `bucket` if it is loaded for the term this core leads the
    /// bucket's partition at now.
    fn serving(&self, replica: &Rc<dyn BucketReplica>, bucket: usize) -> Option<Rc<OffsetStore>> {
        let term = replica.serving_term(bucket)?;
        let store = self.stores.borrow().get(&bucket).cloned()?;
        (store.term() == Some(term)).then_some(store)
    }

    /// In a cluster, loads the store of `group`'s bucket when this core leads its partition
    /// and the store is not loaded for that term (replaying the partition up to its commit).
    /// `Ok(true)`: a store was (re)loaded, so any group state this core kept for the bucket
    /// is of an older term. Standalone: nothing to do.
    pub async fn load(&self, group: &str) -> Result<bool, i16> {
        let Some(replica) = self.replica() else {
            return Ok(false);
        };
        let bucket = bucket_of(group);
        if replica.serving_term(bucket).is_none() || self.serving(&replica, bucket).is_some() {
            return Ok(false);
        }
        let _permit = self
            .open_lock
            .acquire_permit(1)
            .await
            .map_err(|_| codes::COORDINATOR_NOT_AVAILABLE)?;
        let Some(term) = replica.serving_term(bucket) else {
            return Ok(false);
        };
        if self.serving(&replica, bucket).is_some() {
            return Ok(false);
        }
        let started = std::time::Instant::now();
        match OffsetStore::open_replicated(replica.clone(), bucket, term).await {
            Ok(s) => {
                tracing::info!(
                    bucket,
                    term,
                    groups = s.groups().len(),
                    ms = started.elapsed().as_millis() as u64,
                    "offsets partition loaded: coordinating its groups"
                );
                self.stores.borrow_mut().insert(bucket, Rc::new(s));
                Ok(true)
            }
            Err(e) => {
                tracing::warn!(bucket, term, error = %e, "loading an offsets partition failed");
                Err(codes::COORDINATOR_LOAD_IN_PROGRESS)
            }
        }
    }

    /// The core that owns `group`.
    pub fn core_of(group: &str, cores: usize) -> usize {
        bucket_of(group) % cores.max(1)
    }

    /// Whether this core coordinates `group` (in a cluster: leads its bucket's partition,
    /// the store loaded for that term).
    pub fn owns(&self, group: &str) -> bool {
        match self.replica() {
            Some(r) => self.serving(&r, bucket_of(group)).is_some(),
            None => self.owned.contains(&bucket_of(group)),
        }
    }

    /// The group's offset store if it is open (an unopened store holds no offsets).
    pub fn store(&self, group: &str) -> Option<Rc<OffsetStore>> {
        match self.replica() {
            Some(r) => self.serving(&r, bucket_of(group)),
            None => self.stores.borrow().get(&bucket_of(group)).cloned(),
        }
    }

    /// On a standalone broker, the store of `bucket` if it is open (`None` in a cluster).
    pub fn bucket_store(&self, bucket: usize) -> Option<Rc<OffsetStore>> {
        if self.is_cluster() {
            return None;
        }
        self.stores.borrow().get(&bucket).cloned()
    }

    /// The stores opened so far (in a cluster: those being served).
    pub fn open_stores(&self) -> Vec<Rc<OffsetStore>> {
        match self.replica() {
            Some(r) => (0..BUCKETS).filter_map(|b| self.serving(&r, b)).collect(),
            None => self.stores.borrow().values().cloned().collect(),
        }
    }

    /// The stores, for closing them.
    pub fn into_stores(self) -> impl Iterator<Item = Rc<OffsetStore>> {
        self.stores.into_inner().into_values()
    }
    /// The group's offset store, opened (created) if needed.
    pub async fn store_for_write(&self, group: &str) -> Result<Rc<OffsetStore>, i16> {
        if !self.owns(group) {
            return Err(codes::NOT_COORDINATOR);
        }
        if let Some(s) = self.store(group) {
            return Ok(s);
        }
        if self.replica().is_some() {
            return Err(codes::NOT_COORDINATOR);
        }
        let _permit = self
            .open_lock
            .acquire_permit(1)
            .await
            .map_err(|_| codes::COORDINATOR_NOT_AVAILABLE)?;
        if let Some(s) = self.store(group) {
            return Ok(s);
        }
        let bucket = bucket_of(group);
        match OffsetStore::open(&self.data_dir, bucket, self.cache.clone()).await {
            Ok(s) => {
                let s = Rc::new(s);
                self.stores.borrow_mut().insert(bucket, s.clone());
                Ok(s)
            }
            Err(e) => {
                tracing::warn!(bucket, error = %e, "opening an offsets log failed");
                Err(codes::KAFKA_STORAGE_ERROR)
            }
        }
    }
}
