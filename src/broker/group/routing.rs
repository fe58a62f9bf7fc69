//! Offset-store routing: which core coordinates a group (its bucket, `bucket % cores`), and
//! the offset stores (one `weir_storage::Log` each) of the buckets this core owns, opened on
//! first use.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use weir_storage::BatchCache;

use super::offsets::{bucket_of, OffsetStore, BUCKETS};
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
        })
    }

    /// The core that owns `group`.
    pub fn core_of(group: &str, cores: usize) -> usize {
        bucket_of(group) % cores.max(1)
    }

    /// Whether this core coordinates `group`.
    pub fn owns(&self, group: &str) -> bool {
        self.owned.contains(&bucket_of(group))
    }

    /// The group's offset store if it is open (an unopened store holds no offsets).
    pub fn store(&self, group: &str) -> Option<Rc<OffsetStore>> {
        self.stores.borrow().get(&bucket_of(group)).cloned()
    }

    /// The stores opened so far.
    pub fn open_stores(&self) -> Vec<Rc<OffsetStore>> {
        self.stores.borrow().values().cloned().collect()
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
