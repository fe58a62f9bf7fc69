//! A bucket store's compaction: once its log holds much more than the live data, the live
//! records (offsets, classic group states, consumer-protocol group states) are rewritten at
//! its end and everything before them is dropped.

use bytes::Bytes;
use weir_storage::batch::RecordBatchBuilder;

use super::{
    consumer_state, encode_key, encode_value, group_state, now_ms, BucketError, Committed, Key,
    OffsetStore, StoredGroup,
};

impl OffsetStore {
    /// Rewrites the live offsets and drops what is below them, once the log holds much more
    /// than the live data (`Backing::rewrite`: in a cluster every replica of the bucket's
    /// partition cuts its log where the rewrite starts).
    pub(super) async fn maybe_compact(&self) -> Result<(), BucketError> {
        type Live = (
            Vec<(Key, Committed)>,
            Vec<(String, StoredGroup)>,
            Vec<(String, Bytes)>,
        );
        let (live, states, consumer_states): Live = {
            let e = self.entries.borrow();
            let since = self.bytes_since_compaction.get();
            let live_bytes: u64 = e
                .keys()
                .map(|(g, t, _)| 40 + (g.len() + t.len()) as u64)
                .sum::<u64>()
                + self
                    .group_states
                    .borrow()
                    .iter()
                    .map(|(g, s)| g.len() as u64 + s.approx_bytes())
                    .sum::<u64>()
                + self
                    .consumer_states
                    .borrow()
                    .iter()
                    .map(|(g, s)| (g.len() + s.len()) as u64)
                    .sum::<u64>();
            if since < self.backing.compaction_min_bytes(self.compact_min_bytes)
                || since < 4 * live_bytes
                || self.compacting.get()
                || self.unapplied.get() > 0
                // Offsets of open transactions are not rewritten: they are short-lived,
                // and the compaction waits for a moment without any.
                || !self.pending.borrow().is_empty()
            {
                return Ok(());
            }
            (
                e.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                self.group_states(),
                self.consumer_group_states(),
            )
        };
        let mut batches: Vec<Bytes> = live
            .chunks(500)
            .map(|chunk| {
                let mut b = RecordBatchBuilder::new(now_ms());
                for ((g, t, p), c) in chunk {
                    b = b.record(Some(&encode_key(g, t, *p)), Some(&encode_value(c)), &[]);
                }
                b.build()
            })
            .collect();
        // Each group's membership, latest only; deleted groups' are gone from the map.
        batches.extend(states.chunks(100).map(|chunk| {
            let mut b = RecordBatchBuilder::new(now_ms());
            for (g, s) in chunk {
                b = b.record(
                    Some(&group_state::encode_key(g)),
                    Some(&group_state::encode_value(s)),
                    &[],
                );
            }
            b.build()
        }));
        batches.extend(consumer_states.iter().map(|(g, s)| {
            RecordBatchBuilder::new(now_ms())
                .record(Some(&consumer_state::encode_key(g)), Some(s), &[])
                .build()
        }));
        let records = (live.len() + states.len() + consumer_states.len()) as u64;
        let written: u64 = batches.iter().map(|b| b.len() as u64).sum();
        // No await between taking the live offsets and appending them (`rewrite` proposes
        // or appends before it first waits): nothing applied in between is missed.
        self.compacting.set(true);
        let r = self.backing.rewrite(batches, records).await;
        self.compacting.set(false);
        r?;
        self.bytes_since_compaction.set(written);
        tracing::debug!(live = live.len(), groups = states.len(), term = ?self.term(), "offsets compacted");
        Ok(())
    }
}
