//! The consumer protocol a classic group member embeds in its JoinGroup metadata and a
//! consumer-protocol group decodes (`weir::protocol::consumer_protocol`): any member can send
//! any bytes. Decoding must not panic or allocate beyond the input; what decodes re-encodes
//! to bytes that decode to the same partitions and topics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir::protocol::consumer_protocol as cp;

fuzz_target!(|data: &[u8]| {
    if let Some(s) = cp::decode_subscription(data) {
        let again = cp::encode_subscription(s.version.min(3), &s.topics, &s.owned);
        let back = cp::decode_subscription(&again).expect("a subscription weir wrote decodes");
        assert_eq!(back.topics, s.topics);
        if s.version >= 1 {
            assert_eq!(back.owned, s.owned);
        }
    }
    if let Some(a) = cp::decode_assignment(data) {
        let again = cp::encode_assignment(cp::version_of(data), &a);
        assert_eq!(cp::decode_assignment(&again), Some(a));
    }
});
