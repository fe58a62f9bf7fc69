//! The log validator (`batch::validate`) against every lie a producer was found to get past
//! it (issue 34: librdkafka then delivered offsets `[0,1,2,2,3,5,1005,7,7]` and stalled; a
//! 131 KB zstd batch aborted the broker), sarama's `max_timestamp = -1`, and a proptest of
//! valid and corrupted batches: whatever it accepts decodes, independently, to exactly the
//! records its header announces.

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;
use weir_storage::batch::compression;
use weir_storage::batch::validate::{check_blocking, set_timestamps};
use weir_storage::batch::{
    decode_records, validate, BatchHeader, Origin, Rules, TimestampType, CRC_START, HEADER_BYTES,
};
use weir_storage::error::{BatchError, Error, Invalid};
use weir_storage::LogConfig;

const NOW: i64 = 1_700_000_000_000;

fn rules() -> Rules {
    Rules::of(&LogConfig::default(), Origin::Client, NOW)
}

fn put_varint(out: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

/// One record's fields, any of which may lie.
#[derive(Clone, Debug)]
struct Rec {
    ts_delta: i64,
    offset_delta: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Replaces the encoded header count.
    header_count: Option<i64>,
    /// Replaces the encoded key length.
    key_len: Option<i64>,
    /// Added to the record's length prefix.
    length_lie: i64,
}

impl Rec {
    fn new(i: i64) -> Rec {
        Rec {
            ts_delta: i,
            offset_delta: i,
            key: Some(format!("k{i}").into_bytes()),
            value: Some(vec![b'v'; 10]),
            headers: vec![(b"h".to_vec(), Some(b"x".to_vec()))],
            header_count: None,
            key_len: None,
            length_lie: 0,
        }
    }

    fn encode(&self, out: &mut BytesMut) {
        let mut body = BytesMut::new();
        body.put_u8(0);
        put_varint(&mut body, self.ts_delta);
        put_varint(&mut body, self.offset_delta);
        match &self.key {
            Some(k) => {
                put_varint(&mut body, self.key_len.unwrap_or(k.len() as i64));
                body.put_slice(k);
            }
            None => put_varint(&mut body, self.key_len.unwrap_or(-1)),
        }
        match &self.value {
            Some(v) => {
                put_varint(&mut body, v.len() as i64);
                body.put_slice(v);
            }
            None => put_varint(&mut body, -1),
        }
        put_varint(
            &mut body,
            self.header_count.unwrap_or(self.headers.len() as i64),
        );
        for (k, v) in &self.headers {
            put_varint(&mut body, k.len() as i64);
            body.put_slice(k);
            match v {
                Some(v) => {
                    put_varint(&mut body, v.len() as i64);
                    body.put_slice(v);
                }
                None => put_varint(&mut body, -1),
            }
        }
        put_varint(out, body.len() as i64 + self.length_lie);
        out.put_slice(&body);
    }
}

/// A batch's header fields, any of which may lie.
#[derive(Clone, Debug)]
struct Batch {
    records: Vec<Rec>,
    codec: u8,
    attributes: i16,
    base_timestamp: i64,
    max_timestamp: Option<i64>,
    producer: (i64, i16, i32),
    records_count: Option<i32>,
    /// Bytes appended after the records (inside the compression).
    trailing: Vec<u8>,
}

impl Batch {
    fn new(n: i64) -> Batch {
        Batch {
            records: (0..n).map(Rec::new).collect(),
            codec: 0,
            attributes: 0,
            base_timestamp: NOW,
            max_timestamp: None,
            producer: (-1, -1, -1),
            records_count: None,
            trailing: Vec::new(),
        }
    }

    fn encode(&self) -> Bytes {
        let mut recs = BytesMut::new();
        for r in &self.records {
            r.encode(&mut recs);
        }
        recs.put_slice(&self.trailing);
        let body = if self.codec == 0 {
            recs.to_vec()
        } else {
            compression::compress(self.codec, &recs).expect("compress")
        };
        let count = self.records_count.unwrap_or(self.records.len() as i32);
        let max = self.max_timestamp.unwrap_or_else(|| {
            self.records
                .iter()
                .map(|r| self.base_timestamp + r.ts_delta)
                .max()
                .unwrap_or(-1)
        });
        let mut out = BytesMut::new();
        out.put_i64(0);
        out.put_i32((HEADER_BYTES - 12 + body.len()) as i32);
        out.put_i32(-1);
        out.put_i8(2);
        out.put_u32(0);
        out.put_i16(self.attributes | i16::from(self.codec));
        out.put_i32(count - 1);
        out.put_i64(self.base_timestamp);
        out.put_i64(max);
        out.put_i64(self.producer.0);
        out.put_i16(self.producer.1);
        out.put_i32(self.producer.2);
        out.put_i32(count);
        out.put_slice(&body);
        let crc = crc32c::crc32c(&out[CRC_START..]);
        out[17..21].copy_from_slice(&crc.to_be_bytes());
        out.freeze()
    }
}

fn kind(r: Result<weir_storage::batch::ValidBatches, Error>) -> String {
    match r {
        Ok(_) => "accepted".into(),
        Err(Error::InvalidBatch(e)) => format!("corrupt: {e}"),
        Err(Error::InvalidRecords { kind, message, .. }) => format!("{kind:?}: {message}"),
        Err(e) => format!("other: {e}"),
    }
}

fn assert_invalid(b: &Batch, want: Invalid, what: &str) {
    for codec in [0, 1, 4] {
        let mut b = b.clone();
        b.codec = codec;
        match check_blocking(b.encode(), &rules()) {
            Err(Error::InvalidRecords { kind, .. }) if kind == want => {}
            other => panic!(
                "{what} (codec {codec}): expected {want:?}, got {}",
                kind(other)
            ),
        }
    }
}

#[test]
fn a_valid_batch_passes_with_its_true_max_timestamp() {
    for codec in 0..=4 {
        let mut b = Batch::new(5);
        b.codec = codec;
        let v = check_blocking(b.encode(), &rules()).expect("valid");
        assert_eq!(v.infos().len(), 1);
        assert_eq!(v.infos()[0].records_count, 5);
        assert_eq!(v.infos()[0].max_timestamp, NOW + 4);
    }
}

#[test]
fn every_lie_in_the_issue_is_refused() {
    let mut b = Batch::new(2);
    b.records_count = Some(3);
    assert_invalid(&b, Invalid::Record, "records_count 3 with 2 records");

    let mut b = Batch::new(3);
    b.records[2].offset_delta = 1000;
    assert_invalid(&b, Invalid::Record, "offset delta 1000");
    let mut b = Batch::new(3);
    b.records[2].offset_delta = 1;
    assert_invalid(&b, Invalid::Record, "repeated offset delta");

    for lie in [-3, -1, 1, 5] {
        let mut b = Batch::new(3);
        b.records[1].length_lie = lie;
        assert_invalid(&b, Invalid::Record, &format!("record length off by {lie}"));
    }
    let mut b = Batch::new(2);
    b.records[0].key_len = Some(1 << 30);
    assert_invalid(&b, Invalid::Record, "key length 2^30");
    let mut b = Batch::new(2);
    b.records[0].key_len = Some(-2);
    assert_invalid(&b, Invalid::Record, "key length -2");
    for count in [i64::from(i32::MAX), -1, 2] {
        let mut b = Batch::new(2);
        b.records[1].header_count = Some(count);
        assert_invalid(&b, Invalid::Record, &format!("header count {count}"));
    }

    let mut b = Batch::new(2);
    b.trailing = vec![0x02, 0x00];
    assert_invalid(&b, Invalid::Record, "bytes after the last record");

    let mut b = Batch::new(2);
    b.attributes = 0x08; // LogAppendTime from a client
    assert_invalid(&b, Invalid::Timestamp, "the LogAppendTime bit");
    let mut b = Batch::new(2);
    b.attributes = 0x10; // transactional, no producer id
    assert_invalid(&b, Invalid::Record, "transactional without a producer id");
    let mut b = Batch::new(2);
    b.producer = (7, 0, -1);
    assert_invalid(&b, Invalid::Record, "a producer id with sequence -1");
    let mut b = Batch::new(1);
    b.attributes = 0x30; // a control batch from a client
    b.producer = (7, 0, 0);
    assert_invalid(&b, Invalid::Record, "a control batch");

    // Codec 7, and a gzip bit on a body that is not gzip: the bytes are not a batch.
    let mut b = Batch::new(2).encode().to_vec();
    b[22] |= 7;
    let crc = crc32c::crc32c(&b[CRC_START..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    assert!(matches!(
        check_blocking(b.into(), &rules()),
        Err(Error::InvalidBatch(BatchError::UnknownCodec(7)))
    ));
    let mut b = Batch::new(2).encode().to_vec();
    b[22] |= 1;
    let crc = crc32c::crc32c(&b[CRC_START..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    assert!(matches!(
        check_blocking(b.into(), &rules()),
        Err(Error::InvalidBatch(BatchError::Undecodable(_)))
    ));
}

#[test]
fn a_null_header_key_is_refused() {
    // record: attributes, ts delta 0, offset delta 0, key -1, value -1, 1 header, key -1.
    let mut body = BytesMut::new();
    body.put_u8(0);
    for v in [0, 0, -1, -1, 1, -1, -1] {
        put_varint(&mut body, v);
    }
    let mut recs = BytesMut::new();
    put_varint(&mut recs, body.len() as i64);
    recs.put_slice(&body);
    let mut b = Batch::new(1).encode().to_vec();
    b.truncate(HEADER_BYTES);
    b.extend_from_slice(&recs);
    let len = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c::crc32c(&b[CRC_START..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    assert!(matches!(
        check_blocking(b.into(), &rules()),
        Err(Error::InvalidRecords {
            kind: Invalid::Record,
            ..
        })
    ));
}

#[test]
fn keys_on_a_compacted_topic_and_timestamps_are_record_errors() {
    let compacted = Rules {
        keys_required: true,
        ..rules()
    };
    let mut b = Batch::new(4);
    b.records[1].key = None;
    b.records[3].key = None;
    match check_blocking(b.encode(), &compacted) {
        Err(Error::InvalidRecords {
            kind: Invalid::Record,
            record_errors,
            ..
        }) => assert_eq!(
            record_errors.iter().map(|e| e.0).collect::<Vec<_>>(),
            [1, 3]
        ),
        other => panic!("{}", kind(other)),
    }
    // An hour and a second ahead: refused under Kafka 4's default after.max.ms.
    let mut b = Batch::new(3);
    b.records[2].ts_delta = 3_601_000;
    match check_blocking(b.encode(), &rules()) {
        Err(Error::InvalidRecords {
            kind: Invalid::Timestamp,
            record_errors,
            ..
        }) => assert_eq!(record_errors[0].0, 2),
        other => panic!("{}", kind(other)),
    }
    let old = Rules {
        timestamp_before_max_ms: 1_000,
        ..rules()
    };
    let mut b = Batch::new(2);
    b.base_timestamp = NOW - 5_000;
    assert!(matches!(
        check_blocking(b.encode(), &old),
        Err(Error::InvalidRecords {
            kind: Invalid::Timestamp,
            ..
        })
    ));
    // The broker's own batches (markers, internal logs) are not range-checked.
    let internal = Rules {
        origin: Origin::Internal,
        ..old
    };
    check_blocking(b.encode(), &internal).expect("internal");
}

/// sarama (before 2025) writes `max_timestamp = -1`; others write a value below or above their
/// records'. The validator computes the true one, rewrites the header and mends the CRC.
#[test]
fn a_wrong_max_timestamp_is_rewritten_with_its_crc() {
    for wrong in [-1, NOW - 10, NOW + 1_000_000] {
        for codec in 0..=4 {
            let mut b = Batch::new(3);
            b.codec = codec;
            b.max_timestamp = Some(wrong);
            let v = check_blocking(b.encode(), &rules()).expect("valid");
            let h = BatchHeader::parse(v.bytes()).expect("header");
            assert_eq!(h.max_timestamp.get(), NOW + 2, "codec {codec}, was {wrong}");
            assert_eq!(v.infos()[0].max_timestamp, NOW + 2);
            validate(v.bytes()).expect("the CRC was mended");
        }
    }
}

#[test]
fn a_log_append_time_topic_stamps_each_batch() {
    let lat = Rules {
        timestamp_type: TimestampType::LogAppendTime,
        ..rules()
    };
    let mut b = Batch::new(3);
    b.base_timestamp = 5; // the producer's clock does not matter
    let v = check_blocking(b.encode(), &lat).expect("valid");
    let h = BatchHeader::parse(v.bytes()).expect("header");
    assert!(h.is_log_append_time());
    assert_eq!(h.max_timestamp.get(), NOW);
    assert_eq!(v.infos()[0].max_timestamp, NOW);
    validate(v.bytes()).expect("CRC");
    let recs = decode_records(v.bytes()).expect("decodes");
    assert!(recs.iter().all(|r| r.timestamp == NOW), "{recs:?}");
}

/// The CRC mended from the changed bytes alone equals the CRC computed over the whole batch.
#[test]
fn set_timestamps_mends_the_crc_like_a_full_recompute() {
    for n in [1, 7, 300] {
        let mut b = Batch::new(n).encode().to_vec();
        for (attributes, max) in [(0x08, 12345), (0, -1), (0x10, i64::MAX)] {
            set_timestamps(&mut b, attributes, max);
            let full = crc32c::crc32c(&b[CRC_START..]);
            assert_eq!(
                BatchHeader::parse(&b).expect("header").crc.get(),
                full,
                "{n} records"
            );
        }
    }
}

/// Compression bombs: every codec's walk stops at the limit, whatever the batch inflates to.
#[test]
fn a_compression_bomb_is_refused_at_the_limit() {
    let small = Rules {
        inflated_max_bytes: 1 << 20,
        ..rules()
    };
    for codec in 1..=4 {
        let mut b = Batch::new(1);
        b.codec = codec;
        b.records[0].value = Some(vec![0; 8 << 20]);
        let r = check_blocking(b.encode(), &small);
        assert!(
            matches!(
                r,
                Err(Error::InvalidRecords {
                    kind: Invalid::Record,
                    ref message,
                    ..
                }) if message.contains("decompresses to more than")
            ),
            "codec {codec}: {}",
            kind(r)
        );
    }
}

/// A record set's batches decoded independently of the validator: `None` unless each decodes
/// to exactly the records its header announces, at sequential offsets.
fn decodes_as_announced(bytes: &[u8]) -> bool {
    let mut pos = 0;
    while pos < bytes.len() {
        let Some(h) = BatchHeader::parse(&bytes[pos..]) else {
            return false;
        };
        let total = h.total_bytes();
        let mut whole = bytes[pos..pos + total].to_vec();
        let codec = h.compression();
        if codec != 0 {
            let Ok(body) = compression::inflate(codec, &whole[HEADER_BYTES..], 1 << 30) else {
                return false;
            };
            whole.truncate(HEADER_BYTES);
            whole.extend_from_slice(&body);
            whole[22] &= !7;
            let len = (whole.len() - 12) as i32;
            whole[8..12].copy_from_slice(&len.to_be_bytes());
        }
        let Some(recs) = decode_records(&whole) else {
            return false;
        };
        if recs.len() != h.records_count.get() as usize
            || recs.iter().enumerate().any(|(i, r)| r.offset != i as i64)
        {
            return false;
        }
        pos += total;
    }
    true
}

fn arb_batch() -> impl Strategy<Value = Batch> {
    (
        1..6i64,
        0..=4u8,
        prop::collection::vec((any::<bool>(), 0..40usize, 0..3usize, 0..100i64), 6),
    )
        .prop_map(|(n, codec, shapes)| {
            let mut b = Batch::new(n);
            b.codec = codec;
            for (r, (has_key, vlen, headers, ts)) in b.records.iter_mut().zip(shapes) {
                if !has_key {
                    r.key = None;
                }
                r.value = Some(vec![b'x'; vlen]);
                r.headers = (0..headers)
                    .map(|i| (vec![b'h'; i + 1], Some(vec![b'y'; i])))
                    .collect();
                r.ts_delta = ts;
            }
            b
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Valid batches pass, with their record count and true max timestamp.
    #[test]
    fn valid_batches_pass(b in arb_batch()) {
        let v = check_blocking(b.encode(), &rules()).expect("valid");
        prop_assert_eq!(v.infos()[0].records_count as usize, b.records.len());
        let max = b.records.iter().map(|r| NOW + r.ts_delta).max().unwrap_or(-1);
        prop_assert_eq!(v.infos()[0].max_timestamp, max);
        prop_assert!(decodes_as_announced(v.bytes()));
    }

    /// Corrupted batches (a byte of the records section changed, the CRC fixed so that only the
    /// validator can tell): refused, or, if accepted, decodable to exactly what the header
    /// announces. Never a panic.
    #[test]
    fn corrupted_batches_never_pass_as_something_else(
        b in arb_batch(),
        at in any::<prop::sample::Index>(),
        xor in 1..=255u8,
        count_lie in -2..3i32,
    ) {
        let mut bytes = b.encode().to_vec();
        let i = HEADER_BYTES + at.index(bytes.len() - HEADER_BYTES);
        bytes[i] ^= xor;
        let count = i32::from_be_bytes(bytes[57..61].try_into().expect("4 bytes")) + count_lie;
        bytes[57..61].copy_from_slice(&count.to_be_bytes());
        bytes[23..27].copy_from_slice(&(count - 1).to_be_bytes());
        let crc = crc32c::crc32c(&bytes[CRC_START..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        if let Ok(v) = check_blocking(Bytes::from(bytes), &rules()) {
            prop_assert!(decodes_as_announced(v.bytes()), "accepted but does not decode as announced");
        }
    }
}
