//! A bucket's partition as its Raft group would show it to a store or a coordinator, for unit
//! tests (`txn::tests`, `group::takeover_tests`): one log, and the term of whoever leads it
//! now. An append at another term is refused as the shard refuses it (`BucketReplicas::append`:
//! a store loaded under an older term never writes in a newer one).

use std::cell::Cell;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::rc::Rc;

use bytes::Bytes;
use weir_storage::{BatchCache, Log};

use super::{internal_log_config, BucketReplica};
use crate::broker::errors;

pub(crate) struct FakeReplica {
    pub log: Rc<Log>,
    pub term: Cell<u64>,
    /// `internal.topics.compaction.min.bytes`.
    pub min_bytes: u64,
}

impl BucketReplica for FakeReplica {
    fn compaction_min_bytes(&self) -> u64 {
        self.min_bytes
    }

    fn serving_term(&self, _bucket: usize) -> Option<u64> {
        Some(self.term.get())
    }

    fn leads(&self, _bucket: usize) -> bool {
        true
    }

    fn log(
        &self,
        _bucket: usize,
    ) -> Pin<Box<dyn Future<Output = Option<Rc<dyn Deref<Target = Log>>>>>> {
        let log = self.log.clone();
        Box::pin(async move { Some(Rc::new(log) as Rc<dyn Deref<Target = Log>>) })
    }

    fn append(
        &self,
        _bucket: usize,
        term: u64,
        batch: Bytes,
    ) -> Pin<Box<dyn Future<Output = Result<(), i16>>>> {
        let log = self.log.clone();
        let current = self.term.get();
        Box::pin(async move {
            if term != current {
                return Err(errors::NOT_LEADER_OR_FOLLOWER);
            }
            log.append(batch)
                .await
                .map_err(|_| errors::KAFKA_STORAGE_ERROR)?;
            log.flush().await.map_err(|_| errors::KAFKA_STORAGE_ERROR)?;
            Ok(())
        })
    }
}

impl FakeReplica {
    /// A partition at term 1 over a fresh log in `dir`.
    pub async fn open(dir: &std::path::Path, min_bytes: u64) -> Rc<FakeReplica> {
        let cache = BatchCache::new(8 << 20);
        let log = Log::open_with_cache(dir.join("p"), internal_log_config(), cache)
            .await
            .expect("open");
        Rc::new(FakeReplica {
            log: Rc::new(log),
            term: Cell::new(1),
            min_bytes,
        })
    }
}
