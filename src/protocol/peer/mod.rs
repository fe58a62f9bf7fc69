//! The frames brokers exchange on their peer port (`controller.quorum.voters`), as bytes: the
//! broker's transport (`broker::peer::net`) sends and reads them, and the fuzz target
//! `peer_frames` feeds them arbitrary bytes, as whoever reaches the port can.
//!
//! A frame is `length (u32 BE) | kind (u8) | body`, the length counting kind and body:
//! - kind 1: a raft-rs `Message` (protobuf);
//! - kind 2: `Forward` (JSON): an admin request's records for the metadata leader;
//! - kind 3: `Reply` (JSON): the Raft index the leader proposed them at, or why not;
//! - kind 4: a partition group's Raft message (`PartitionMessage`);
//! - kind 5: `CallFrame` (JSON): a transaction request for another broker;
//! - kind 6: `AnswerFrame` (JSON): its answer;
//! - kind 7: a keepalive (the sender's broker id, u64 BE).
//!
//! A frame that does not decode is an error for its connection only.
//!
//! A connection from one core of a broker to a chosen core of another (a *core link*,
//! `broker::peer::links`) opens with a `LinkHello` before anything else, TLS included: six
//! bytes `0xF7 'W' 'P' version core (u16 BE)`. Its first byte can begin neither a frame (whose
//! length is at most `MAX_FRAME_BYTES`, so its first byte is 0 or 1) nor a TLS record (0x16),
//! so the accepting core tells a core link from any other connection by that byte alone.

mod call;
mod partition;

use bytes::Bytes;
use futures_lite::AsyncReadExt;
use protobuf::Message as _;
use raft::prelude::Message;
use serde::{Deserialize, Serialize};

pub use call::{AnswerFrame, CallFrame, PeerAnswer, PeerCall, QuorumStatus};
pub use partition::PartitionMessage;

use crate::cluster::Record;

/// Largest frame accepted from a peer.
pub const MAX_FRAME_BYTES: usize = 16 << 20;
const KIND_RAFT: u8 = 1;
const KIND_FORWARD: u8 = 2;
const KIND_REPLY: u8 = 3;
const KIND_PARTITION: u8 = 4;
const KIND_CALL: u8 = 5;
const KIND_ANSWER: u8 = 6;
const KIND_PING: u8 = 7;

/// The first bytes of a core link: which core of the accepting broker it is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkHello {
    pub core: u16,
}

impl LinkHello {
    /// The hello's first byte, which no frame and no TLS record begins with.
    pub const FIRST: u8 = 0xF7;
    pub const LEN: usize = 6;
    const VERSION: u8 = 1;

    pub fn encode(&self) -> [u8; LinkHello::LEN] {
        let [hi, lo] = self.core.to_be_bytes();
        [Self::FIRST, b'W', b'P', Self::VERSION, hi, lo]
    }

