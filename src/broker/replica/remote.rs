//! A committed upload of a replicated partition's segment to its remote tier (tiered storage,
//! docs/tiered-storage.md "Replicated partitions"): a Raft entry with no data, so it takes no
//! Kafka offset, whose raft-rs `context` carries the segment's manifest entry
//! (`weir_storage::tier::RemoteSegment`). Only the leader uploads; every replica, applying
//! the entry, lists the segment in its own manifest (`Replica::list_remote`), so a new leader
//! continues uploading where the old one stopped and knows every object that holds data.
//! Stored in the side log (`replica::side`, kind 1).

use weir_storage::tier::RemoteSegment;

/// What the context starts with (no batch or other context starts so).
const TAG: &[u8] = b"weir.remote_segment";

/// The context of an entry listing `seg` in the manifest.
pub fn encode(seg: &RemoteSegment) -> Vec<u8> {
    let mut out = Vec::with_capacity(TAG.len() + RemoteSegment::ENCODED_BYTES);
    out.extend_from_slice(TAG);
    seg.encode(&mut out);
    out
}

/// The segment a context lists, if it is such an entry's.
pub fn decode(context: &[u8]) -> Option<RemoteSegment> {
    RemoteSegment::decode(context.strip_prefix(TAG)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let seg = RemoteSegment {
            base_offset: 100,
            next_offset: 250,
            size: 1 << 20,
            max_timestamp: 1_700_000_000_000,
            data_crc: 0xdead_beef,
            id: (7 << 32) | 42,
        };
        assert_eq!(decode(&encode(&seg)), Some(seg));
        assert_eq!(decode(b""), None);
        let whole = encode(&seg);
        assert_eq!(decode(&whole[..whole.len() - 1]), None);
        assert_eq!(
            decode(&crate::broker::replica::log_start::encode(100)),
            None
        );
        assert_eq!(crate::broker::replica::log_start::decode(&whole), None);
    }
}
