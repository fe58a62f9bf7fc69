//! A remote segment's `.txnindex` object: the aborted transactions a read_committed read of
//! the segment may meet (those with a record in it: first record before its end, abort marker
//! at or after its base), as Kafka uploads a segment's transaction index with it (KIP-405).
//! The log's own list of aborted transactions (`ProducerState`) is emptied when a replica
//! installs a snapshot; the remote tier's reads take them from here instead.
//!
//! Layout, big-endian: magic `WTXN`, version u16 (1), count u32, then per transaction
//! producer id i64, first offset u64, marker offset u64; then a CRC-32C of everything
//! before it.

use crate::producer_state::AbortedTxn;

/// Magic of a `.txnindex` object.
const MAGIC: [u8; 4] = *b"WTXN";
const VERSION: u16 = 1;
const HEAD_BYTES: usize = 4 + 2 + 4;
const ENTRY_BYTES: usize = 24;

/// The object's bytes for `aborted`.
pub(crate) fn encode(aborted: &[AbortedTxn]) -> Vec<u8> {
    let mut b = Vec::with_capacity(HEAD_BYTES + aborted.len() * ENTRY_BYTES + 4);
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&VERSION.to_be_bytes());
    b.extend_from_slice(&(aborted.len() as u32).to_be_bytes());
    for a in aborted {
        b.extend_from_slice(&a.producer_id.to_be_bytes());
        b.extend_from_slice(&a.first_offset.to_be_bytes());
        b.extend_from_slice(&a.last_offset.to_be_bytes());
    }
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_be_bytes());
    b
}

/// The transactions in an object's bytes; `None` unless well-formed (magic, version, length,
/// CRC, each marker at or after its first record).
pub(crate) fn decode(b: &[u8]) -> Option<Vec<AbortedTxn>> {
    let (body, crc) = b.split_at_checked(b.len().checked_sub(4)?)?;
    if crc32c::crc32c(body) != u32::from_be_bytes(crc.try_into().ok()?) {
        return None;
    }
    let (head, entries) = body.split_at_checked(HEAD_BYTES)?;
    if head[..4] != MAGIC || u16::from_be_bytes([head[4], head[5]]) != VERSION {
        return None;
    }
    let count = u32::from_be_bytes(head[6..10].try_into().ok()?) as usize;
    if entries.len() != count.checked_mul(ENTRY_BYTES)? {
        return None;
    }
    entries
        .chunks_exact(ENTRY_BYTES)
        .map(|e| {
            let mut words = e
                .chunks_exact(8)
                .map(|w| u64::from_be_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]));
            let a = AbortedTxn {
                producer_id: words.next()? as i64,
                first_offset: words.next()?,
                last_offset: words.next()?,
            };
            (a.first_offset <= a.last_offset).then_some(a)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_damage() {
        let txns = vec![
            AbortedTxn {
                producer_id: 7,
                first_offset: 10,
                last_offset: 20,
            },
            AbortedTxn {
                producer_id: -1,
                first_offset: 0,
                last_offset: u64::MAX,
            },
        ];
        let b = encode(&txns);
        assert_eq!(decode(&b), Some(txns.clone()));
        assert_eq!(decode(&encode(&[])), Some(vec![]));
        for i in 0..b.len() {
            let mut bad = b.clone();
            bad[i] ^= 0x40;
            assert_eq!(decode(&bad), None, "a flip at byte {i}");
        }
        assert_eq!(decode(&b[..b.len() - 1]), None);
        assert_eq!(decode(&[]), None);
    }
}
