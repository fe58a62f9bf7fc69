//! ListOffsets, OffsetForLeaderEpoch and DeleteRecords on the owning core.

use std::rc::Rc;

use super::*;
use crate::broker::errors::{self, storage_error_code};
use crate::broker::replica::Replica;

impl Shard {
    // ---- ListOffsets ----

    /// DeleteRecords on this core's partitions: moves each log start (durably) and deletes
    /// the segments wholly below it. Kafka's errors: an unknown partition, an offset past the
    /// high watermark (OFFSET_OUT_OF_RANGE).
    pub(super) async fn delete_records_local(
        self: &Rc<Self>,
        parts: Vec<DeletePart>,
    ) -> Vec<(i16, i64)> {
        let mut out = Vec::with_capacity(parts.len());
        for p in parts {
            let Some(part) = self.partition(&p.topic, p.partition) else {
                out.push((errors::UNKNOWN_TOPIC_OR_PARTITION, -1));
                continue;
            };
            out.push(part.delete_records(&self.replica_host, p.offset).await);
        }
        out
    }

    pub(super) async fn list_offsets_local(&self, parts: Vec<ListPart>) -> Vec<ListResult> {
        let mut out = Vec::with_capacity(parts.len());
        for p in parts {
            if let (None, Some(bucket)) = (
                self.partition(&p.topic, p.partition),
                self.offsets_bucket(&p.topic, p.partition),
            ) {
                out.push(offsets_bucket_list(bucket.as_deref(), p.timestamp).await);
                continue;
            }
            let Some(part) = self.partition(&p.topic, p.partition) else {
                out.push(ListResult {
                    error: errors::UNKNOWN_TOPIC_OR_PARTITION,
                    offset: -1,
                    timestamp: -1,
                    leader_epoch: -1,
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
                // EARLIEST_LOCAL (v8, KIP-405): the first offset on the local disk (the log
                // start for a topic without remote storage).
                -4 => Ok((part.log.local_start_offset() as i64, -1)),
                // LATEST_TIERED (v9, KIP-1005): the last offset in the remote tier; -1 when
                // nothing is uploaded or the topic has no remote storage, as Kafka answers.
                -5 => Ok((part.log.latest_tiered_offset().map_or(-1, |o| o as i64), -1)),
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
                    // KIP-320: the epoch a consumer's position at `offset` carries.
                    leader_epoch: u64::try_from(offset)
                        .ok()
                        .and_then(|o| {
                            let g = self.replica(&p.topic, p.partition);
                            part.log.epoch_history(epoch_of(g.as_deref())).epoch_at(o)
                        })
                        .unwrap_or(-1),
                },
                Err(e) => ListResult {
                    error: storage_error_code(&e),
                    offset: -1,
                    timestamp: -1,
                    leader_epoch: -1,
                },
            });
        }
        out
    }

    // ---- OffsetForLeaderEpoch ----

    /// OffsetForLeaderEpoch (KIP-320) on this core's partitions: where each asked epoch ends
    /// in the log, as its leader answers (docs/replication.md, "Leader epochs on the wire").
    /// Only a replicated partition's leader answers; a single-node partition's batches all
    /// carry epoch 0.
    pub(super) fn epoch_ends_local(&self, parts: Vec<EpochPart>) -> Vec<EpochEnd> {
        let refused = |error| EpochEnd {
            error,
            epoch: -1,
            end_offset: -1,
        };
        parts
            .into_iter()
            .map(|p| {
                let Some(part) = self.partition(&p.topic, p.partition) else {
                    return refused(errors::UNKNOWN_TOPIC_OR_PARTITION);
                };
                let g = self.replica(&p.topic, p.partition);
                if let Some(g) = &g {
                    if g.failed.get() {
                        return refused(errors::KAFKA_STORAGE_ERROR);
                    }
                    if !g.is_leader() {
                        return refused(errors::NOT_LEADER_OR_FOLLOWER);
                    }
                }
                match part
                    .log
                    .epoch_history(epoch_of(g.as_deref()))
                    .end_offset_for(p.epoch)
                {
                    Some((epoch, end)) => EpochEnd {
                        error: errors::NONE,
                        epoch,
                        end_offset: end as i64,
                    },
                    None => refused(errors::NONE),
                }
            })
            .collect()
    }
}

/// The leader epoch of a partition here: its group's Raft term if replicated (epochs are
/// `i32` on the wire), 0 if not.
fn epoch_of(g: Option<&Replica>) -> i32 {
    g.map_or(0, |g| i32::try_from(g.term()).unwrap_or(i32::MAX))
}

/// ListOffsets of a standalone broker's offsets bucket (`Shard::offsets_bucket`; `None`: one
/// nothing was committed to, an empty log), as of any log. Leader epochs are not told
/// (-1: the view's partitions have none, as Metadata says).
async fn offsets_bucket_list(
    bucket: Option<&crate::broker::group::offsets::OffsetStore>,
    timestamp: i64,
) -> ListResult {
    let mut r = ListResult {
        error: errors::NONE,
        offset: 0,
        timestamp: -1,
        leader_epoch: -1,
    };
    let Some(log) = bucket.map(|s| s.log()) else {
        if timestamp == -3 || timestamp == -5 || timestamp >= 0 {
            r.offset = -1;
        }
        return r;
    };
    let wm = log.watermarks();
    let found = match timestamp {
        -2 | -4 => Ok(Some((wm.log_start_offset, -1))),
        -3 => log.max_timestamp_offset().await,
        -5 => Ok(None),
        ts if ts < 0 => Ok(Some((wm.high_watermark, -1))),
        ts => log.offset_for_timestamp(ts).await,
    };
    match found {
        Ok(Some((offset, ts))) => (r.offset, r.timestamp) = (offset as i64, ts),
        Ok(None) => r.offset = -1,
        Err(e) => {
            r.error = storage_error_code(&e);
            r.offset = -1;
        }
    }
    r
}
