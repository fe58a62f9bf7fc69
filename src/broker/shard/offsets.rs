//! ListOffsets and DeleteRecords on the owning core.

use tracing::info;

use super::*;
use crate::broker::errors::{self, storage_error_code};

impl Shard {
    // ---- ListOffsets ----

    /// DeleteRecords on this core's partitions: moves each log start (durably) and deletes
    /// the segments wholly below it. Kafka's errors: an unknown partition, an offset past the
    /// high watermark (OFFSET_OUT_OF_RANGE).
    pub(super) async fn delete_records_local(&self, parts: Vec<DeletePart>) -> Vec<(i16, i64)> {
        let mut out = Vec::with_capacity(parts.len());
        for p in parts {
            let Some(part) = self.partition(&p.topic, p.partition) else {
                out.push((errors::UNKNOWN_TOPIC_OR_PARTITION, -1));
                continue;
            };
            if self.replica_group(&p.topic, p.partition).is_some() {
                // Not yet on a replicated partition: the Raft log's snapshot point would have
                // to move with the log start (docs/replication.md, "Step 3 as built").
                out.push((errors::POLICY_VIOLATION, -1));
                continue;
            }
            let wm = part.log.watermarks();
            let target = match p.offset {
                -1 => wm.high_watermark,
                o if o < 0 => {
                    out.push((errors::OFFSET_OUT_OF_RANGE, wm.log_start_offset as i64));
                    continue;
                }
                o => o as u64,
            };
            out.push(match part.log.set_log_start_offset(target).await {
                Ok(()) => {
                    info!(topic = %p.topic, partition = p.partition, offset = target, "records deleted");
                    (
                        errors::NONE,
                        part.log.watermarks().log_start_offset as i64,
                    )
                }
                Err(e) => (storage_error_code(&e), wm.log_start_offset as i64),
            });
        }
        out
    }

    pub(super) async fn list_offsets_local(&self, parts: Vec<ListPart>) -> Vec<ListResult> {
        let mut out = Vec::with_capacity(parts.len());
        for p in parts {
            let Some(part) = self.partition(&p.topic, p.partition) else {
                out.push(ListResult {
                    error: errors::UNKNOWN_TOPIC_OR_PARTITION,
                    offset: -1,
                    timestamp: -1,
                });
                continue;
            };
            let wm = part.log.watermarks();
            let r = match p.timestamp {
                -1 if p.committed => Ok((wm.last_stable_offset as i64, -1)),
                -1 => Ok((wm.high_watermark as i64, -1)),
                -2 => Ok((wm.log_start_offset as i64, -1)),
                // MAX_TIMESTAMP (ListOffsets v7, KIP-734): the record with the largest
                // timestamp; -1/-1 when the log holds none.
                -3 => match part.log.max_timestamp_offset().await {
                    Ok(Some((off, t))) => Ok((off as i64, t)),
                    Ok(None) => Ok((-1, -1)),
                    Err(e) => Err(e),
                },
                // EARLIEST_LOCAL (v8, KIP-405): every segment is local, so the log start.
                -4 => Ok((wm.log_start_offset as i64, -1)),
                // LATEST_TIERED (v9, KIP-1005): nothing is tiered; Kafka answers -1/-1 for a
                // log without remote storage.
                -5 => Ok((-1, -1)),
                ts if ts < 0 => Ok((wm.high_watermark as i64, -1)),
                ts => match part.log.offset_for_timestamp(ts).await {
                    Ok(Some((off, t))) => Ok((off as i64, t)),
                    Ok(None) => Ok((-1, -1)),
                    Err(e) => Err(e),
                },
            };
            out.push(match r {
                Ok((offset, timestamp)) => ListResult {
                    error: errors::NONE,
                    offset,
                    timestamp,
                },
                Err(e) => ListResult {
                    error: storage_error_code(&e),
                    offset: -1,
                    timestamp: -1,
                },
            });
        }
        out
    }
}
