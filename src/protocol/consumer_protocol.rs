//! The consumer's embedded protocol of classic groups (Kafka's `ConsumerProtocolSubscription`
//! and `ConsumerProtocolAssignment`, not flexible in any version): the bytes a Java or
//! librdkafka consumer puts in its JoinGroup metadata and reads from its SyncGroup assignment.
//! A consumer-protocol group with classic members (an online upgrade, the broker's
//! `group/consumer/classic.rs`) reads their subscriptions and writes their assignments itself;
//! a group converted from one protocol to the other carries its members' partitions across in
//! these forms. Fuzzed by `fuzz/fuzz_targets/consumer_protocol.rs`.
//!
//! ```text
//! subscription: version i16 | topics [str] | user_data bytes        (v0)
//!               | owned [topic str | partitions [i32]]              (v1+)
//!               | generation_id i32                                 (v2+)
//!               | rack_id nullable str                              (v3+)
//! assignment:   version i16 | assigned [topic str | partitions [i32]] | user_data bytes
//! ```
//!
//! Everything here reads bytes a client wrote: counts are checked against the bytes left
//! before anything is allocated, and trailing bytes (a newer version's fields) are ignored, as
//! Kafka's readers ignore them.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Partitions by topic.
pub type Partitions = BTreeMap<String, BTreeSet<i32>>;

/// A member's subscription as its JoinGroup metadata says it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EmbeddedSubscription {
    pub version: i16,
    pub topics: Vec<String>,
    /// The partitions it still owns (v1+; a v0 member owns nothing it says).
    pub owned: Partitions,
    pub rack_id: Option<String>,
}

fn get_str(b: &mut &[u8]) -> Option<String> {
    if b.remaining() < 2 {
        return None;
    }
    let n = b.get_i16();
    if n < 0 || n as usize > b.remaining() {
        return None;
    }
    let s = String::from_utf8(b[..n as usize].to_vec()).ok()?;
    b.advance(n as usize);
    Some(s)
}

fn get_nullable_str(b: &mut &[u8]) -> Option<Option<String>> {
    if b.remaining() < 2 {
        return None;
    }
    if i16::from_be_bytes([b[0], b[1]]) < 0 {
        b.advance(2);
        return Some(None);
    }
    get_str(b).map(Some)
}

/// An array's length, refused when its `min_each`-byte elements could not fit in what is left.
fn get_len(b: &mut &[u8], min_each: usize) -> Option<usize> {
    if b.remaining() < 4 {
        return None;
    }
    let n = b.get_i32();
    if n < 0 {
        return Some(0);
    }
    let n = n as usize;
    (n.checked_mul(min_each)? <= b.remaining()).then_some(n)
}

fn skip_bytes(b: &mut &[u8]) -> Option<()> {
    if b.remaining() < 4 {
        return None;
    }
    let n = b.get_i32();
    if n > 0 {
        if n as usize > b.remaining() {
            return None;
        }
        b.advance(n as usize);
    }
    Some(())
}

fn get_partitions(b: &mut &[u8]) -> Option<Partitions> {
    let mut out = Partitions::new();
    for _ in 0..get_len(b, 6)? {
        let topic = get_str(b)?;
        let n = get_len(b, 4)?;
        let set: BTreeSet<i32> = (0..n).map(|_| b.get_i32()).collect();
        out.entry(topic).or_default().extend(set);
    }
    Some(out)
}

fn put_str(b: &mut BytesMut, s: &str) {
    let s = &s.as_bytes()[..s.len().min(i16::MAX as usize)];
    b.put_i16(s.len() as i16);
    b.put_slice(s);
}

/// A ConsumerProtocolSubscription; `None` if the bytes are not one.
pub fn decode_subscription(mut md: &[u8]) -> Option<EmbeddedSubscription> {
    let b = &mut md;
    if b.remaining() < 2 {
        return None;
    }
    let version = b.get_i16();
    if version < 0 {
        return None;
    }
    let mut s = EmbeddedSubscription {
        version,
        ..Default::default()
    };
    for _ in 0..get_len(b, 2)? {
        s.topics.push(get_str(b)?);
    }
    skip_bytes(b)?;
    if version >= 1 {
        s.owned = get_partitions(b)?;
    }
    if version >= 2 {
        if b.remaining() < 4 {
            return None;
        }
        b.get_i32();
    }
    if version >= 3 {
        s.rack_id = get_nullable_str(b)?;
    }
    Some(s)
}

