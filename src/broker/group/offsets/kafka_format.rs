//! `__consumer_offsets` as Kafka writes it, for the tools that learn committed offsets by
//! consuming the topic (Burrow, lag exporters, `kafka-console-consumer` with Kafka's
//! `OffsetsMessageFormatter`). A bucket's log holds weir's own records (`offsets.rs`,
//! `txn.rs`, `group_state.rs`); a Fetch of the topic gets each batch rewritten into Kafka's
//! key and value schemas at the same offsets, so positions, ListOffsets and the high
//! watermark stay those of the log:
//!
//! ```text
//! kind 1 offset         -> OffsetCommitKey v1 (group, topic, partition) / OffsetCommitValue v3
//!                          (offset, leader epoch, metadata, commit timestamp); no value stays none
//! kind 4 group state    -> GroupMetadataKey v2 (group) / GroupMetadataValue v3 (the members with
//!                          the chosen protocol's subscription); no value (Empty, deleted) stays none
//! kind 2 pending offset -> the offset records in a transactional batch of the producer id
//! kind 3 transaction end-> a control batch: the producer's commit or abort marker
//! anything else          -> left out (the batch still spans its offsets)
//! ```
//!
//! A rewritten batch keeps its base offset and its last offset delta even where records are
//! left out, as a compacted batch does, so a consumer moves past every offset of the log.
//! Producer epochs are not kept by weir's records: the transactional batches and markers say
//! epoch 0, and a consumer reading with `read_committed` is told of no aborted transaction
//! (the bucket log is not a transactional log), so it sees offsets of aborted transactions as
//! one reading `read_uncommitted` does.

use bytes::{BufMut, Bytes, BytesMut};
use weir_storage::batch::{
    assign_offset, decode_records, Batches, Record, RecordBatchBuilder, CONTROL_FLAG,
    TRANSACTIONAL_FLAG,
};

use super::group_state::{self, StoredGroup, KIND_GROUP};
use super::txn::{self, KIND_TXN_END, KIND_TXN_OFFSET};
use super::{decode_key, decode_value, Committed, KIND_OFFSET};

/// Kafka's `OffsetCommitKey` version (group, topic, partition).
const OFFSET_KEY_VERSION: i16 = 1;
/// Kafka's `OffsetCommitValue` version with the leader epoch, not flexible.
const OFFSET_VALUE_VERSION: i16 = 3;
/// Kafka's `GroupMetadataKey` version.
const GROUP_KEY_VERSION: i16 = 2;
/// Kafka's `GroupMetadataValue` version with static members, not flexible.
const GROUP_VALUE_VERSION: i16 = 3;

/// What kind of batch a rewritten record belongs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Plain,
    /// Offsets of an open transaction of this producer id.
    Txn(i64),
    /// The marker ending this producer id's transaction: commit (`true`) or abort.
    Marker(i64, bool),
}

/// One record rewritten into Kafka's schemas, at its offset.
struct Rewritten {
    offset: i64,
    timestamp: i64,
    class: Class,
    key: Bytes,
    value: Option<Bytes>,
}

/// Rewrites the batches read from a bucket log (`chunks`, as the log's reads return them:
/// a batch may span two chunks, the last batch may be cut short) into Kafka's format. A
/// trailing partial batch is left out, as a consumer would skip it.
pub fn kafka_view(chunks: &[Bytes]) -> Vec<Bytes> {
    let joined = match chunks {
        [] => return Vec::new(),
        [one] => one.clone(),
        many => {
            let mut all = BytesMut::with_capacity(many.iter().map(Bytes::len).sum());
            for c in many {
                all.extend_from_slice(c);
            }
            all.freeze()
        }
    };
    let mut out = Vec::new();
    for (header, batch) in Batches::new(&joined) {
        let base = header.base_offset.get();
        let last = header.last_offset();
        let epoch = header.partition_leader_epoch.get();
        let records: Vec<Rewritten> = decode_records(batch)
            .unwrap_or_default()
            .iter()
            .filter_map(rewrite)
            .collect();
        if records.is_empty() {
            // Nothing of Kafka's kind in it (a compaction's cut record): an empty batch
            // spanning its offsets.
            let mut b = RecordBatchBuilder::new(header.base_timestamp.get())
                .last_offset_delta(delta(base, last))
                .build()
                .to_vec();
            assign_offset(&mut b, base, epoch);
            out.push(Bytes::from(b));
            continue;
        }
        // Runs of one class (a marker is a run of its own), each a batch reaching up to the
        // next run's first offset, the last one up to the batch's last offset.
        let mut runs: Vec<&[Rewritten]> = Vec::new();
        let mut start = 0;
        for i in 1..=records.len() {
            let ends = i == records.len()
                || records[i].class != records[start].class
                || matches!(records[start].class, Class::Marker(..));
            if ends {
                runs.push(&records[start..i]);
                start = i;
            }
        }
        for (i, run) in runs.iter().enumerate() {
            let run_base = run[0].offset;
            let run_last = runs.get(i + 1).map_or(last, |next| next[0].offset - 1);
            let mut b = RecordBatchBuilder::new(run[0].timestamp);
            b = match run[0].class {
                Class::Plain => b,
                Class::Txn(pid) => b.producer(pid, 0, -1).attributes(TRANSACTIONAL_FLAG),
                Class::Marker(pid, _) => b
                    .producer(pid, 0, -1)
                    .attributes(TRANSACTIONAL_FLAG | CONTROL_FLAG),
            };
            for r in run.iter() {
                b = b.next_offset_delta(delta(run_base, r.offset)).record_at(
                    r.timestamp,
                    Some(&r.key),
                    r.value.as_deref(),
                    &[],
                );
            }
            let mut b = b
                .last_offset_delta(delta(run_base, run_last))
                .build()
                .to_vec();
            assign_offset(&mut b, run_base, epoch);
            out.push(Bytes::from(b));
        }
    }
    out
}

