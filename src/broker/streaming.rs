//! The broker side of streaming fetch (`weir::protocol::stream_fetch`, docs/streaming-fetch.md).
//!
//! A connection's read loop hands StreamFetch requests to its `ConnStreams` instead of
//! `kafka::process`. Open starts a task on the connection's core that, while the stream
//! lives, does what a long-poll Fetch does (`kafka::gather_fetch`: read from the owning
//! cores, parked in their wheels until data is appended) and sends what it gets to the
//! connection's writer as a push, then parks again. Pushes go through a bounded side
//! channel of the writer, so ordinary responses on the same connection are not held
//! behind a stream, and a stream never has more than its credit of records in flight: a
//! consumer that stops reading cannot make the broker buffer more than that.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use glommio::channels::local_channel::LocalSender;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use tracing::debug;
use weir::protocol::stream_fetch::{
    EndReason, PushPartition, StreamMsg, StreamOp, StreamPartition,
};

use crate::broker::errors;
use crate::broker::kafka::gather_fetch;
use crate::broker::shard::Shard;

/// Longest one park of a stream: how soon a cancel or a deadline is noticed while no data
/// arrives.
const PARK: Duration = Duration::from_millis(250);
/// Streams one connection may have open.
const MAX_STREAMS_PER_CONNECTION: usize = 64;

/// A frame for the connection's writer: the pieces of one response.
pub type Push = Vec<Bytes>;

struct Stream {
    credit: Cell<i64>,
    cancelled: Cell<bool>,
    /// Credit added or cancelled: wakes a stream waiting for room.
    changed: crate::broker::sync::Notify,
}

/// The streams of one connection.
pub struct ConnStreams {
    push: Rc<LocalSender<Push>>,
    streams: Rc<RefCell<HashMap<i32, Rc<Stream>>>>,
}

impl ConnStreams {
    pub fn new(push: LocalSender<Push>) -> ConnStreams {
        ConnStreams {
            push: Rc::new(push),
            streams: Rc::default(),
        }
    }

    /// Applies one StreamFetch request (in arrival order).
    pub async fn handle(
        &self,
        shard: &Rc<Shard>,
        correlation_id: i32,
        op: StreamOp,
        session: &weir::acl::Session,
    ) {
        match op {
            StreamOp::Open {
                stream_id,
                credit,
                max_push_bytes,
                deadline_ms,
                partitions,
            } => {
                let bad = errors::INVALID_REQUEST;
                let refuse = if self.streams.borrow().contains_key(&stream_id) {
                    Some((bad, "stream id in use"))
                } else if self.streams.borrow().len() >= MAX_STREAMS_PER_CONNECTION {
                    Some((bad, "too many streams on this connection"))
                } else if credit <= 0 || max_push_bytes <= 0 || deadline_ms <= 0 {
                    Some((bad, "credit, max push bytes and deadline must be positive"))
                } else if partitions.is_empty() || partitions.iter().any(|p| p.offset < 0) {
                    Some((bad, "no partitions, or a negative offset"))
                } else if partitions.iter().any(|p| {
                    !crate::broker::kafka::allowed(
                        shard,
                        session,
                        weir::acl::Operation::Read,
                        weir::acl::ResourceType::Topic,
                        &p.topic,
                    )
                }) {
                    Some((
                        errors::TOPIC_AUTHORIZATION_FAILED,
                        "not authorized to read a topic of the stream (ACLs)",
                    ))
                } else {
                    None
                };
                if let Some((error, why)) = refuse {
                    debug!(stream_id, why, "stream refused");
                    let ack = StreamMsg::Ack { stream_id, error };
                    let _ = self.push.send(ack.response_pieces(correlation_id)).await;
                    return;
                }
                let st = Rc::new(Stream {
                    credit: Cell::new(i64::from(credit)),
                    cancelled: Cell::new(false),
                    changed: Default::default(),
                });
                self.streams.borrow_mut().insert(stream_id, st.clone());
                let ack = StreamMsg::Ack {
                    stream_id,
                    error: errors::NONE,
                };
                if self
                    .push
                    .send(ack.response_pieces(correlation_id))
                    .await
                    .is_err()
                {
                    self.streams.borrow_mut().remove(&stream_id);
                    return;
                }
                let task = StreamTask {
                    shard: shard.clone(),
                    push: self.push.clone(),
                    streams: self.streams.clone(),
                    st,
                    stream_id,
                    correlation_id,
                    max_push_bytes,
                    deadline: Instant::now() + Duration::from_millis(deadline_ms as u64),
                    partitions,
                };
                glommio::spawn_local(task.run()).detach();
            }
            StreamOp::Credit { stream_id, add } => {
                if let Some(st) = self.streams.borrow().get(&stream_id) {
                    if add > 0 {
                        st.credit.set(st.credit.get() + i64::from(add));
                        st.changed.notify();
                    }
                }
            }
            StreamOp::Cancel { stream_id } => {
                if let Some(st) = self.streams.borrow().get(&stream_id) {
                    st.cancelled.set(true);
                    st.changed.notify();
                }
            }
        }
    }

    /// The connection is closing: every stream stops.
    pub fn cancel_all(&self) {
        for st in self.streams.borrow().values() {
            st.cancelled.set(true);
            st.changed.notify();
        }
    }
}

struct StreamTask {
    shard: Rc<Shard>,
    push: Rc<LocalSender<Push>>,
    streams: Rc<RefCell<HashMap<i32, Rc<Stream>>>>,
    st: Rc<Stream>,
    stream_id: i32,
    correlation_id: i32,
    max_push_bytes: i32,
    deadline: Instant,
    partitions: Vec<StreamPartition>,
}

