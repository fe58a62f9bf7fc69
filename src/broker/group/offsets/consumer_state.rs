//! A consumer-protocol group's state (KIP-848, `group::consumer`) as a record of its bucket's
//! offsets log, so that a restarted broker, or a new coordinator after a failover, resumes
//! the group with its epochs and assignments instead of making every member join again.
//! The value is opaque here (`group::consumer::stored` encodes it); record layout:
//!
//! ```text
//! kind 5, consumer group: key   kind u8 | group len u16 | group
//!                         value the group's state (no value = tombstone: the group emptied)
//! ```
//!
//! Brokers from before this record skip it at replay (an unknown kind); so does the Kafka view
//! of the topic (`kafka_format.rs`).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use weir_storage::batch::RecordBatchBuilder;

use super::{get_str, now_ms, BucketError, OffsetStore};

pub(crate) const KIND_CONSUMER_GROUP: u8 = 5;

pub(crate) fn encode_key(group: &str) -> Bytes {
    let mut k = BytesMut::with_capacity(3 + group.len());
    k.put_u8(KIND_CONSUMER_GROUP);
    k.put_u16(group.len() as u16);
    k.put_slice(group.as_bytes());
    k.freeze()
}

pub(crate) fn decode_key(mut k: &[u8]) -> Option<String> {
    if k.remaining() < 1 || k.get_u8() != KIND_CONSUMER_GROUP {
        return None;
    }
    let group = get_str(&mut k)?;
    k.is_empty().then_some(group)
}

impl OffsetStore {
    /// Durably stores a consumer-protocol group's state (`None`: removes it). Answers once
    /// the record is flushed (standalone) or committed by a majority of the bucket's replicas.
    pub async fn store_consumer_group(
        &self,
        group: &str,
        state: Option<Bytes>,
    ) -> Result<(), BucketError> {
        let batch = RecordBatchBuilder::new(now_ms())
            .record(Some(&encode_key(group)), state.as_deref(), &[])
            .build();
        self.append_applied(batch, |s| {
            let mut states = s.consumer_states.borrow_mut();
            match state {
                Some(st) => states.insert(group.to_owned(), st),
                None => states.remove(group),
            };
        })
        .await
    }

    /// The stored state of every consumer-protocol group of this bucket.
    pub fn consumer_group_states(&self) -> Vec<(String, Bytes)> {
        self.consumer_states
            .borrow()
            .iter()
            .map(|(g, s)| (g.clone(), s.clone()))
            .collect()
    }
}
