//! Whole request frames, as the broker's connection loop hands them to the decoder
//! (`weir::protocol::wire::decode_request`, the frame without its 4-byte size prefix): arbitrary bytes
//! must come back as a request or a `ProtocolError` — never a panic, an abort on a huge
//! allocation, or a hang — for every API key and version the broker accepts.
//!
//! Input: the frame itself. Seeds (fuzz/corpus/request_frames) are frames recorded from
//! librdkafka, kafka-python and sarama (in its old modes: the versions KIP-896 removed, which
//! weir serves) talking to weir: produce, fetch, metadata, admin and group requests of the
//! versions those clients really send.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let frame = Bytes::copy_from_slice(data);
    match weir::protocol::wire::decode_request(frame) {
        Ok(req) => {
            // What was accepted is what the header said, within the versions we speak
            // (except an unsupported ApiVersions, which is answered, KIP-511).
            let key = i16::from_be_bytes([data[0], data[1]]);
            let version = i16::from_be_bytes([data[2], data[3]]);
            let correlation = i32::from_be_bytes([data[4], data[5], data[6], data[7]]);
            assert_eq!(req.raw_key(), key);
            assert_eq!(req.version, version);
            assert_eq!(req.correlation_id, correlation);
            if let weir::protocol::wire::Body::StreamFetch(op) = &req.body {
                // The extension re-encodes to what was read.
                assert_eq!(version, weir::protocol::stream_fetch::VERSION);
                let mut b = bytes::BytesMut::new();
                op.encode(&mut b);
                assert_eq!(weir::protocol::stream_fetch::StreamOp::decode(b.freeze()).as_ref(), Ok(op));
            } else if !matches!(req.body, weir::protocol::wire::Body::ApiVersionsUnsupported) {
                let (lo, hi) = weir::protocol::wire::supported(req.key).expect("a supported api");
                assert!(lo <= version && version <= hi);
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
