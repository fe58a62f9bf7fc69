//! The engine's bounded decompression (`batch::compression`), which every compressed batch a
//! producer sends goes through, on arbitrary bytes in each codec: it never panics or aborts,
//! never yields more than its limit, reads the same whole as in small pieces, and gives back
//! exactly what `compress` was given.
//!
//! Input: a mode byte, then the bytes. Mode bits 0-1: the codec (gzip, snappy, lz4, zstd);
//! bits 2-4: the limit, 2^(10 + 2 * bits) bytes (1 KiB .. 16 MiB); bit 5: compress the bytes
//! first (a valid stream to round-trip) instead of decoding them as they are.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_storage::batch::compression::{compress, inflate, InflateError, Inflater};

fuzz_target!(|data: &[u8]| {
    let (mode, rest) = weir_fuzz::split_mode(data);
    let codec = (mode & 3) + 1;
    let limit = 1u64 << (10 + 2 * u64::from((mode >> 2) & 7));
    if mode & 0x20 != 0 {
        let z = compress(codec, rest).expect("compress");
        match inflate(codec, &z, limit) {
            Ok(back) => assert_eq!(back, rest, "codec {codec}: a round trip changed the bytes"),
            Err(InflateError::TooLarge { .. }) => assert!(rest.len() as u64 > limit),
            Err(e) => panic!("codec {codec}: its own stream does not inflate: {e}"),
        }
        return;
    }
    let whole = inflate(codec, rest, limit);
    if let Ok(w) = &whole {
        assert!(w.len() as u64 <= limit, "more than the limit");
    }
    // In 7-byte reads, as the validator's walk may ask: the same bytes, the same verdict.
    let Ok(mut pieces) = Inflater::new(codec, rest, limit) else {
        assert!(whole.is_err());
        return;
    };
    let mut got = Vec::new();
    let mut buf = [0u8; 7];
    let verdict = loop {
        match pieces.read_some(&mut buf) {
            Ok(0) => break Ok(got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => break Err(e),
        }
    };
    assert_eq!(verdict.is_ok(), whole.is_ok(), "codec {codec}: pieces and whole disagree");
    if let (Ok(a), Ok(b)) = (&verdict, &whole) {
        assert_eq!(a, b, "codec {codec}: pieces and whole differ");
    }
});
