//! The consumer: `assign` / `seek` / `position`, long-poll parameters, and pipelined fetch
//! (MISSION.md point 5): when a fetch response arrives, the next fetch for that broker is
//! written to the socket *before* the records are handed to the application, so the
//! broker is filling the next response while the application works on this one.
//!
//! A fetch in flight names the offsets it asked for; if the application seeks meanwhile,
//! the partition's data in that response is dropped on arrival, so a seek never yields
//! records from the old position.

mod stream;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use weir_storage::batch::{decode_records, BatchHeader, Batches, Record};

use super::cluster::{Cluster, FETCH_VERSION_MAX};
use super::connection::{Connection, ResponseFuture};
use super::error::{Error, Result};
use super::TopicPartition;

/// Where a partition with no position starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OffsetReset {
    #[default]
    Earliest,
    Latest,
}

#[derive(Debug, Clone)]
pub struct ConsumerConfig {
    /// Long poll: the broker holds a fetch up to this long waiting for `min_bytes`.
    pub max_wait: Duration,
    pub min_bytes: i32,
    /// Response size limit (the broker still returns at least one batch).
    pub max_bytes: i32,
    pub max_partition_bytes: i32,
    pub offset_reset: OffsetReset,
    /// 0 read_uncommitted, 1 read_committed.
    pub isolation_level: i8,
    /// Added to `max_wait` for the client-side deadline of a fetch.
    pub request_timeout: Duration,
    /// Use weir's streaming fetch (docs/streaming-fetch.md) when the broker offers it and
    /// every assigned partition has the same leader; pipelined long polls otherwise.
    pub streaming: bool,
    /// Streaming: record bytes the broker may push ahead of `poll` (the consumer's buffer).
    pub stream_credit: i32,
    /// Streaming: largest single push.
    pub stream_max_push_bytes: i32,
    /// Streaming: a stream ends after this long (a new one is opened on the next poll).
    pub stream_deadline: Duration,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        ConsumerConfig {
            max_wait: Duration::from_millis(500),
            min_bytes: 1,
            max_bytes: 50 << 20,
            max_partition_bytes: 8 << 20,
            offset_reset: OffsetReset::Earliest,
            isolation_level: 0,
            request_timeout: Duration::from_secs(30),
            streaming: true,
            stream_credit: 8 << 20,
            stream_max_push_bytes: 1 << 20,
            stream_deadline: Duration::from_secs(30),
        }
    }
}

/// One record batch as fetched, bytes untouched (compressed batches stay compressed).
#[derive(Debug, Clone)]
pub struct FetchedBatch {
    pub partition: TopicPartition,
    pub base_offset: i64,
    pub last_offset: i64,
    pub record_count: i32,
    /// 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
    pub compression: u8,
    /// Records before this offset were already consumed (the broker returns whole
    /// batches; the consumer's position may be inside this one).
    pub skip_before: i64,
    pub bytes: Bytes,
    pub high_watermark: i64,
}

impl FetchedBatch {
    /// The batch's records at or after `skip_before`, decompressing gzip, snappy, lz4 and
    /// zstd batches; an error for a corrupt batch.
    pub fn records(&self) -> Result<Vec<Record>> {
        let corrupt = |why: String| {
            Error::Invalid(format!(
                "{} batch at offset {}: {why}",
                self.partition, self.base_offset
            ))
        };
        let plain = if self.compression == 0 {
            self.bytes.clone()
        } else {
            super::decompress::decompress_batch(&self.bytes).map_err(corrupt)?
        };
        let mut recs =
            decode_records(&plain).ok_or_else(|| corrupt("malformed records".to_string()))?;
        recs.retain(|r| r.offset >= self.skip_before);
        Ok(recs)
    }
}

/// A decoded record with its partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    pub partition: TopicPartition,
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// An open streaming fetch.
struct ActiveStream {
    conn: Connection,
    stream_id: i32,
    rx: glommio::channels::local_channel::LocalReceiver<Bytes>,
    /// Bytes handed to the application and not yet given back as credit.
    drained: i64,
}

struct InFlight {
    node: i32,
    /// The offset each partition was fetched from.
    asked: HashMap<TopicPartition, i64>,
    response: ResponseFuture<FetchResponse>,
}

/// A consumer with statically assigned partitions, bound to the current glommio executor.
pub struct Consumer {
    cluster: Rc<Cluster>,
    config: ConsumerConfig,
    /// Assigned partitions and their positions (None: to be reset by policy).
    positions: BTreeMap<TopicPartition, Option<i64>>,
    high_watermarks: HashMap<TopicPartition, i64>,
    in_flight: Vec<InFlight>,
    fetches_sent: u64,
    stream: Option<ActiveStream>,
    /// Positions changed since the stream opened: it is replaced on the next poll.
    stream_stale: bool,
    next_stream_id: i32,
    pushes: u64,
}

