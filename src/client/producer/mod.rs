//! The producer: per-partition batching by size and linger, a sender task that ships
//! ready batches to partition leaders with several Produce requests in flight per
//! connection, bounded retries of retriable errors, and per-record delivery results.
//!
//! Batches are encoded once, by `weir_storage::batch::RecordBatchBuilder` (uncompressed
//! record-batch v2 with its CRC-32C), and go to the wire as they are.

mod sender;

use sender::*;

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use glommio::sync::{Semaphore, StaticPermit};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use weir_storage::batch::RecordBatchBuilder;

use super::cluster::{Cluster, PRODUCE_VERSION_MAX};
use super::connection::{Connection, ResponseFuture};
use super::error::{Error, Result};
use super::partitioner::{Partitioner, PartitionerState};
use super::sync::{promise, Notify, Resolver, Waiter};
use super::TopicPartition;

/// Acknowledgement level of Produce requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// acks=0: no response; offsets are unknown (-1).
    None,
    /// acks=1: the leader appended the batch.
    Leader,
    /// acks=-1: the batch is durable on every in-sync replica.
    All,
}

impl Acks {
    pub fn code(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }

    pub fn from_code(code: i16) -> Option<Acks> {
        match code {
            0 => Some(Acks::None),
            1 => Some(Acks::Leader),
            -1 => Some(Acks::All),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// A partition's batch is sent once it holds this many bytes of records.
    pub batch_size: usize,
    /// ...or once its first record is this old.
    pub linger: Duration,
    pub acks: Acks,
    pub partitioner: Partitioner,
    /// Produce requests outstanding per broker connection.
    pub max_in_flight: usize,
    /// How many times a batch that failed with a retriable error is sent again.
    pub retries: u32,
    pub retry_backoff: Duration,
    pub request_timeout: Duration,
    /// `send` waits while this many bytes of records are unacknowledged.
    pub buffer_memory: usize,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            batch_size: 16 << 10,
            linger: Duration::from_millis(1),
            acks: Acks::Leader,
            partitioner: Partitioner::KeyHash,
            max_in_flight: 5,
            retries: 3,
            retry_backoff: Duration::from_millis(100),
            request_timeout: Duration::from_secs(30),
            buffer_memory: 32 << 20,
        }
    }
}

/// One record to send. `partition: None` lets the partitioner choose.
#[derive(Debug, Clone, Copy)]
pub struct ProducerRecord<'a> {
    pub topic: &'a str,
    pub partition: Option<i32>,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: &'a [(&'a str, &'a [u8])],
    /// Milliseconds since the epoch; `None`: now.
    pub timestamp: Option<i64>,
}

impl<'a> ProducerRecord<'a> {
    pub fn new(topic: &'a str, value: &'a [u8]) -> Self {
        ProducerRecord {
            topic,
            partition: None,
            key: None,
            value: Some(value),
            headers: &[],
            timestamp: None,
        }
    }

    pub fn key(mut self, key: &'a [u8]) -> Self {
        self.key = Some(key);
        self
    }

    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = Some(partition);
        self
    }

    pub fn headers(mut self, headers: &'a [(&'a str, &'a [u8])]) -> Self {
        self.headers = headers;
        self
    }

    pub fn timestamp(mut self, ms: i64) -> Self {
        self.timestamp = Some(ms);
        self
    }

    fn size_estimate(&self) -> usize {
        let h: usize = self
            .headers
            .iter()
            .map(|(k, v)| k.len() + v.len() + 10)
            .sum();
        self.key.map_or(0, <[u8]>::len) + self.value.map_or(0, <[u8]>::len) + h + 21
    }
}

/// Where a record landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    pub partition: i32,
    /// -1 with acks=0.
    pub offset: i64,
}

/// The outcome of one `send`: await it for the record's offset or its error.
pub struct Delivery {
    waiter: Waiter<Result<i64>>,
    partition: i32,
    index: i32,
}

impl Delivery {
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The result, if the batch is already acknowledged or failed.
    pub fn try_result(&self) -> Option<Result<RecordMetadata>> {
        self.waiter.peek().map(|r| self.finish(r))
    }

    fn finish(&self, r: Result<i64>) -> Result<RecordMetadata> {
        r.map(|base| RecordMetadata {
            partition: self.partition,
            offset: if base < 0 {
                -1
            } else {
                base + i64::from(self.index)
            },
        })
    }
}

impl Future for Delivery {
    type Output = Result<RecordMetadata>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match Pin::new(&mut self.waiter).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => Poll::Ready(Err(Error::Closed)),
            Poll::Ready(Some(r)) => Poll::Ready(self.finish(r)),
        }
    }
}

struct OpenBatch {
    builder: Option<RecordBatchBuilder>,
    bytes: usize,
    created: Instant,
    done: Resolver<Result<i64>>,
    waiter: Waiter<Result<i64>>,
}

struct ReadyBatch {
    tp: TopicPartition,
    data: Bytes,
    /// Bytes counted against `buffer_memory`.
    bytes: usize,
    attempts: u32,
    not_before: Instant,
    done: Resolver<Result<i64>>,
}

