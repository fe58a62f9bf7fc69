//! The frames of the inter-broker protocol (`weir::protocol::peer`), on arbitrary bytes: what
//! anyone who reaches a broker's peer port can send (with PLAINTEXT, or inside a TLS
//! connection a broker's certificate opened). `read_frame` over a stream of frames and
//! `Frame::decode` of one never panic or allocate past `MAX_FRAME_BYTES`; a frame that decodes
//! re-encodes to bytes that decode to the same frame; a core link's hello (`LinkHello`) that
//! decodes re-encodes to its bytes.
//!
//! Input: the bytes as they would arrive on the connection (several frames, or garbage).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir::protocol::peer::{read_frame, Frame, LinkHello};

fuzz_target!(|data: &[u8]| {
    let _ = Frame::decode(data);
    // A core link's hello (what the accepting core peeks at before it hands the connection
    // on): one that reads encodes back to the same bytes.
    if let Ok(hello) = LinkHello::decode(data) {
        assert_eq!(&hello.encode()[..], data, "a hello changed through decode and encode");
    }
    futures_lite::future::block_on(async {
        let mut stream = data;
        for _ in 0..64 {
            match read_frame(&mut stream).await {
                Ok(Some(frame)) => {
                    let bytes = frame.encode();
                    let again = Frame::decode(&bytes[4..]).expect("a frame's encoding decodes");
                    assert_eq!(again, frame, "a frame changed through encode and decode");
                }
                Ok(None) | Err(_) => break,
            }
        }
    });
});
