//! weir's native Kafka-protocol client: producer and consumer on a glommio executor.
//!
//! Works against any broker that speaks the Kafka wire protocol (ApiVersions, Metadata,
//! Produce, Fetch, ListOffsets). Everything here is single-threaded: a [`Cluster`],
//! [`Producer`] or [`Consumer`] lives on the glommio executor that created it.
//!
//! The data path: [`Producer::send`] appends to a per-partition [`RecordBatchBuilder`]
//! (`weir_storage::batch`), the producer's sender task ships full or lingered batches over
//! a pipelined [`Connection`], and a per-connection reader task matches responses in order.
//! [`Consumer::poll`] keeps one fetch per broker on the wire and sends the next one before
//! it hands the current records to the application (pipelined fetch).
//!
//! [`RecordBatchBuilder`]: weir_storage::batch::RecordBatchBuilder

mod cluster;
mod connection;
mod consumer;
mod decompress;
mod error;
mod partitioner;
mod producer;
mod sync;

pub use cluster::{Cluster, ClusterConfig};
pub use connection::{
    decode_frame_header, encode_request_frame, Connection, ResponseFuture, MAX_FRAME_BYTES,
};
pub use consumer::{Consumer, ConsumerConfig, ConsumerRecord, FetchedBatch, OffsetReset};
pub use error::{Error, Result};
pub use partitioner::{murmur2, partition_for_key, Partitioner};
pub use producer::{Acks, Delivery, Producer, ProducerConfig, ProducerRecord, RecordMetadata};

/// A topic name and partition index.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl std::fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}
