//! A transactional id's state, as the transaction coordinator keeps it (Kafka's
//! `TransactionMetadata`) and as one record of the transaction log stores it.
//!
//! Record layout (all integers big-endian):
//!
//! ```text
//! key:   kind u8 (1 = transaction) | transactional id len u16 | id
//! value: version u8 (1) | producer_id i64 | epoch i16 | timeout_ms i32 | state u8
//!        | start_ms i64 | update_ms i64
//!        | partitions u32 { topic len u16 | topic | partition i32 }* | groups u32 { len u16 | group }*
//!        (no value = tombstone: the id expired)
//! ```

use std::collections::BTreeSet;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::broker::group::offsets::get_str;

const KIND_TXN: u8 = 1;
const VALUE_VERSION: u8 = 1;

/// Where a transaction stands (Kafka's `TransactionState`, without `Dead`: an expired id is
/// removed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnState {
    /// No transaction open (a new id, or after InitProducerId).
    Empty,
    /// Partitions or offsets were added: records may be in the partitions.
    Ongoing,
    /// EndTxn(commit) is writing the commit markers.
    PrepareCommit,
    /// EndTxn(abort), a timeout or a fencing InitProducerId is writing the abort markers.
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
}

impl TxnState {
    fn code(self) -> u8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
        }
    }

    fn from_code(c: u8) -> Option<TxnState> {
        Some(match c {
            0 => TxnState::Empty,
            1 => TxnState::Ongoing,
            2 => TxnState::PrepareCommit,
            3 => TxnState::PrepareAbort,
            4 => TxnState::CompleteCommit,
            5 => TxnState::CompleteAbort,
            _ => return None,
        })
    }

    /// Kafka's name (DescribeTransactions, ListTransactions).
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
        }
    }

    /// Markers are being written: the transaction's end is decided but not done.
    pub fn preparing(self) -> Option<bool> {
        match self {
            TxnState::PrepareCommit => Some(true),
            TxnState::PrepareAbort => Some(false),
            _ => None,
        }
    }
}

/// One transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMeta {
    pub producer_id: i64,
    pub epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    /// The partitions of the open (or ending) transaction.
    pub partitions: BTreeSet<(String, i32)>,
    /// The groups whose offsets the transaction commits (AddOffsetsToTxn).
    pub groups: BTreeSet<String>,
    /// When the open transaction began (its first AddPartitionsToTxn/AddOffsetsToTxn).
    pub start_ms: i64,
    /// The last change: transactional ids idle past `transactional.id.expiration.ms` go.
    pub update_ms: i64,
}

fn put_str(b: &mut BytesMut, s: &str) {
    let s = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
    b.put_u16(s.len() as u16);
    b.put_slice(s);
}

pub fn encode_key(txn_id: &str) -> Bytes {
    let mut k = BytesMut::with_capacity(3 + txn_id.len());
    k.put_u8(KIND_TXN);
    put_str(&mut k, txn_id);
    k.freeze()
}

pub fn decode_key(mut k: &[u8]) -> Option<String> {
    if k.remaining() < 1 || k.get_u8() != KIND_TXN {
        return None;
    }
    let id = get_str(&mut k)?;
    k.is_empty().then_some(id)
}

pub fn encode_value(m: &TxnMeta) -> Bytes {
    let mut v = BytesMut::with_capacity(48 + 16 * m.partitions.len());
    v.put_u8(VALUE_VERSION);
    v.put_i64(m.producer_id);
    v.put_i16(m.epoch);
    v.put_i32(m.timeout_ms);
    v.put_u8(m.state.code());
    v.put_i64(m.start_ms);
    v.put_i64(m.update_ms);
    v.put_u32(m.partitions.len() as u32);
    for (t, p) in &m.partitions {
        put_str(&mut v, t);
        v.put_i32(*p);
    }
    v.put_u32(m.groups.len() as u32);
    for g in &m.groups {
        put_str(&mut v, g);
    }
    v.freeze()
}

pub fn decode_value(mut v: &[u8]) -> Option<TxnMeta> {
    if v.remaining() < 36 || v.get_u8() != VALUE_VERSION {
        return None;
    }
    let producer_id = v.get_i64();
    let epoch = v.get_i16();
    let timeout_ms = v.get_i32();
    let state = TxnState::from_code(v.get_u8())?;
    let start_ms = v.get_i64();
    let update_ms = v.get_i64();
    let mut partitions = BTreeSet::new();
    for _ in 0..v.get_u32() {
        let t = get_str(&mut v)?;
        if v.remaining() < 4 {
            return None;
        }
        partitions.insert((t, v.get_i32()));
    }
    if v.remaining() < 4 {
        return None;
    }
    let mut groups = BTreeSet::new();
    for _ in 0..v.get_u32() {
        groups.insert(get_str(&mut v)?);
    }
    v.is_empty().then_some(TxnMeta {
        producer_id,
        epoch,
        timeout_ms,
        state,
        partitions,
        groups,
        start_ms,
        update_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let m = TxnMeta {
            producer_id: 1 << 40,
            epoch: 3,
            timeout_ms: 60_000,
            state: TxnState::PrepareCommit,
            partitions: [("a".to_string(), 0), ("b".to_string(), 7)].into(),
            groups: ["g".to_string()].into(),
            start_ms: 5,
            update_ms: 9,
        };
        assert_eq!(decode_value(&encode_value(&m)), Some(m.clone()));
        assert_eq!(decode_key(&encode_key("tx-1")), Some("tx-1".into()));
        let v = encode_value(&m);
        assert_eq!(decode_value(&v[..v.len() - 1]), None);
        assert_eq!(decode_value(&[1, 2, 3]), None);
    }
}
