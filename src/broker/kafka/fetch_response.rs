//! Encodes Fetch responses (v4..=18) as a list of `Bytes` pieces: small encoded fields in
//! between, and the record chunks exactly as `Log::read` returned them (slices of the batch
//! cache or of the read buffers) — the record bytes are never copied into the response.
//!
//! Layout (Kafka protocol; `*` = v12 flexible encoding: compact lengths + tagged fields):
//! ```text
//! size:i32 | correlation_id:i32 [tags*]
//! throttle_time_ms:i32 | error_code:i16 (v7+) | session_id:i32 (v7+)
//! [topics]: name:string (v4-12) | topic_id:uuid (v13+, KIP-516)
//!   [partitions]: partition_index:i32 error_code:i16 high_watermark:i64
//!                 last_stable_offset:i64 log_start_offset:i64 (v5+)
//!                 aborted_transactions:[] preferred_read_replica:i32 (v11+)
//!                 records:bytes [tags*]
//!   [tags*]
//! [tags*]
//! ```
//! v13-18: v15's and v17's fields are in the request (replica state, directory id). From
//! v16 (KIP-951) a partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH carries
//! the leader this broker knows as the partition's tagged field 1 (`CurrentLeader`: leader
//! id, leader epoch), and the response the endpoints of those leaders as its tagged field 0
//! (`NodeEndpoints`: node id, host, port, rack).

use bytes::{BufMut, Bytes, BytesMut};

use crate::broker::shard::FetchResult;

/// KIP-951 leader hints for a v16+ response: (leader node, epoch) by (topic, partition)
/// index in the reply, and the endpoints (node id, host, port) of the nodes named.
#[derive(Default)]
pub struct LeaderHints {
    pub partitions: std::collections::HashMap<(usize, usize), (i32, i32)>,
    pub endpoints: Vec<(i32, String, i32)>,
}

/// One topic of a fetch response, partitions in request order.
pub struct FetchReply {
    pub topic: String,
    /// The topic's id, written instead of the name from v13 on.
    pub topic_id: uuid::Uuid,
    pub partitions: Vec<(i32, FetchResult)>,
}