impl StreamTask {
    fn request(&self, max_bytes: i32, wait: Duration) -> FetchRequest {
        let mut topics: Vec<FetchTopic> = Vec::new();
        for p in &self.partitions {
            let fp = FetchPartition::default()
                .with_partition(p.partition)
                .with_fetch_offset(p.offset)
                .with_partition_max_bytes(max_bytes);
            match topics.iter_mut().find(|t| t.topic.0.as_str() == p.topic) {
                Some(t) => t.partitions.push(fp),
                None => topics.push(
                    FetchTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(p.topic.clone())))
                        .with_partitions(vec![fp]),
                ),
            }
        }
        FetchRequest::default()
            .with_max_wait_ms(wait.as_millis() as i32)
            .with_min_bytes(1)
            .with_max_bytes(max_bytes)
            .with_topics(topics)
    }

    async fn run(mut self) {
        let mut seq = 0i32;
        let (reason, error) = loop {
            if self.st.cancelled.get() {
                break (EndReason::Cancelled, errors::NONE);
            }
            let now = Instant::now();
            if now >= self.deadline {
                break (EndReason::Deadline, errors::NONE);
            }
            if self.shard.shutdown.is_fired() {
                break (EndReason::Error, errors::NONE);
            }
            let credit = self.st.credit.get();
            if credit <= 0 {
                break (EndReason::CreditSpent, errors::NONE);
            }
            let max = credit.min(i64::from(self.max_push_bytes)) as i32;
            let wait = (self.deadline - now).min(PARK);
            let replies =
                gather_fetch(&self.shard, &self.request(max, wait), false, None, None).await;
            let mut pushed = Vec::new();
            let mut total = 0usize;
            let mut failed = None;
            // Applied only once the push is sent: (partition index, next offset or None to
            // take the partition out of the stream).
            let mut moves: Vec<(usize, Option<i64>)> = Vec::new();
            for reply in replies {
                for (partition, r) in reply.partitions {
                    let Some(pos) = self
                        .partitions
                        .iter()
                        .position(|p| p.topic == reply.topic && p.partition == partition)
                    else {
                        continue;
                    };
                    if r.error != errors::NONE {
                        // This partition leaves the stream; the push says why.
                        failed = Some(r.error);
                        moves.push((pos, None));
                        pushed.push(PushPartition {
                            topic: reply.topic.clone(),
                            partition,
                            error: r.error,
                            high_watermark: r.high_watermark,
                            records: Bytes::new(),
                        });
                        continue;
                    }
                    if r.chunks.is_empty() {
                        continue;
                    }
                    let records = concat(r.chunks);
                    let Some(next) = next_offset(&records) else {
                        continue;
                    };
                    total += records.len();
                    moves.push((pos, Some(next.max(self.partitions[pos].offset))));
                    pushed.push(PushPartition {
                        topic: reply.topic.clone(),
                        partition,
                        error: errors::NONE,
                        high_watermark: r.high_watermark,
                        records,
                    });
                }
            }
            if pushed.is_empty() {
                continue;
            }
            // Credit may have been added while the fetch was parked.
            let credit = self.st.credit.get();
            if total as i64 > credit {
                if seq == 0 {
                    // The first batch is larger than the whole credit given at open:
                    // MESSAGE_TOO_LARGE tells the client to open with more.
                    break (EndReason::CreditSpent, errors::MESSAGE_TOO_LARGE);
                }
                // The next batch does not fit in what is left: wait for the client to
                // add credit (or cancel, or the deadline).
                debug!(
                    stream_id = self.stream_id,
                    credit,
                    next = total,
                    "stream waits for credit"
                );
                let left = self.deadline.saturating_duration_since(Instant::now());
                futures_lite::future::or(self.st.changed.notified(), async {
                    glommio::timer::sleep(left).await;
                })
                .await;
                continue;
            }
            self.st.credit.set(credit - total as i64);
            for &(pos, next) in &moves {
                if let Some(next) = next {
                    self.partitions[pos].offset = next;
                }
            }
            let mut gone: Vec<usize> = moves
                .iter()
                .filter(|(_, n)| n.is_none())
                .map(|(p, _)| *p)
                .collect();
            gone.sort_unstable_by(|a, b| b.cmp(a));
            for pos in gone {
                self.partitions.remove(pos);
            }
            seq += 1;
            let msg = StreamMsg::Data {
                stream_id: self.stream_id,
                seq,
                credit_left: (credit - total as i64).min(i64::from(i32::MAX)) as i32,
                partitions: pushed,
            };
            if self
                .push
                .send(msg.response_pieces(self.correlation_id))
                .await
                .is_err()
            {
                // The connection is gone.
                self.streams.borrow_mut().remove(&self.stream_id);
                return;
            }
            if self.partitions.is_empty() {
                break (EndReason::Error, failed.unwrap_or(errors::NONE));
            }
        };
        self.streams.borrow_mut().remove(&self.stream_id);
        debug!(
            stream_id = self.stream_id,
            ?reason,
            pushes = seq,
            "stream ended"
        );
        let end = StreamMsg::End {
            stream_id: self.stream_id,
            seq: seq + 1,
            reason,
            error,
        };
        let _ = self
            .push
            .send(end.response_pieces(self.correlation_id))
            .await;
    }
}

fn concat(chunks: Vec<Bytes>) -> Bytes {
    if chunks.len() == 1 {
        return chunks.into_iter().next().unwrap_or_default();
    }
    let mut b = BytesMut::with_capacity(chunks.iter().map(Bytes::len).sum());
    for c in chunks {
        b.extend_from_slice(&c);
    }
    b.freeze()
}

/// The offset after the last whole batch in `records`.
fn next_offset(records: &[u8]) -> Option<i64> {
    weir_storage::batch::Batches::new(records)
        .last()
        .map(|(h, _)| h.last_offset() + 1)
}