/// A ConsumerProtocolSubscription of `version` without user data, generation or rack (as the
/// tests' classic members send it).
pub fn encode_subscription(version: i16, topics: &[String], owned: &Partitions) -> Bytes {
    let mut b = BytesMut::with_capacity(64);
    b.put_i16(version);
    b.put_i32(topics.len() as i32);
    for t in topics {
        put_str(&mut b, t);
    }
    b.put_i32(-1);
    if version >= 1 {
        put_partitions(&mut b, owned);
    }
    if version >= 2 {
        b.put_i32(-1);
    }
    if version >= 3 {
        b.put_i16(-1);
    }
    b.freeze()
}

fn put_partitions(b: &mut BytesMut, p: &Partitions) {
    b.put_i32(p.len() as i32);
    for (t, ps) in p {
        put_str(b, t);
        b.put_i32(ps.len() as i32);
        for &x in ps {
            b.put_i32(x);
        }
    }
}

/// The version of the embedded protocol a member's metadata is written in (its first two
/// bytes): its assignment is answered in the same one, at most 3, as Kafka answers it.
pub fn version_of(md: &[u8]) -> i16 {
    if md.len() < 2 {
        return 0;
    }
    i16::from_be_bytes([md[0], md[1]]).clamp(0, 3)
}

/// A ConsumerProtocolAssignment of `version` giving `assigned`, without user data.
pub fn encode_assignment(version: i16, assigned: &Partitions) -> Bytes {
    let mut b = BytesMut::with_capacity(32);
    b.put_i16(version);
    put_partitions(&mut b, assigned);
    b.put_i32(-1);
    b.freeze()
}

/// The partitions a ConsumerProtocolAssignment gives; an empty one (a member between a
/// rebalance's join and sync) gives nothing. `None` if the bytes are not one.
pub fn decode_assignment(mut a: &[u8]) -> Option<Partitions> {
    if a.is_empty() {
        return Some(Partitions::new());
    }
    let b = &mut a;
    if b.remaining() < 2 || b.get_i16() < 0 {
        return None;
    }
    let p = get_partitions(b)?;
    skip_bytes(b)?;
    Some(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(spec: &[(&str, &[i32])]) -> Partitions {
        spec.iter()
            .map(|(t, ps)| (t.to_string(), ps.iter().copied().collect()))
            .collect()
    }

    #[test]
    fn subscriptions_of_every_version_read_back() {
        let owned = parts(&[("a", &[0, 2]), ("b", &[1])]);
        let topics = vec!["a".to_string(), "b".to_string()];
        for version in 0..=3 {
            let s = decode_subscription(&encode_subscription(version, &topics, &owned)).unwrap();
            assert_eq!(s.version, version);
            assert_eq!(s.topics, topics);
            let want = if version >= 1 {
                owned.clone()
            } else {
                Partitions::new()
            };
            assert_eq!(s.owned, want, "v{version}");
        }
    }

    #[test]
    fn assignments_read_back_and_lies_are_refused() {
        let p = parts(&[("t", &[0, 1, 5])]);
        assert_eq!(decode_assignment(&encode_assignment(3, &p)), Some(p));
        assert_eq!(decode_assignment(&[]), Some(Partitions::new()));
        // A count of a billion partitions in a few bytes is refused before any allocation.
        let mut lie = BytesMut::new();
        lie.put_i16(0);
        lie.put_i32(1);
        put_str(&mut lie, "t");
        lie.put_i32(1_000_000_000);
        assert_eq!(decode_assignment(&lie), None);
        assert_eq!(decode_subscription(&lie), None);
        assert_eq!(decode_subscription(&[0, 0, 0x7f, 0xff, 0xff, 0xff]), None);
    }
}
