//! Produce on the owning core: append each partition's batches (CRC, idempotence and
//! sequence checks in the engine), flush for acks=all, count for the metrics; and the
//! idempotent producers a partition remembers (DescribeProducers).

use std::rc::Rc;

use tracing::debug;

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

    pub(super) async fn produce_one(&self, acks: i16, p: ProducePart) -> ProduceResult {
        let fail = |error| {
            self.metrics
                .error(kafka_protocol::messages::ApiKey::Produce, error);
            ProduceResult {
                error,
                base_offset: -1,
                log_start_offset: -1,
                record_errors: Vec::new(),
            }
        };
        let Some(part) = self.partition(&p.topic, p.partition) else {
            return fail(errors::UNKNOWN_TOPIC_OR_PARTITION);
        };
        if p.records.is_empty() {
            return fail(errors::CORRUPT_MESSAGE);
        }
        if has_control_batch(&p.records) {
            // Markers are the transaction coordinator's to write (Kafka: "clients are not
            // allowed to write control records").
            debug!(topic = %p.topic, partition = p.partition, "control batch from a client refused");
            return fail(errors::INVALID_RECORD);
        }
        if part.log.config().cleanup_compact {
            let keyless = super::cleaner::keyless_records(&p.records);
            if !keyless.is_empty() {
                debug!(topic = %p.topic, partition = p.partition, records = keyless.len(), "records without a key refused on a compacted topic");
                let mut r = fail(errors::INVALID_RECORD);
                r.record_errors = keyless
                    .into_iter()
                    .map(|i| {
                        (
                            i,
                            "Compacted topic cannot accept message without key".to_string(),
                        )
                    })
                    .collect();
                return r;
            }
        }
        let bytes = p.records.len() as u64;
        if let Some(g) = self.replica_group(&p.topic, p.partition) {
            return match self.produce_replicated(g, acks, p.records).await {
                Ok((base, last)) => {
                    part.bytes_in.set(part.bytes_in.get() + bytes);
                    part.records_in.set(part.records_in.get() + last - base + 1);
                    ProduceResult {
                        error: errors::NONE,
                        base_offset: base as i64,
                        log_start_offset: part.log.watermarks().log_start_offset as i64,
                        record_errors: Vec::new(),
                    }
                }
                Err(code) => fail(code),
            };
        }
        match part.log.append(p.records).await {
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
                    error: errors::NONE,
                    base_offset: info.base_offset as i64,
                    log_start_offset: info.log_start_offset as i64,
                    record_errors: Vec::new(),
                }
            }
            Err(e) => {
                if e.is_storage_error() {
                    part.log_io_error(&p.topic, p.partition, "append", &e);
                } else {
                    debug!(topic = %p.topic, partition = p.partition, error = %e, "append refused");
                }
                fail(storage_error_code(&e))
            }
        }
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

/// Whether a record set holds a control batch (its framing is checked later, by the log).
fn has_control_batch(records: &[u8]) -> bool {
    let mut at = 0;
    while let Some(h) = weir_storage::batch::BatchHeader::parse(&records[at..]) {
        if h.is_control() {
            return true;
        }
        let n = h.total_bytes();
        if n == 0 || at + n >= records.len() {
            return false;
        }
        at += n;
    }
    false
}
