//! Produce on the owning core: check each partition's record set as Kafka's log validator
//! does and append it (`Log::append_produced`: framing, CRC, every record, timestamps, keys on
//! compacted topics, bounded decompression, idempotence and sequence checks — all in the
//! engine), or propose it on a replicated partition; flush for acks=all, count for the
//! metrics; and the idempotent producers a partition remembers (DescribeProducers).

use std::rc::Rc;

use tracing::debug;
use weir_storage::batch::Origin;

use super::*;
use crate::broker::errors::{self, storage_error_code};

impl Shard {
    // ---- Produce ----

    pub async fn produce_local(
        self: &Rc<Self>,
        acks: i16,
        parts: Vec<ProducePart>,
    ) -> Vec<ProduceResult> {
        // Every append starts (validates and queues on its log's append lock) in this
        // function's first poll, in request order, whatever the number of partitions: a
        // connection's pipelined requests then append in the order they arrived. (Spawning
        // a task per partition here let a later single-partition request overtake them.)
        // The appends of different partitions still run, and flush, concurrently.
        crate::broker::sync::join_all(
            parts
                .into_iter()
                .map(|p| self.produce_one(acks, p))
                .collect(),
        )
        .await
    }

    pub(super) async fn produce_one(self: &Rc<Self>, acks: i16, p: ProducePart) -> ProduceResult {
        let fail = |error| {
            self.metrics
                .error(kafka_protocol::messages::ApiKey::Produce, error);
            ProduceResult::error(error)
        };
        let Some(part) = self.partition(&p.topic, p.partition) else {
            return fail(errors::UNKNOWN_TOPIC_OR_PARTITION);
        };
        let bytes = p.records.len() as u64;
        if let Some(g) = self.replica(&p.topic, p.partition) {
            // The place in line is taken now, in this call's first poll: the check below may
            // yield, and a connection's pipelined requests must still be proposed in order.
            let order = g.clone();
            let turn = order.check_order.lock().await;
            let valid = match part.log.validate(p.records, Origin::Client).await {
                Ok(v) => v,
                Err(e) => return self.refused(&p.topic, p.partition, &e),
            };
            let stamped = valid.log_append_time_ms();
            let group = g.clone();
            return match g.produce(self, acks, valid, turn).await {
                Ok((base, last)) => {
                    part.bytes_in.set(part.bytes_in.get() + bytes);
                    part.records_in.set(part.records_in.get() + last - base + 1);
                    ProduceResult {
                        base_offset: base as i64,
                        log_start_offset: part.log.watermarks().log_start_offset as i64,
                        log_append_time_ms: stamped,
                        ..ProduceResult::error(errors::NONE)
                    }
                }
                Err(code) if code == errors::NOT_LEADER_OR_FOLLOWER => ProduceResult {
                    raft_leader: Some((group.leader.get(), group.term())),
                    ..fail(code)
                },
                Err(code) => fail(code),
            };
        }
        if !self.answers_as_leader(&p.topic, p.partition) {
            // Replicated, but its Raft group is not open yet (a broker starting up).
            return fail(errors::NOT_LEADER_OR_FOLLOWER);
        }
        // Checked (`Log::append_produced`: Kafka's log validator, in one pass) and appended.
        match part.log.append_produced(p.records).await {
            Ok(info) => {
                if info.duplicate {
                    // An idempotent producer's retry: answered with the original offsets.
                    debug!(topic = %p.topic, partition = p.partition, base_offset = info.base_offset, "duplicate batch not written again");
                } else {
                    part.bytes_in.set(part.bytes_in.get() + bytes);
                    part.records_in
                        .set(part.records_in.get() + info.last_offset - info.base_offset + 1);
                }
                if acks == -1 {
                    if let Err(e) = part.log.flush().await {
                        part.log_io_error(&p.topic, p.partition, "flush", &e);
                        return fail(storage_error_code(&e));
                    }
                }
                ProduceResult {
                    base_offset: info.base_offset as i64,
                    log_start_offset: info.log_start_offset as i64,
                    log_append_time_ms: info.log_append_time_ms,
                    ..ProduceResult::error(errors::NONE)
                }
            }
            Err(e) if e.is_storage_error() => {
                part.log_io_error(&p.topic, p.partition, "append", &e);
                fail(storage_error_code(&e))
            }
            Err(e) => self.refused(&p.topic, p.partition, &e),
        }
    }

    /// The answer to a record set the log refused: its Kafka error code, and for a record set
    /// the validator refused, why and which records (KIP-467).
    fn refused(&self, topic: &str, partition: i32, e: &weir_storage::Error) -> ProduceResult {
        let code = storage_error_code(e);
        self.metrics
            .error(kafka_protocol::messages::ApiKey::Produce, code);
        debug!(topic = %topic, partition, error = %e, "produce refused");
        let mut r = ProduceResult::error(code);
        match e {
            weir_storage::Error::InvalidRecords {
                message,
                record_errors,
                ..
            } => {
                r.error_message = Some(message.clone());
                r.record_errors = record_errors.clone();
            }
            weir_storage::Error::InvalidBatch(_)
            | weir_storage::Error::BatchTooLarge { .. }
            | weir_storage::Error::UploadBacklog { .. } => {
                r.error_message = Some(e.to_string());
            }
            _ => {}
        }
        r
    }

    // ---- DescribeProducers ----

    /// The idempotent producers each partition's log remembers. The last timestamp is the
    /// max timestamp of the producer's last batch, read back from the log (-1 if retention
    /// or DeleteRecords removed it).
    pub(super) async fn describe_producers_local(
        &self,
        parts: Vec<(String, i32)>,
    ) -> Vec<Result<Vec<ProducerInfo>, i16>> {
        let mut out = Vec::with_capacity(parts.len());
        for (topic, partition) in parts {
            let Some(part) = self.partition(&topic, partition) else {
                out.push(Err(errors::UNKNOWN_TOPIC_OR_PARTITION));
                continue;
            };
            let mut producers = Vec::new();
            for a in part.log.active_producers() {
                let last_timestamp = match part.log.read(a.last_batch_base_offset, 1).await {
                    Ok(r) => r
                        .batches()
                        .find(|(h, _)| h.base_offset.get() as u64 == a.last_batch_base_offset)
                        .map(|(h, _)| h.max_timestamp.get())
                        .unwrap_or(-1),
                    Err(_) => -1,
                };
                producers.push(ProducerInfo {
                    producer_id: a.producer_id,
                    epoch: a.epoch,
                    last_sequence: a.last_sequence,
                    txn_start_offset: a.txn_start_offset.map_or(-1, |o| o as i64),
                    last_timestamp,
                });
            }
            out.push(Ok(producers));
        }
        out
    }
}