impl Consumer {
    pub fn new(cluster: Rc<Cluster>, config: ConsumerConfig) -> Consumer {
        Consumer {
            cluster,
            config,
            positions: BTreeMap::new(),
            high_watermarks: HashMap::new(),
            in_flight: Vec::new(),
            fetches_sent: 0,
            stream: None,
            stream_stale: false,
            next_stream_id: 1,
            pushes: 0,
        }
    }

    /// Replaces the assignment. Partitions kept keep their positions.
    pub fn assign(&mut self, partitions: &[TopicPartition]) {
        let old = std::mem::take(&mut self.positions);
        for tp in partitions {
            let pos = old.get(tp).copied().flatten();
            self.positions.insert(tp.clone(), pos);
        }
        self.in_flight.clear();
        self.stream_stale = true;
    }

    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.positions.keys().cloned().collect()
    }

    /// Sets the next offset to fetch. A fetch already in flight for this partition is
    /// ignored when it arrives.
    pub fn seek(&mut self, tp: &TopicPartition, offset: i64) -> Result<()> {
        match self.positions.get_mut(tp) {
            Some(p) => {
                *p = Some(offset);
                self.stream_stale = true;
                Ok(())
            }
            None => Err(Error::Invalid(format!("{tp} is not assigned"))),
        }
    }

    pub async fn seek_to_beginning(&mut self, tp: &TopicPartition) -> Result<()> {
        let o = self.cluster.list_offset(tp, -2).await?;
        self.seek(tp, o)
    }

    pub async fn seek_to_end(&mut self, tp: &TopicPartition) -> Result<()> {
        let o = self.cluster.list_offset(tp, -1).await?;
        self.seek(tp, o)
    }

    /// The next offset to fetch, if known.
    pub fn position(&self, tp: &TopicPartition) -> Option<i64> {
        self.positions.get(tp).copied().flatten()
    }

    /// The high watermark seen in the last fetch of `tp`.
    pub fn high_watermark(&self, tp: &TopicPartition) -> Option<i64> {
        self.high_watermarks.get(tp).copied()
    }

    /// Requests written to fetch so far: Fetch requests, or stream Open/Credit/Cancel.
    pub fn fetches_sent(&self) -> u64 {
        self.fetches_sent
    }

    /// Streaming fetch pushes received so far (0 when streaming is not in use).
    pub fn pushes_received(&self) -> u64 {
        self.pushes
    }

    /// Whether the last poll was served by a streaming fetch.
    pub fn is_streaming(&self) -> bool {
        self.stream.is_some()
    }

    /// Fetches currently on the wire.
    pub fn fetches_in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Waits for the next fetch response and returns its batches (possibly none, when a
    /// long poll expired). Before returning, the next fetch is already on the wire.
    pub async fn poll_batches(&mut self) -> Result<Vec<FetchedBatch>> {
        self.resolve_positions().await?;
        if self.config.streaming {
            if let Some(r) = self.poll_stream().await {
                return r;
            }
        }
        self.fill_pipeline().await?;
        if self.in_flight.is_empty() {
            return Err(Error::Invalid("no partitions assigned".to_string()));
        }
        let timeout = self.config.max_wait + self.config.request_timeout;
        let (idx, res) = futures_lite::future::or(
            futures_lite::future::poll_fn(|cx| {
                for (i, f) in self.in_flight.iter_mut().enumerate() {
                    if let Poll::Ready(r) = Pin::new(&mut f.response).poll(cx) {
                        return Poll::Ready((i, r));
                    }
                }
                Poll::Pending
            }),
            async {
                glommio::timer::sleep(timeout).await;
                (usize::MAX, Err(Error::Timeout { op: "fetch" }))
            },
        )
        .await;
        if idx == usize::MAX {
            // Every outstanding fetch is suspect now; start over on the next poll.
            self.in_flight.clear();
            return res.map(|_| Vec::new());
        }
        let done = self.in_flight.swap_remove(idx);
        let batches = match res {
            Ok(resp) => self.take_response(&done, resp),
            Err(e) => {
                if e.invalidates_metadata() {
                    for tp in done.asked.keys() {
                        self.cluster.invalidate(&tp.topic);
                    }
                }
                Err(e)
            }
        };
        // Pipelining: the next fetch goes out before the application sees this data.
        let refill = self.fill_pipeline().await;
        let batches = batches?;
        refill?;
        Ok(batches)
    }

    /// Like [`Consumer::poll_batches`], decoding (and decompressing) records.
    pub async fn poll(&mut self) -> Result<Vec<ConsumerRecord>> {
        let batches = self.poll_batches().await?;
        let mut out = Vec::new();
        for b in batches {
            let recs = b.records()?;
            out.extend(recs.into_iter().map(|r| ConsumerRecord {
                partition: b.partition.clone(),
                offset: r.offset,
                timestamp: r.timestamp,
                key: r.key,
                value: r.value,
                headers: r.headers,
            }));
        }
        Ok(out)
    }

    async fn resolve_positions(&mut self) -> Result<()> {
        let missing: Vec<TopicPartition> = self
            .positions
            .iter()
            .filter(|(_, p)| p.is_none())
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in missing {
            let ts = match self.config.offset_reset {
                OffsetReset::Earliest => -2,
                OffsetReset::Latest => -1,
            };
            let o = self.cluster.list_offset(&tp, ts).await?;
            self.positions.insert(tp, Some(o));
        }
        Ok(())
    }

    /// Sends a fetch to every leader that has assigned partitions and none in flight.
    async fn fill_pipeline(&mut self) -> Result<()> {
        let mut by_node: BTreeMap<i32, Vec<(TopicPartition, i64)>> = BTreeMap::new();
        for (tp, pos) in &self.positions {
            let Some(pos) = *pos else { continue };
            let node = self.cluster.leader(tp).await?;
            if self.in_flight.iter().any(|f| f.node == node) {
                continue;
            }
            by_node.entry(node).or_default().push((tp.clone(), pos));
        }
        for (node, parts) in by_node {
            let conn = self.cluster.connection(node).await?;
            let version = conn.version::<FetchRequest>(FETCH_VERSION_MAX)?;
            let mut topics: Vec<FetchTopic> = Vec::new();
            for (tp, pos) in &parts {
                let fp = FetchPartition::default()
                    .with_partition(tp.partition)
                    .with_current_leader_epoch(-1)
                    .with_fetch_offset(*pos)
                    .with_last_fetched_epoch(-1)
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(self.config.max_partition_bytes);
                match topics.iter_mut().find(|t| t.topic.0.as_str() == tp.topic) {
                    Some(t) => t.partitions.push(fp),
                    None => topics.push(
                        FetchTopic::default()
                            .with_topic(TopicName(StrBytes::from_string(tp.topic.clone())))
                            .with_partitions(vec![fp]),
                    ),
                }
            }
            let req = FetchRequest::default()
                .with_replica_id((-1).into())
                .with_max_wait_ms(self.config.max_wait.as_millis().min(i32::MAX as u128) as i32)
                .with_min_bytes(self.config.min_bytes)
                .with_max_bytes(self.config.max_bytes)
                .with_isolation_level(self.config.isolation_level)
                .with_session_id(0)
                .with_session_epoch(-1)
                .with_topics(topics);
            let response = conn.send(&req, version).await?;
            self.fetches_sent += 1;
            self.in_flight.push(InFlight {
                node,
                asked: parts.into_iter().collect(),
                response,
            });
        }
        Ok(())
    }

    /// Takes the batches of a response for partitions whose position is still the
    /// offset fetched, advancing positions past them.
    fn take_response(&mut self, done: &InFlight, resp: FetchResponse) -> Result<Vec<FetchedBatch>> {
        Error::check(resp.error_code, || "Fetch".to_string())?;
        let mut out = Vec::new();
        let mut first_error = None;
        for t in resp.responses {
            for p in t.partitions {
                let tp = TopicPartition::new(t.topic.0.as_str(), p.partition_index);
                let Some(&asked) = done.asked.get(&tp) else {
                    continue;
                };
                let Some(Some(pos)) = self.positions.get(&tp).copied() else {
                    continue;
                };
                if pos != asked {
                    continue; // seeked while this fetch was in flight
                }
                if p.error_code != 0 {
                    let e = Error::Broker {
                        code: p.error_code,
                        context: format!("fetch {tp} at offset {asked}"),
                    };
                    if e.invalidates_metadata() {
                        self.cluster.invalidate(&tp.topic);
                    }
                    if p.error_code == ResponseError::OffsetOutOfRange.code() || !e.is_retriable() {
                        first_error.get_or_insert(e);
                    }
                    continue;
                }
                self.high_watermarks.insert(tp.clone(), p.high_watermark);
                let Some(records) = p.records else { continue };
                let mut next = pos;
                let mut offset_in_records = 0usize;
                for (header, _) in Batches::new(&records) {
                    let len = header.total_bytes();
                    let start = offset_in_records;
                    offset_in_records += len;
                    if header.last_offset() < next {
                        continue;
                    }
                    if header.is_control() {
                        next = header.last_offset() + 1;
                        continue;
                    }
                    out.push(fetched(
                        &tp,
                        header,
                        records.slice(start..start + len),
                        next,
                        p.high_watermark,
                    ));
                    next = header.last_offset() + 1;
                }
                self.positions.insert(tp, Some(next));
            }
        }
        match first_error {
            Some(e) if out.is_empty() => Err(e),
            _ => Ok(out),
        }
    }
}

fn fetched(
    tp: &TopicPartition,
    header: &BatchHeader,
    bytes: Bytes,
    skip_before: i64,
    high_watermark: i64,
) -> FetchedBatch {
    FetchedBatch {
        partition: tp.clone(),
        base_offset: header.base_offset.get(),
        last_offset: header.last_offset(),
        record_count: header.records_count.get(),
        compression: header.compression(),
        skip_before,
        bytes,
        high_watermark,
    }
}