fn put_uvarint(buf: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

struct Writer {
    flexible: bool,
    buf: BytesMut,
    pieces: Vec<Bytes>,
}

impl Writer {
    fn array_len(&mut self, n: usize) {
        if self.flexible {
            put_uvarint(&mut self.buf, n as u64 + 1);
        } else {
            self.buf.put_i32(n as i32);
        }
    }

    fn string(&mut self, s: &str) {
        if self.flexible {
            put_uvarint(&mut self.buf, s.len() as u64 + 1);
        } else {
            self.buf.put_i16(s.len() as i16);
        }
        self.buf.put_slice(s.as_bytes());
    }

    fn tags(&mut self) {
        if self.flexible {
            self.buf.put_u8(0);
        }
    }

    /// A bytes field whose content is the chunks, passed by reference.
    fn records(&mut self, chunks: &[Bytes]) {
        let len: usize = chunks.iter().map(Bytes::len).sum();
        if self.flexible {
            put_uvarint(&mut self.buf, len as u64 + 1);
        } else {
            self.buf.put_i32(len as i32);
        }
        for c in chunks.iter().filter(|c| !c.is_empty()) {
            if c.len() < 512 {
                self.buf.put_slice(c);
            } else {
                let head = self.buf.split().freeze();
                self.pieces.push(head);
                self.pieces.push(c.clone());
            }
        }
    }
}

/// Encodes the whole response, size prefix included. `hints` are written from v16 on.
pub fn encode(
    version: i16,
    correlation_id: i32,
    topics: &[FetchReply],
    hints: &LeaderHints,
) -> Vec<Bytes> {
    let hinting = version >= 16;
    let flexible = version >= 12;
    let mut w = Writer {
        flexible,
        buf: BytesMut::with_capacity(256),
        pieces: Vec::new(),
    };
    w.buf.put_i32(0); // size, patched below
    w.buf.put_i32(correlation_id);
    w.tags();
    w.buf.put_i32(0); // throttle_time_ms
    if version >= 7 {
        w.buf.put_i16(0); // error_code
        w.buf.put_i32(0); // session_id: sessionless, every request is a full fetch
    }
    w.array_len(topics.len());
    for (ti, t) in topics.iter().enumerate() {
        if version >= 13 {
            w.buf.put_slice(t.topic_id.as_bytes());
        } else {
            w.string(&t.topic);
        }
        w.array_len(t.partitions.len());
        for (pi, (index, r)) in t.partitions.iter().enumerate() {
            w.buf.put_i32(*index);
            w.buf.put_i16(r.error);
            w.buf.put_i64(r.high_watermark);
            w.buf.put_i64(r.last_stable_offset);
            if version >= 5 {
                w.buf.put_i64(r.log_start_offset);
            }
            w.array_len(r.aborted.len());
            for (producer_id, first_offset) in &r.aborted {
                w.buf.put_i64(*producer_id);
                w.buf.put_i64(*first_offset);
                w.tags();
            }
            if version >= 11 {
                w.buf.put_i32(r.preferred_read_replica.unwrap_or(-1));
            }
            w.records(&r.chunks);
            match hints.partitions.get(&(ti, pi)).filter(|_| hinting) {
                Some(&(leader, epoch)) => {
                    // One tagged field: tag 1, 9 bytes (leader id, leader epoch, no tags).
                    w.buf.put_slice(&[1, 1, 9]);
                    w.buf.put_i32(leader);
                    w.buf.put_i32(epoch);
                    w.buf.put_u8(0);
                }
                None => w.tags(),
            }
        }
        w.tags();
    }
    if hinting && !hints.endpoints.is_empty() {
        let mut e = BytesMut::new();
        put_uvarint(&mut e, hints.endpoints.len() as u64 + 1);
        for (node, host, port) in &hints.endpoints {
            e.put_i32(*node);
            put_uvarint(&mut e, host.len() as u64 + 1);
            e.put_slice(host.as_bytes());
            e.put_i32(*port);
            e.put_u8(0); // rack: null
            e.put_u8(0); // tags
        }
        w.buf.put_u8(1); // one tagged field: tag 0, NodeEndpoints
        w.buf.put_u8(0);
        put_uvarint(&mut w.buf, e.len() as u64);
        w.buf.put_slice(&e);
    } else {
        w.tags();
    }
    let tail = w.buf.split().freeze();
    w.pieces.push(tail);
    let total: usize = w.pieces.iter().map(Bytes::len).sum();
    let mut first = BytesMut::from(&w.pieces[0][..]);
    first[..4].copy_from_slice(&((total - 4) as i32).to_be_bytes());
    w.pieces[0] = first.freeze();
    w.pieces
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{FetchResponse, ResponseHeader};
    use kafka_protocol::protocol::Decodable;

    #[test]
    fn decodes_with_the_reference_codec_in_every_version() {
        let big = Bytes::from(vec![7u8; 3000]);
        let small = Bytes::from_static(b"tiny");
        let topics = vec![
            FetchReply {
                topic_id: uuid::Uuid::nil(),
                topic: "orders".into(),
                partitions: vec![
                    (
                        0,
                        FetchResult {
                            error: 0,
                            high_watermark: 42,
                            last_stable_offset: 40,
                            log_start_offset: 3,
                            aborted: vec![(7, 5), (9, 30)],
                            chunks: vec![big.clone(), small.clone()],
                            preferred_read_replica: Some(3073),
                        },
                    ),
                    (
                        1,
                        FetchResult {
                            error: 1,
                            high_watermark: -1,
                            last_stable_offset: -1,
                            log_start_offset: -1,
                            ..Default::default()
                        },
                    ),
                ],
            },
            FetchReply {
                topic_id: uuid::Uuid::nil(),
                topic: "x".into(),
                partitions: vec![],
            },
        ];
        let mut hints = LeaderHints::default();
        hints.partitions.insert((0, 1), (2049, 7));
        hints
            .endpoints
            .push((2049, "broker-2.example".into(), 19093));
        for version in 4..=18i16 {
            let pieces = encode(version, 77, &topics, &hints);
            assert!(
                pieces.iter().any(|p| p.as_ptr() == big.as_ptr()),
                "v{version}: the big chunk must be passed by reference"
            );
            let mut all = BytesMut::new();
            for p in &pieces {
                all.extend_from_slice(p);
            }
            let mut all = all.freeze();
            let size = i32::from_be_bytes(all[..4].try_into().unwrap()) as usize;
            assert_eq!(size, all.len() - 4, "v{version} size prefix");
            let _ = all.split_to(4);
            let hv = if version >= 12 { 1 } else { 0 };
            let h = ResponseHeader::decode(&mut all, hv).unwrap();
            assert_eq!(h.correlation_id, 77);
            let r = FetchResponse::decode(&mut all, version).unwrap();
            assert!(all.is_empty(), "v{version}: trailing bytes");
            assert_eq!(r.responses.len(), 2);
            let p0 = &r.responses[0].partitions[0];
            if version < 13 {
                assert_eq!(r.responses[0].topic.as_str(), "orders");
            }
            assert_eq!(p0.high_watermark, 42);
            assert_eq!(p0.last_stable_offset, 40);
            let aborted: Vec<(i64, i64)> = p0
                .aborted_transactions
                .iter()
                .flatten()
                .map(|a| (a.producer_id.0, a.first_offset))
                .collect();
            assert_eq!(aborted, vec![(7, 5), (9, 30)], "v{version}");
            if version >= 5 {
                assert_eq!(p0.log_start_offset, 3);
            }
            let preferred = |p: &kafka_protocol::messages::fetch_response::PartitionData| {
                p.preferred_read_replica.0
            };
            let want = if version >= 11 { 3073 } else { -1 };
            assert_eq!(preferred(p0), want, "v{version}");
            assert_eq!(preferred(&r.responses[0].partitions[1]), -1, "v{version}");
            let recs = p0.records.as_ref().unwrap();
            assert_eq!(recs.len(), 3004);
            assert_eq!(&recs[3000..], b"tiny");
            assert_eq!(r.responses[0].partitions[1].error_code, 1);
            let hint = &r.responses[0].partitions[1].current_leader;
            let p0_hint = &r.responses[0].partitions[0].current_leader;
            assert_eq!(
                (p0_hint.leader_id.0, p0_hint.leader_epoch),
                (-1, -1),
                "v{version}"
            );
            if version >= 16 {
                assert_eq!(
                    (hint.leader_id.0, hint.leader_epoch),
                    (2049, 7),
                    "v{version}"
                );
                assert_eq!(r.node_endpoints.len(), 1, "v{version}");
                let e = &r.node_endpoints[0];
                assert_eq!(
                    (e.node_id.0, e.host.as_str(), e.port, e.rack.is_none()),
                    (2049, "broker-2.example", 19093, true)
                );
            } else {
                assert_eq!(
                    (hint.leader_id.0, hint.leader_epoch),
                    (-1, -1),
                    "v{version}"
                );
                assert!(r.node_endpoints.is_empty(), "v{version}");
            }
        }
    }
}