fn delta(base: i64, offset: i64) -> i32 {
    i32::try_from(offset - base).unwrap_or(0).max(0)
}

/// One weir record in Kafka's schemas (`None`: a record Kafka's topic has no kind for).
fn rewrite(r: &Record) -> Option<Rewritten> {
    let key = r.key.as_deref()?;
    let (class, key, value) = match *key.first()? {
        KIND_OFFSET => {
            let (group, topic, partition) = decode_key(key)?;
            let value = match r.value.as_deref() {
                None => None,
                Some(v) => Some(offset_value(&decode_value(v)?)),
            };
            (Class::Plain, offset_key(&group, &topic, partition), value)
        }
        KIND_GROUP => {
            let group = group_state::decode_key(key)?;
            let value = match r.value.as_deref() {
                None => None,
                Some(v) => Some(group_value(&group_state::decode_value(v)?)),
            };
            (Class::Plain, group_key(&group), value)
        }
        KIND_TXN_OFFSET => {
            let (_, pid, group, tp) = txn::decode_key(key)?;
            let (topic, partition) = tp?;
            let value = offset_value(&decode_value(r.value.as_deref()?)?);
            (
                Class::Txn(pid),
                offset_key(&group, &topic, partition),
                Some(value),
            )
        }
        KIND_TXN_END => {
            let (_, pid, _, _) = txn::decode_key(key)?;
            let commit = r.value.as_deref() == Some(&[1u8][..]);
            // A control record: key version 0 and the marker type, value version 0 and the
            // coordinator epoch.
            let key = Bytes::copy_from_slice(&[0, 0, 0, u8::from(commit)]);
            let value = Bytes::from_static(&[0, 0, 0, 0, 0, 0]);
            (Class::Marker(pid, commit), key, Some(value))
        }
        _ => return None,
    };
    Some(Rewritten {
        offset: r.offset,
        timestamp: r.timestamp,
        class,
        key,
        value,
    })
}

fn put_str(b: &mut BytesMut, s: &str) {
    let s = &s.as_bytes()[..s.len().min(i16::MAX as usize)];
    b.put_i16(s.len() as i16);
    b.put_slice(s);
}

/// A nullable string: null when empty (Kafka's protocol and leader of a group without one).
fn put_nullable_str(b: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_str(b, s),
        None => b.put_i16(-1),
    }
}

fn put_bytes(b: &mut BytesMut, v: &[u8]) {
    b.put_i32(v.len() as i32);
    b.put_slice(v);
}

/// Kafka's `OffsetCommitKey` v1.
pub fn offset_key(group: &str, topic: &str, partition: i32) -> Bytes {
    let mut b = BytesMut::with_capacity(10 + group.len() + topic.len());
    b.put_i16(OFFSET_KEY_VERSION);
    put_str(&mut b, group);
    put_str(&mut b, topic);
    b.put_i32(partition);
    b.freeze()
}

/// Kafka's `OffsetCommitValue` v3.
pub fn offset_value(c: &Committed) -> Bytes {
    let mut b = BytesMut::with_capacity(24 + c.metadata.len());
    b.put_i16(OFFSET_VALUE_VERSION);
    b.put_i64(c.offset);
    b.put_i32(c.leader_epoch);
    put_str(&mut b, &c.metadata);
    b.put_i64(c.commit_ms);
    b.freeze()
}

/// Kafka's `GroupMetadataKey` v2.
pub fn group_key(group: &str) -> Bytes {
    let mut b = BytesMut::with_capacity(4 + group.len());
    b.put_i16(GROUP_KEY_VERSION);
    put_str(&mut b, group);
    b.freeze()
}

/// Kafka's `GroupMetadataValue` v3: each member with the subscription of the protocol the
/// group chose (weir keeps every protocol a member offered; Kafka keeps that one).
pub fn group_value(g: &StoredGroup) -> Bytes {
    let mut b = BytesMut::with_capacity(g.approx_bytes() as usize + 32);
    b.put_i16(GROUP_VALUE_VERSION);
    put_str(&mut b, &g.protocol_type);
    b.put_i32(g.generation);
    put_nullable_str(&mut b, Some(g.protocol.as_str()).filter(|p| !p.is_empty()));
    put_nullable_str(&mut b, Some(g.leader.as_str()).filter(|l| !l.is_empty()));
    b.put_i64(g.state_ms);
    b.put_i32(g.members.len() as i32);
    for m in &g.members {
        put_str(&mut b, &m.member_id);
        put_nullable_str(&mut b, m.group_instance_id.as_deref());
        put_str(&mut b, &m.client_id);
        put_str(&mut b, &m.client_host);
        b.put_i32(m.rebalance_timeout_ms);
        b.put_i32(m.session_timeout_ms);
        let subscription = m
            .protocols
            .iter()
            .find(|(name, _)| *name == g.protocol)
            .map_or(&[][..], |(_, md)| &md[..]);
        put_bytes(&mut b, subscription);
        put_bytes(&mut b, &m.assignment);
    }
    b.freeze()
}

#[cfg(test)]
mod tests;
