//! The Kafka view of bucket batches: Kafka's schemas, read back with a decoder written from
//! Kafka's message definitions, at the offsets of the log.

use bytes::{Buf, Bytes};
use weir_storage::batch::{
    decode_records, marker_type, validate_stored, BatchHeader, RecordBatchBuilder,
};

use super::super::group_state::{self, StoredGroup, StoredMember};
use super::super::txn::{end_key, pending_key};
use super::super::{encode_key, encode_value, Committed};
use super::kafka_view;

fn committed(offset: i64) -> Committed {
    Committed {
        offset,
        leader_epoch: 4,
        metadata: "md".into(),
        commit_ms: 1_700_000_000_123,
    }
}

/// A weir batch of `records` at `base`.
fn batch(base: i64, records: &[(Bytes, Option<Bytes>)]) -> Bytes {
    let mut b = RecordBatchBuilder::new(1_700_000_000_000);
    for (k, v) in records {
        b = b.record(Some(k), v.as_deref(), &[]);
    }
    let mut b = b.build().to_vec();
    weir_storage::batch::assign_offset(&mut b, base, 3);
    Bytes::from(b)
}

fn get_str(b: &mut &[u8]) -> Option<String> {
    let n = b.get_i16();
    (n >= 0).then(|| {
        let s = String::from_utf8(b[..n as usize].to_vec()).unwrap();
        b.advance(n as usize);
        s
    })
}

/// (group, topic, partition) of an OffsetCommitKey v1.
fn offset_key(mut k: &[u8]) -> (String, String, i32) {
    assert_eq!(k.get_i16(), 1, "OffsetCommitKey version");
    let g = get_str(&mut k).unwrap();
    let t = get_str(&mut k).unwrap();
    let p = k.get_i32();
    assert!(k.is_empty());
    (g, t, p)
}

/// (offset, leader epoch, metadata, commit timestamp) of an OffsetCommitValue v3.
fn offset_value(mut v: &[u8]) -> (i64, i32, String, i64) {
    assert_eq!(v.get_i16(), 3, "OffsetCommitValue version");
    let o = v.get_i64();
    let e = v.get_i32();
    let md = get_str(&mut v).unwrap();
    let ts = v.get_i64();
    assert!(v.is_empty());
    (o, e, md, ts)
}

fn batches(chunks: &[Bytes]) -> Vec<Bytes> {
    let out = kafka_view(chunks);
    for b in &out {
        validate_stored(b).expect("a valid batch, its CRC right");
    }
    out
}

fn span(b: &[u8]) -> (i64, i64) {
    let h = BatchHeader::parse(b).unwrap();
    (h.base_offset.get(), h.last_offset())
}

#[test]
fn committed_offsets_and_their_deletion_read_as_kafka_writes_them() {
    let weir = batch(
        10,
        &[
            (encode_key("g", "t", 0), Some(encode_value(&committed(42)))),
            (encode_key("g", "t", 1), Some(encode_value(&committed(7)))),
            (encode_key("g", "t", 2), None),
        ],
    );
    let out = batches(&[weir]);
    assert_eq!(out.len(), 1);
    assert_eq!(span(&out[0]), (10, 12));
    let recs = decode_records(&out[0]).unwrap();
    assert_eq!(
        recs.iter().map(|r| r.offset).collect::<Vec<_>>(),
        [10, 11, 12]
    );
    assert_eq!(
        offset_key(recs[0].key.as_deref().unwrap()),
        ("g".into(), "t".into(), 0)
    );
    assert_eq!(
        offset_value(recs[0].value.as_deref().unwrap()),
        (42, 4, "md".into(), 1_700_000_000_123)
    );
    assert_eq!(offset_key(recs[2].key.as_deref().unwrap()).2, 2);
    assert!(recs[2].value.is_none(), "a deleted offset is a tombstone");
    assert_eq!(
        BatchHeader::parse(&out[0])
            .unwrap()
            .partition_leader_epoch
            .get(),
        3
    );
}

