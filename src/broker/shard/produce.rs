//! Produce on the owning core: each partition writes its record set (`Partition::produce`:
//! Kafka's log validator — framing, CRC, every record, timestamps, keys on compacted topics,
//! bounded decompression, idempotence and sequence checks, all in the engine — then the append,
//! or the proposal on a replicated partition), and the answer is made here; and the idempotent
//! producers a partition remembers (DescribeProducers).

use std::rc::Rc;

use tracing::debug;

use super::partition::Refused;
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
        match part.produce(&self.replica_host, acks, p.records).await {
            Ok(a) => ProduceResult {
                base_offset: a.base_offset as i64,
                log_start_offset: a.log_start_offset as i64,
                log_append_time_ms: a.log_append_time_ms,
                ..ProduceResult::error(errors::NONE)
            },
            Err(Refused::Invalid(e)) => self.refused(&p.topic, p.partition, &e),
            Err(Refused::NotLeader(leader)) => ProduceResult {
                raft_leader: leader,
                ..fail(errors::NOT_LEADER_OR_FOLLOWER)
            },
            Err(Refused::Code(code)) => fail(code),
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
