//! A committed move of a replicated partition's log start (DeleteRecords, docs/replication.md
//! "DeleteRecords on replicated partitions"): a Raft entry with no data, so it takes no Kafka
//! offset, whose raft-rs `context` names the new log start. Every replica, applying it, moves
//! its own log start there (`Replica::cut`), so all of them drop the same records, and a
//! replica that was down applies it when it catches up (it travels in the Raft log, not beside
//! it). Stored in the side log (`replica::side`, kind 1).

/// What the context starts with (no batch or other context starts so).
const TAG: &[u8] = b"weir.log_start";

/// The context of an entry moving the log start to `offset`.
pub fn encode(offset: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(TAG.len() + 8);
    out.extend_from_slice(TAG);
    out.extend_from_slice(&offset.to_le_bytes());
    out
}

/// The log start a context names, if it is such an entry's.
pub fn decode(context: &[u8]) -> Option<u64> {
    let rest = context.strip_prefix(TAG)?;
    Some(u64::from_le_bytes(rest.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        for o in [0, 1, 4096, u64::MAX] {
            assert_eq!(decode(&encode(o)), Some(o));
        }
        assert_eq!(decode(b""), None);
        assert_eq!(decode(&encode(7)[..TAG.len() + 7]), None);
        let mut longer = encode(7);
        longer.push(0);
        assert_eq!(decode(&longer), None);
        assert_eq!(decode(b"weir.cut\0\0\0\0\0\0\0\x07"), None);
    }
}