    /// Reads a hello from its `LEN` bytes.
    pub fn decode(b: &[u8]) -> Result<LinkHello, String> {
        match b {
            [Self::FIRST, b'W', b'P', Self::VERSION, hi, lo] => Ok(LinkHello {
                core: u16::from_be_bytes([*hi, *lo]),
            }),
            [Self::FIRST, b'W', b'P', v, _, _] => Err(format!("core link version {v}")),
            _ => Err("not a core link hello".into()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Forward {
    pub from: u64,
    pub req: u64,
    pub records: Vec<Record>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub req: u64,
    /// The Raft index of the proposed entry, or why it was not proposed.
    pub result: Result<u64, String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Raft(Message),
    Forward(Forward),
    Reply(Reply),
    Partition(PartitionMessage),
    Call(CallFrame),
    Answer(AnswerFrame),
    /// A keepalive from the broker with this id.
    Ping(u64),
}

impl Frame {
    /// The broker that sent the frame, for the kinds that name it.
    pub fn sender(&self) -> Option<u64> {
        match self {
            Frame::Raft(m) => Some(m.from),
            Frame::Forward(f) => Some(f.from),
            Frame::Partition(p) => Some(p.msg.from),
            Frame::Call(c) => Some(c.from),
            Frame::Ping(from) => Some(*from),
            Frame::Reply(_) | Frame::Answer(_) => None,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        // Length and kind first (the length is filled in last), then the body written in
        // place: one allocation, and a Raft message's entries copied once.
        let mut out = vec![0u8; 5];
        let kind = match self {
            Frame::Raft(m) => {
                partition::write_message(&mut out, &[], m).expect("a message encodes");
                KIND_RAFT
            }
            Frame::Partition(p) => {
                p.encode_body_into(&mut out)
                    .expect("a partition message of a known topic encodes");
                KIND_PARTITION
            }
            Frame::Forward(f) => json(&mut out, f, KIND_FORWARD),
            Frame::Reply(r) => json(&mut out, r, KIND_REPLY),
            Frame::Call(c) => json(&mut out, c, KIND_CALL),
            Frame::Answer(a) => json(&mut out, a, KIND_ANSWER),
            Frame::Ping(from) => {
                out.extend_from_slice(&from.to_be_bytes());
                KIND_PING
            }
        };
        let len = (out.len() - 4) as u32;
        out[..4].copy_from_slice(&len.to_be_bytes());
        out[4] = kind;
        out
    }

    /// Decodes a frame's kind and body (after the length).
    pub fn decode(kind_and_body: &[u8]) -> Result<Frame, String> {
        Self::decode_bytes(Bytes::copy_from_slice(kind_and_body))
    }

    /// [`Frame::decode`] of a received frame's bytes: a Raft message's entries are slices of
    /// them, not copies.
    pub fn decode_bytes(kind_and_body: Bytes) -> Result<Frame, String> {
        let (&kind, _) = kind_and_body.split_first().ok_or("empty frame")?;
        let rest = kind_and_body.slice(1..);
        let body = &rest[..];
        match kind {
            KIND_RAFT => Message::parse_from_carllerche_bytes(&rest)
                .map(Frame::Raft)
                .map_err(|e| format!("bad Raft message: {e}")),
            KIND_FORWARD => serde_json::from_slice(body)
                .map(Frame::Forward)
                .map_err(|e| format!("bad forward: {e}")),
            KIND_REPLY => serde_json::from_slice(body)
                .map(Frame::Reply)
                .map_err(|e| format!("bad reply: {e}")),
            KIND_PARTITION => PartitionMessage::decode_body_bytes(&rest).map(Frame::Partition),
            KIND_CALL => serde_json::from_slice(body)
                .map(Frame::Call)
                .map_err(|e| format!("bad call: {e}")),
            KIND_ANSWER => serde_json::from_slice(body)
                .map(Frame::Answer)
                .map_err(|e| format!("bad answer: {e}")),
            KIND_PING => body
                .try_into()
                .map(|b| Frame::Ping(u64::from_be_bytes(b)))
                .map_err(|_| format!("bad keepalive of {} bytes", body.len())),
            k => Err(format!("unknown frame kind {k}")),
        }
    }
}

/// Appends `v` as JSON to a frame being encoded; returns `kind`.
fn json<T: Serialize>(out: &mut Vec<u8>, v: &T, kind: u8) -> u8 {
    serde_json::to_writer(out, v).expect("encodes");
    kind
}

/// Reads one frame; `Ok(None)` at a clean end of the stream. Peers' connections are read
/// through a `BufReader` (`PEER_READ_BUFFER`): the frames of one write arrive in one read.
pub async fn read_frame<R: futures_lite::AsyncRead + Unpin>(
    stream: &mut R,
) -> Result<Option<Frame>, String> {
    let mut len = [0u8; 4];
    match stream.read_exact(&mut len).await {
        Ok(()) => {}
        // Closed between frames: cleanly, or reset (a peer that reconnects drops its old
        // connection; over TLS without a close_notify).
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
            ) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(e.to_string()),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len == 0 || len > MAX_FRAME_BYTES {
        return Err(format!("frame of {len} bytes"));
    }
    // Memory follows the bytes that arrive (`read_to_end` grows the buffer as they do), never
    // the size the prefix announces: on a port where the peer has not proven who it is yet, a
    // connection announcing 16 MiB and sending nothing holds a few KiB.
    let mut buf = Vec::with_capacity(len.min(64 << 10));
    (&mut *stream)
        .take(len as u64)
        .read_to_end(&mut buf)
        .await
        .map_err(|e| e.to_string())?;
    if buf.len() < len {
        return Err(format!(
            "connection closed inside a frame ({} of {len} bytes)",
            buf.len()
        ));
    }
    // The entries decoded from it share this buffer (and may be cached as long as the log's
    // recent batches are): no spare capacity rides along with them.
    buf.shrink_to_fit();
    Frame::decode_bytes(Bytes::from(buf)).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A core link's hello reads back; it cannot be taken for a frame's length (a stream of
    /// frames read from a hello fails at once) nor for a TLS record, and other bytes, or a
    /// later version, are refused by name.
    #[test]
    fn link_hello_roundtrips_and_is_no_frame() {
        for core in [0u16, 1, 7, u16::MAX] {
            let b = LinkHello { core }.encode();
            assert_eq!(LinkHello::decode(&b), Ok(LinkHello { core }));
            let mut stream = &b[..];
            assert!(futures_lite::future::block_on(read_frame(&mut stream)).is_err());
            assert_ne!(b[0], 0x16, "a TLS handshake record");
        }
        let frame = Frame::Ping(3).encode();
        assert!(LinkHello::decode(&frame[..LinkHello::LEN]).is_err());
        let mut later = LinkHello { core: 1 }.encode();
        later[3] = 2;
        assert_eq!(
            LinkHello::decode(&later),
            Err("core link version 2".to_string())
        );
        assert!(LinkHello::decode(&later[..5]).is_err());
    }

    #[test]
    fn frames_roundtrip_and_garbage_is_an_error() {
        let m = Message {
            from: 1,
            to: 2,
            term: 7,
            ..Default::default()
        };
        let frames = [
            Frame::Raft(m),
            Frame::Forward(Forward {
                from: 2,
                req: 9,
                records: vec![Record::DeleteTopic { name: "t".into() }],
            }),
            Frame::Reply(Reply {
                req: 9,
                result: Err("not the leader".into()),
            }),
            Frame::Partition(PartitionMessage {
                topic_id: "0123456789abcdef0123456789abcdef".into(),
                partition: 3,
                msg: Message {
                    from: 2,
                    to: 1,
                    term: 4,
                    ..Default::default()
                },
            }),
            Frame::Call(CallFrame {
                from: 2,
                req: 10,
                call: PeerCall::Markers {
                    producer_id: 5,
                    epoch: 1,
                    commit: true,
                    parts: vec![("t".into(), 0)],
                },
            }),
            Frame::Answer(AnswerFrame {
                req: 10,
                answer: PeerAnswer::Codes(vec![0, 6]),
            }),
            Frame::Ping(3),
        ];
        for f in frames {
            let bytes = f.encode();
            let len = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
            assert_eq!(len, bytes.len() - 4);
            assert_eq!(Frame::decode(&bytes[4..]).unwrap(), f);
        }
        assert!(Frame::decode(&[]).is_err());
        assert!(Frame::decode(&[9, 1, 2]).is_err());
        assert!(Frame::decode(&[KIND_FORWARD, b'{']).is_err());
        assert!(Frame::decode(&[KIND_RAFT, 0xff, 0xff, 0xff]).is_err());
        assert!(Frame::decode(&[KIND_PARTITION, 1, 2, 3]).is_err());
        assert!(Frame::decode(&[KIND_CALL, b'[']).is_err());
        assert!(Frame::decode(&[KIND_ANSWER, b'{', b'}']).is_err());
        assert!(Frame::decode(&[KIND_PING, 0, 0, 1]).is_err());
    }

    /// A received partition message's entries are slices of the frame, not copies; and the
    /// frame's bytes are the message's encoding, once.
    #[test]
    fn entries_are_decoded_in_place_and_encoded_once() {
        let e = raft::prelude::Entry {
            index: 5,
            term: 2,
            data: Bytes::from(vec![7u8; 10_000]),
            ..Default::default()
        };
        let mut msg = Message {
            from: 1,
            to: 2,
            term: 2,
            ..Default::default()
        };
        msg.entries = vec![e.clone(), e].into();
        let f = Frame::Partition(PartitionMessage {
            topic_id: "0123456789abcdef0123456789abcdef".into(),
            partition: 1,
            msg,
        });
        let bytes = f.encode();
        assert!(
            bytes.len() < 20_100,
            "{} bytes for 20,000 of entries",
            bytes.len()
        );
        // One allocation of the frame's size (protobuf's flush once doubled a full buffer).
        assert!(
            bytes.capacity() <= bytes.len() + 1,
            "capacity {}",
            bytes.capacity()
        );
        let frame = Bytes::from(bytes[4..].to_vec());
        let range = frame.as_ptr() as usize..frame.as_ptr() as usize + frame.len();
        let Frame::Partition(p) = Frame::decode_bytes(frame.clone()).unwrap() else {
            panic!("not a partition message");
        };
        assert_eq!(Frame::Partition(p.clone()), f);
        for e in p.msg.entries.iter() {
            assert!(
                range.contains(&(e.data.as_ptr() as usize)),
                "entry data copied"
            );
        }
    }

    #[test]
    fn a_frame_cut_short_is_an_error_and_a_whole_one_reads_back() {
        futures_lite::future::block_on(async {
            // Announces the largest frame allowed, then the stream ends after 10 bytes.
            let mut cut = (MAX_FRAME_BYTES as u32).to_be_bytes().to_vec();
            cut.extend_from_slice(&[KIND_PING; 10]);
            let err = read_frame(&mut futures_lite::io::Cursor::new(cut))
                .await
                .unwrap_err();
            assert!(err.contains("closed inside a frame (10 of"), "{err}");

            let mut two = Frame::Ping(7).encode();
            two.extend(Frame::Ping(8).encode());
            let mut rd = futures_lite::io::Cursor::new(two);
            assert_eq!(read_frame(&mut rd).await.unwrap(), Some(Frame::Ping(7)));
            assert_eq!(read_frame(&mut rd).await.unwrap(), Some(Frame::Ping(8)));
            assert_eq!(read_frame(&mut rd).await.unwrap(), None);
        });
    }
}