#[test]
fn group_metadata_reads_as_group_metadata_value_v3_with_the_chosen_subscription() {
    let g = StoredGroup {
        protocol_type: "consumer".into(),
        generation: 5,
        protocol: "range".into(),
        leader: "m-1".into(),
        state_ms: 99,
        members: vec![StoredMember {
            member_id: "m-1".into(),
            group_instance_id: Some("i-1".into()),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            rebalance_timeout_ms: 300_000,
            session_timeout_ms: 45_000,
            protocols: vec![
                ("cooperative-sticky".into(), Bytes::from_static(b"other")),
                ("range".into(), Bytes::from_static(b"sub")),
            ],
            assignment: Bytes::from_static(b"asg"),
        }],
    };
    let out = batches(&[batch(
        0,
        &[(
            group_state::encode_key("grp"),
            Some(group_state::encode_value(&g)),
        )],
    )]);
    let r = &decode_records(&out[0]).unwrap()[0];
    let mut k = r.key.as_deref().unwrap();
    assert_eq!(k.get_i16(), 2, "GroupMetadataKey version");
    assert_eq!(get_str(&mut k).unwrap(), "grp");
    let mut v = r.value.as_deref().unwrap();
    assert_eq!(v.get_i16(), 3, "GroupMetadataValue version");
    assert_eq!(get_str(&mut v).unwrap(), "consumer");
    assert_eq!(v.get_i32(), 5);
    assert_eq!(get_str(&mut v).as_deref(), Some("range"));
    assert_eq!(get_str(&mut v).as_deref(), Some("m-1"));
    assert_eq!(v.get_i64(), 99);
    assert_eq!(v.get_i32(), 1);
    assert_eq!(get_str(&mut v).as_deref(), Some("m-1"));
    assert_eq!(get_str(&mut v).as_deref(), Some("i-1"));
    assert_eq!(get_str(&mut v).as_deref(), Some("c"));
    assert_eq!(get_str(&mut v).as_deref(), Some("/127.0.0.1"));
    assert_eq!((v.get_i32(), v.get_i32()), (300_000, 45_000));
    let n = v.get_i32() as usize;
    assert_eq!(&v[..n], b"sub", "the chosen protocol's subscription");
    v.advance(n);
    let n = v.get_i32() as usize;
    assert_eq!(&v[..n], b"asg");
    v.advance(n);
    assert!(v.is_empty());
}

#[test]
fn transactional_offsets_are_a_transactional_batch_and_its_end_a_marker() {
    let pending = batch(
        20,
        &[
            (
                pending_key(7, "g", "t", 0),
                Some(encode_value(&committed(5))),
            ),
            (
                pending_key(7, "g", "t", 1),
                Some(encode_value(&committed(6))),
            ),
        ],
    );
    let end = batch(22, &[(end_key(7, "g"), Some(Bytes::from_static(&[1])))]);
    let abort = batch(23, &[(end_key(8, "g"), Some(Bytes::from_static(&[0])))]);
    let out = batches(&[pending, end, abort]);
    assert_eq!(out.len(), 3);
    let h = BatchHeader::parse(&out[0]).unwrap();
    assert!(h.attributes.get() & weir_storage::batch::TRANSACTIONAL_FLAG != 0);
    assert!(!h.is_control());
    assert_eq!(h.producer_id.get(), 7);
    assert_eq!(span(&out[0]), (20, 21));
    assert_eq!(marker_type(&out[1]), Some(true));
    assert_eq!(BatchHeader::parse(&out[1]).unwrap().producer_id.get(), 7);
    assert_eq!(span(&out[1]), (22, 22));
    assert_eq!(marker_type(&out[2]), Some(false));
    assert_eq!(BatchHeader::parse(&out[2]).unwrap().producer_id.get(), 8);
}

#[test]
fn records_kafka_has_no_kind_for_are_left_out_and_their_offsets_still_spanned() {
    let cut = batch(
        30,
        &[(
            Bytes::from_static(b"\xffweir.cut"),
            Some(Bytes::from_static(&[0; 8])),
        )],
    );
    let mixed = batch(
        31,
        &[
            (encode_key("g", "t", 0), Some(encode_value(&committed(1)))),
            (Bytes::from_static(b"\xffweir.cut"), None),
            (group_state::encode_key("g"), None),
            (Bytes::from_static(b"\xfe"), None),
        ],
    );
    let out = batches(&[cut, mixed]);
    assert_eq!(out.len(), 2);
    assert_eq!(span(&out[0]), (30, 30));
    assert!(decode_records(&out[0]).unwrap().is_empty());
    assert_eq!(
        span(&out[1]),
        (31, 34),
        "up to the last offset of the weir batch"
    );
    let recs = decode_records(&out[1]).unwrap();
    assert_eq!(recs.iter().map(|r| r.offset).collect::<Vec<_>>(), [31, 33]);
}

#[test]
fn a_batch_split_across_chunks_is_rewritten_and_a_cut_short_one_left_out() {
    let a = batch(
        0,
        &[(encode_key("g", "t", 0), Some(encode_value(&committed(1))))],
    );
    let b = batch(
        1,
        &[(encode_key("g", "t", 0), Some(encode_value(&committed(2))))],
    );
    let mut all = a.to_vec();
    all.extend_from_slice(&b);
    let split = a.len() + 5;
    let chunks = [
        Bytes::copy_from_slice(&all[..10]),
        Bytes::copy_from_slice(&all[10..split]),
    ];
    let out = batches(&chunks);
    assert_eq!(out.len(), 1, "the second batch is cut short");
    let whole = batches(&[
        Bytes::copy_from_slice(&all[..10]),
        Bytes::from(all[10..].to_vec()),
    ]);
    assert_eq!(whole.len(), 2);
    assert_eq!(span(&whole[1]), (1, 1));
}