struct Inner {
    cluster: Rc<Cluster>,
    config: ProducerConfig,
    partitioner: PartitionerState,
    open: RefCell<HashMap<String, Vec<Option<OpenBatch>>>>,
    ready: RefCell<VecDeque<ReadyBatch>>,
    in_flight: RefCell<HashMap<i32, Rc<Semaphore>>>,
    /// Wakes the sender task: a batch is ready, a flush started, or we are closing.
    wake: Notify,
    /// Wakes `send` callers waiting for buffer space.
    space: Notify,
    /// Wakes `flush` when batches resolve.
    progress: Notify,
    buffered_bytes: Cell<usize>,
    unresolved_batches: Cell<usize>,
    flushing: Cell<usize>,
    closed: Cell<bool>,
    sender_done: Notify,
    sender_running: Cell<bool>,
}

/// A producer bound to the current glommio executor.
pub struct Producer {
    inner: Rc<Inner>,
}

impl Producer {
    /// Creates a producer and starts its sender task.
    pub fn new(cluster: Rc<Cluster>, config: ProducerConfig) -> Producer {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        let inner = Rc::new(Inner {
            partitioner: PartitionerState::new(config.partitioner, seed),
            cluster,
            config,
            open: RefCell::new(HashMap::new()),
            ready: RefCell::new(VecDeque::new()),
            in_flight: RefCell::new(HashMap::new()),
            wake: Notify::default(),
            space: Notify::default(),
            progress: Notify::default(),
            buffered_bytes: Cell::new(0),
            unresolved_batches: Cell::new(0),
            flushing: Cell::new(0),
            closed: Cell::new(false),
            sender_done: Notify::default(),
            sender_running: Cell::new(true),
        });
        glommio::spawn_local(sender_loop(inner.clone())).detach();
        Producer { inner }
    }

    pub fn config(&self) -> &ProducerConfig {
        &self.inner.config
    }

    /// Adds a record to its partition's batch. Fails at once on errors known before
    /// sending (unknown topic, bad partition, closed producer); the returned [`Delivery`]
    /// gives the broker's answer. Waits while `buffer_memory` is exhausted.
    pub async fn send(&self, record: ProducerRecord<'_>) -> Result<Delivery> {
        let inner = &self.inner;
        if inner.closed.get() {
            return Err(Error::Closed);
        }
        let size = record.size_estimate();
        while inner.buffered_bytes.get() > 0
            && inner.buffered_bytes.get() + size > inner.config.buffer_memory
        {
            inner.space.wait().await;
        }
        let num_partitions = inner.cluster.partitions(record.topic).await?;
        let partition = match record.partition {
            Some(p) if p >= 0 && (p as usize) < num_partitions => p,
            Some(p) => {
                return Err(Error::Invalid(format!(
                    "partition {p} of topic {} (it has {num_partitions})",
                    record.topic
                )))
            }
            None => inner.partitioner.choose(record.key, num_partitions),
        };
        let timestamp = record.timestamp.unwrap_or_else(now_ms);
        let mut open = inner.open.borrow_mut();
        let slots = match open.get_mut(record.topic) {
            Some(s) => s,
            None => open.entry(record.topic.to_string()).or_default(),
        };
        if slots.len() < num_partitions {
            slots.resize_with(num_partitions, || None);
        }
        let slot = &mut slots[partition as usize];
        if slot
            .as_ref()
            .is_some_and(|b| b.bytes + size > inner.config.batch_size)
        {
            let full = slot.take().expect("checked above");
            inner.seal(record.topic, partition, full);
        }
        let new_batch = slot.is_none();
        let batch = slot.get_or_insert_with(|| {
            let (done, waiter) = promise();
            inner
                .unresolved_batches
                .set(inner.unresolved_batches.get() + 1);
            OpenBatch {
                builder: Some(RecordBatchBuilder::new(timestamp)),
                bytes: 0,
                created: Instant::now(),
                done,
                waiter,
            }
        });
        let builder = batch.builder.take().expect("open batches hold a builder");
        let index = builder.len();
        batch.builder =
            Some(builder.record_at(timestamp, record.key, record.value, record.headers));
        batch.bytes += size;
        inner.buffered_bytes.set(inner.buffered_bytes.get() + size);
        let delivery = Delivery {
            waiter: batch.waiter.clone(),
            partition,
            index,
        };
        if batch.bytes >= inner.config.batch_size {
            let full = slot.take().expect("just filled");
            inner.seal(record.topic, partition, full);
        } else if new_batch || inner.config.linger.is_zero() {
            // A new batch gives the sender a linger deadline to wait for; with no linger
            // it takes whatever is open on its next turn.
            inner.wake.notify();
        }
        Ok(delivery)
    }

    /// Sends everything buffered and waits until every batch is acknowledged or failed.
    pub async fn flush(&self) {
        let inner = &self.inner;
        inner.flushing.set(inner.flushing.get() + 1);
        inner.wake.notify();
        while inner.unresolved_batches.get() > 0 {
            inner.progress.wait().await;
        }
        inner.flushing.set(inner.flushing.get() - 1);
    }

    /// Flushes, then stops the sender task.
    pub async fn close(self) {
        self.flush().await;
        self.inner.closed.set(true);
        self.inner.wake.notify();
        while self.inner.sender_running.get() {
            self.inner.sender_done.wait().await;
        }
    }

    /// Batches not yet acknowledged or failed.
    pub fn unresolved_batches(&self) -> usize {
        self.inner.unresolved_batches.get()
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.inner.closed.set(true);
        self.inner.wake.notify();
    }
}
