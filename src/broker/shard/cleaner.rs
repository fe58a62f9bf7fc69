//! The log cleaner of one core (`cleanup.policy=compact`): every `log.cleaner.backoff.ms` it
//! asks each of the core's compacted logs how dirty it is (`Log::dirty_info`) and cleans the
//! dirtiest one that is due (`Log::clean`), with kafka-protocol's codecs so that compressed
//! batches are compacted too. It runs in its own task queue with a small share of the core, so
//! produce and fetch on the same core keep their latency while a cleaning runs.

use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use glommio::{Latency, Shares};
use kafka_protocol::compression::{Compressor, Decompressor, Gzip, Lz4, Snappy, Zstd};
use tracing::{info, warn};
use weir_storage::log::{CleanOptions, Codecs};

use super::Shard;

/// kafka-protocol's codecs, for the cleaner: Kafka's codec numbers (1 gzip, 2 snappy, 3 lz4,
/// 4 zstd).
pub struct KafkaCodecs;

impl Codecs for KafkaCodecs {
    fn decompress(&self, codec: u8, data: &[u8]) -> Result<Vec<u8>, String> {
        let mut body = Bytes::copy_from_slice(data);
        let plain = |b: &mut Bytes| Ok(b.to_vec());
        match codec {
            1 => Gzip::decompress(&mut body, plain),
            2 => Snappy::decompress(&mut body, plain),
            3 => Lz4::decompress(&mut body, plain),
            4 => Zstd::decompress(&mut body, plain),
            other => return Err(format!("unknown compression codec {other}")),
        }
        .map_err(|e| format!("codec {codec}: {e:#}"))
    }

    fn compress(&self, codec: u8, data: &[u8]) -> Result<Vec<u8>, String> {
        let mut out = BytesMut::new();
        let fill = |b: &mut BytesMut| {
            b.extend_from_slice(data);
            Ok(())
        };
        match codec {
            1 => Gzip::compress(&mut out, fill),
            2 => Snappy::compress(&mut out, fill),
            3 => Lz4::compress(&mut out, fill),
            4 => Zstd::compress(&mut out, fill),
            other => return Err(format!("unknown compression codec {other}")),
        }
        .map_err(|e| format!("codec {codec}: {e:#}"))?;
        Ok(out.to_vec())
    }
}

/// The records without a key in a produce's record set, by index (counted over its batches;
/// compressed batches are decompressed to see). Kafka refuses those on a compacted topic
/// (INVALID_RECORD, with these indexes as the response's record errors): compaction keeps the
/// latest record *per key*. A batch that does not decode is left to the append's own checks.
pub(super) fn keyless_records(records: &[u8]) -> Vec<i32> {
    let mut out = Vec::new();
    let mut index = 0i32;
    for (h, b) in weir_storage::batch::Batches::new(records) {
        let count = h.records_count.get();
        if !h.is_control() {
            let body = &b[weir_storage::batch::HEADER_BYTES..];
            let plain = match h.compression() {
                0 => Some(body.to_vec()),
                c => KafkaCodecs.decompress(c, body).ok(),
            };
            let raw = plain
                .as_deref()
                .and_then(|p| weir_storage::batch::records::raw_records(p, count));
            for (i, r) in raw.unwrap_or_default().iter().enumerate() {
                if r.key.is_none() {
                    out.push(index + i as i32);
                }
            }
        }
        index += count.max(0);
    }
    out
}

impl Shard {
    /// The core's cleaner loop (see the module docs); returns at shutdown.
    pub async fn run_cleaner(self: Rc<Self>) {
        if !self.config.cleaner_enable {
            return;
        }
        let every = Duration::from_millis(self.config.cleaner_backoff_ms);
        loop {
            futures_lite::future::or(glommio::timer::sleep(every), self.shutdown.wait()).await;
            if self.shutdown.is_fired() {
                return;
            }
            let now_ms = super::lifecycle::wall_clock_ms();
            let dirtiest = self
                .partitions
                .borrow()
                .iter()
                // A replicated partition is compacted like any other, each replica on its own
                // (docs/replication.md, "Compacting replicated partitions"), but the internal
                // topics' partitions are compacted by their stores (`Backing::rewrite`).
                .filter(|(k, _)| {
                    k.0 != crate::broker::group::offsets::OFFSETS_TOPIC
                        && k.0 != crate::broker::txn::TXN_TOPIC
                })
                .map(|(k, p)| (k.clone(), p.clone(), p.log.dirty_info(now_ms)))
                .filter(|(_, _, d)| d.due)
                .max_by(|a, b| a.2.ratio.total_cmp(&b.2.ratio));
            let Some(((topic, p), part, dirty)) = dirtiest else {
                continue;
            };
            let options = CleanOptions {
                codecs: Some(&KafkaCodecs),
                io_bytes_per_second: self.config.cleaner_io_max_bytes_per_second,
            };
            match part.log.clean(now_ms, &options).await {
                Ok(s) => info!(
                    topic = %topic,
                    partition = p,
                    dirty_ratio = dirty.ratio,
                    segments = s.segments_before,
                    into = s.segments_after,
                    bytes_before = s.bytes_before,
                    bytes_after = s.bytes_after,
                    records_removed = s.records_removed,
                    tombstones_removed = s.tombstones_removed,
                    "log cleaned"
                ),
                Err(e) => warn!(topic = %topic, partition = p, error = %e, "cleaning failed"),
            }
        }
    }
}

/// Starts the core's cleaner in a task queue of its own with a small share of the core.
pub fn spawn_cleaner(shard: Rc<Shard>) {
    let tq = glommio::executor().create_task_queue(
        Shares::Static(100),
        Latency::NotImportant,
        "log-cleaner",
    );
    match glommio::spawn_local_into(shard.run_cleaner(), tq) {
        Ok(t) => {
            t.detach();
        }
        Err(e) => warn!(error = %e, "could not start the log cleaner"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_codec_round_trips() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        for codec in 1..=4 {
            let z = KafkaCodecs.compress(codec, &data).expect("compress");
            assert_eq!(
                KafkaCodecs.decompress(codec, &z).expect("decompress"),
                data,
                "codec {codec}"
            );
        }
        assert!(KafkaCodecs.decompress(9, &data).is_err());
    }
}
