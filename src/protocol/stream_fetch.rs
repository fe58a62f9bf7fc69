//! Streaming fetch: weir's protocol extension (docs/streaming-fetch.md). One request opens
//! a stream over some partitions with a byte credit and a deadline; the broker then pushes
//! fetch-shaped batches on the same connection as data is appended, without new requests,
//! until the credit is spent, the deadline passes, or the client cancels. The client adds
//! credit as it drains its buffer.
//!
//! This module is the wire format, shared by the broker and the native client (and fed to
//! the `request_frames` fuzz target through `weir::protocol::wire`). All integers big-endian.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The API key: outside Kafka's range (0..~100), advertised in ApiVersions only to clients
/// whose `client_software_name` is [`CLIENT_SOFTWARE_NAME`].
pub const API_KEY: i16 = 32000;
pub const VERSION: i16 = 0;
/// ApiVersions v3+ `client_software_name` that asks for the extension.
pub const CLIENT_SOFTWARE_NAME: &str = "weir-client";

pub const OP_OPEN: i8 = 0;
pub const OP_CREDIT: i8 = 1;
pub const OP_CANCEL: i8 = 2;

pub const MSG_ACK: i8 = 0;
pub const MSG_DATA: i8 = 1;
pub const MSG_END: i8 = 2;

/// Why a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    CreditSpent = 0,
    Deadline = 1,
    Cancelled = 2,
    /// Every partition failed (see the error code), or the broker is shutting down.
    Error = 3,
}

impl EndReason {
    fn from_i8(v: i8) -> Option<EndReason> {
        Some(match v {
            0 => EndReason::CreditSpent,
            1 => EndReason::Deadline,
            2 => EndReason::Cancelled,
            3 => EndReason::Error,
            _ => return None,
        })
    }
}

/// A partition and the offset to stream it from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPartition {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// A StreamFetch request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamOp {
    Open {
        stream_id: i32,
        /// Bytes of record batches the broker may push before it needs more credit.
        credit: i32,
        /// Largest push (record bytes); a push still carries at least one whole batch.
        max_push_bytes: i32,
        /// The stream ends after this long (ms).
        deadline_ms: i32,
        partitions: Vec<StreamPartition>,
    },
    Credit {
        stream_id: i32,
        add: i32,
    },
    Cancel {
        stream_id: i32,
    },
}

/// Records of one partition in a push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushPartition {
    pub topic: String,
    pub partition: i32,
    pub error: i16,
    pub high_watermark: i64,
    /// Whole record batches, as in a Fetch response.
    pub records: Bytes,
}

/// What the broker sends on a stream (the body after the response header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamMsg {
    /// The answer to Open: 0, or why the stream was not started.
    Ack { stream_id: i32, error: i16 },
    Data {
        stream_id: i32,
        seq: i32,
        /// Credit left after this push.
        credit_left: i32,
        partitions: Vec<PushPartition>,
    },
    End {
        stream_id: i32,
        seq: i32,
        reason: EndReason,
        error: i16,
    },
}

fn put_str(b: &mut BytesMut, s: &str) {
    b.put_i16(s.len() as i16);
    b.put_slice(s.as_bytes());
}

/// Why bytes are not a valid StreamFetch message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stream fetch: {}", self.0)
    }
}

struct Reader(Bytes);

impl Reader {
    fn need(&self, n: usize, what: &str) -> Result<(), DecodeError> {
        if self.0.remaining() < n {
            Err(DecodeError(format!("truncated at {what}")))
        } else {
            Ok(())
        }
    }
    fn i8(&mut self, w: &str) -> Result<i8, DecodeError> {
        self.need(1, w)?;
        Ok(self.0.get_i8())
    }
    fn i16(&mut self, w: &str) -> Result<i16, DecodeError> {
        self.need(2, w)?;
        Ok(self.0.get_i16())
    }
    fn i32(&mut self, w: &str) -> Result<i32, DecodeError> {
        self.need(4, w)?;
        Ok(self.0.get_i32())
    }
    fn i64(&mut self, w: &str) -> Result<i64, DecodeError> {
        self.need(8, w)?;
        Ok(self.0.get_i64())
    }
    fn str(&mut self, w: &str) -> Result<String, DecodeError> {
        let n = self.i16(w)?;
        if n < 0 {
            return Err(DecodeError(format!("negative length at {w}")));
        }
        self.need(n as usize, w)?;
        let b = self.0.split_to(n as usize);
        String::from_utf8(b.to_vec()).map_err(|_| DecodeError(format!("{w} is not UTF-8")))
    }
    fn bytes(&mut self, w: &str) -> Result<Bytes, DecodeError> {
        let n = self.i32(w)?;
        if n < 0 {
            return Err(DecodeError(format!("negative length at {w}")));
        }
        self.need(n as usize, w)?;
        Ok(self.0.split_to(n as usize))
    }
    /// An array count, bounded by the bytes left (each element takes at least `min` bytes).
    fn count(&mut self, w: &str, min: usize) -> Result<usize, DecodeError> {
        let n = self.i32(w)?;
        if n < 0 || (n as usize).saturating_mul(min) > self.0.remaining() {
            return Err(DecodeError(format!("bad count {n} at {w}")));
        }
        Ok(n as usize)
    }
    fn end(&self) -> Result<(), DecodeError> {
        if self.0.has_remaining() {
            Err(DecodeError(format!(
                "{} trailing bytes",
                self.0.remaining()
            )))
        } else {
            Ok(())
        }
    }
}

impl StreamOp {
    pub fn stream_id(&self) -> i32 {
        match self {
            StreamOp::Open { stream_id, .. }
            | StreamOp::Credit { stream_id, .. }
            | StreamOp::Cancel { stream_id } => *stream_id,
        }
    }

    pub fn encode(&self, b: &mut BytesMut) {
        match self {
            StreamOp::Open {
                stream_id,
                credit,
                max_push_bytes,
                deadline_ms,
                partitions,
            } => {
                b.put_i8(OP_OPEN);
                b.put_i32(*stream_id);
                b.put_i32(*credit);
                b.put_i32(*max_push_bytes);
                b.put_i32(*deadline_ms);
                b.put_i32(partitions.len() as i32);
                for p in partitions {
                    put_str(b, &p.topic);
                    b.put_i32(p.partition);
                    b.put_i64(p.offset);
                }
            }
            StreamOp::Credit { stream_id, add } => {
                b.put_i8(OP_CREDIT);
                b.put_i32(*stream_id);
                b.put_i32(*add);
            }
            StreamOp::Cancel { stream_id } => {
                b.put_i8(OP_CANCEL);
                b.put_i32(*stream_id);
            }
        }
    }

    pub fn decode(body: Bytes) -> Result<StreamOp, DecodeError> {
        let mut r = Reader(body);
        let op = r.i8("op")?;
        let stream_id = r.i32("stream_id")?;
        let out = match op {
            OP_OPEN => {
                let credit = r.i32("credit")?;
                let max_push_bytes = r.i32("max_push_bytes")?;
                let deadline_ms = r.i32("deadline_ms")?;
                let n = r.count("partitions", 14)?;
                let mut partitions = Vec::with_capacity(n);
                for _ in 0..n {
                    partitions.push(StreamPartition {
                        topic: r.str("topic")?,
                        partition: r.i32("partition")?,
                        offset: r.i64("offset")?,
                    });
                }
                StreamOp::Open {
                    stream_id,
                    credit,
                    max_push_bytes,
                    deadline_ms,
                    partitions,
                }
            }
            OP_CREDIT => StreamOp::Credit {
                stream_id,
                add: r.i32("add")?,
            },
            OP_CANCEL => StreamOp::Cancel { stream_id },
            other => return Err(DecodeError(format!("unknown op {other}"))),
        };
        r.end()?;
        Ok(out)
    }

    /// A whole request frame: size, request header v1 (key, version, correlation id,
    /// client id), body.
    pub fn request_frame(&self, correlation_id: i32, client_id: &str) -> Bytes {
        let mut body = BytesMut::new();
        body.put_i16(API_KEY);
        body.put_i16(VERSION);
        body.put_i32(correlation_id);
        put_str(&mut body, client_id);
        self.encode(&mut body);
        let mut frame = BytesMut::with_capacity(4 + body.len());
        frame.put_i32(body.len() as i32);
        frame.put_slice(&body);
        frame.freeze()
    }
}

impl StreamMsg {
    pub fn stream_id(&self) -> i32 {
        match self {
            StreamMsg::Ack { stream_id, .. }
            | StreamMsg::Data { stream_id, .. }
            | StreamMsg::End { stream_id, .. } => *stream_id,
        }
    }

    /// A whole response frame: size, correlation id (the Open's), body. Record bytes are
    /// returned as their own pieces (not copied).
    pub fn response_pieces(&self, correlation_id: i32) -> Vec<Bytes> {
        let mut head = BytesMut::new();
        let mut pieces = Vec::new();
        head.put_i32(0); // size, patched below
        head.put_i32(correlation_id);
        match self {
            StreamMsg::Ack { stream_id, error } => {
                head.put_i32(*stream_id);
                head.put_i8(MSG_ACK);
                head.put_i16(*error);
            }
            StreamMsg::End {
                stream_id,
                seq,
                reason,
                error,
            } => {
                head.put_i32(*stream_id);
                head.put_i8(MSG_END);
                head.put_i32(*seq);
                head.put_i8(*reason as i8);
                head.put_i16(*error);
            }
            StreamMsg::Data {
                stream_id,
                seq,
                credit_left,
                partitions,
            } => {
                head.put_i32(*stream_id);
                head.put_i8(MSG_DATA);
                head.put_i32(*seq);
                head.put_i32(*credit_left);
                head.put_i32(partitions.len() as i32);
                let mut cur = head;
                for p in partitions {
                    put_str(&mut cur, &p.topic);
                    cur.put_i32(p.partition);
                    cur.put_i16(p.error);
                    cur.put_i64(p.high_watermark);
                    cur.put_i32(p.records.len() as i32);
                    pieces.push(cur.split().freeze());
                    if !p.records.is_empty() {
                        pieces.push(p.records.clone());
                    }
                }
                head = cur;
            }
        }
        if !head.is_empty() {
            pieces.push(head.freeze());
        }
        let total: usize = pieces.iter().map(Bytes::len).sum();
        let mut first = BytesMut::from(&pieces[0][..]);
        first[..4].copy_from_slice(&((total - 4) as i32).to_be_bytes());
        pieces[0] = first.freeze();
        pieces
    }

    /// Decodes a response frame body (after the size prefix; it starts with the
    /// correlation id).
    pub fn decode(body: Bytes) -> Result<StreamMsg, DecodeError> {
        let mut r = Reader(body);
        let _correlation_id = r.i32("correlation_id")?;
        let stream_id = r.i32("stream_id")?;
        let out = match r.i8("kind")? {
            MSG_ACK => StreamMsg::Ack {
                stream_id,
                error: r.i16("error")?,
            },
            MSG_END => {
                let seq = r.i32("seq")?;
                let reason = r.i8("reason")?;
                StreamMsg::End {
                    stream_id,
                    seq,
                    reason: EndReason::from_i8(reason)
                        .ok_or_else(|| DecodeError(format!("unknown end reason {reason}")))?,
                    error: r.i16("error")?,
                }
            }
            MSG_DATA => {
                let seq = r.i32("seq")?;
                let credit_left = r.i32("credit_left")?;
                let n = r.count("partitions", 20)?;
                let mut partitions = Vec::with_capacity(n);
                for _ in 0..n {
                    partitions.push(PushPartition {
                        topic: r.str("topic")?,
                        partition: r.i32("partition")?,
                        error: r.i16("error")?,
                        high_watermark: r.i64("high_watermark")?,
                        records: r.bytes("records")?,
                    });
                }
                StreamMsg::Data {
                    stream_id,
                    seq,
                    credit_left,
                    partitions,
                }
            }
            other => return Err(DecodeError(format!("unknown message kind {other}"))),
        };
        r.end()?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body_of(frame: &[Bytes]) -> Bytes {
        let all: Vec<u8> = frame.iter().flat_map(|b| b.iter().copied()).collect();
        let size = i32::from_be_bytes(all[..4].try_into().unwrap()) as usize;
        assert_eq!(size, all.len() - 4, "size prefix");
        Bytes::from(all[4..].to_vec())
    }

    #[test]
    fn ops_round_trip() {
        for op in [
            StreamOp::Open {
                stream_id: 7,
                credit: 1 << 20,
                max_push_bytes: 65536,
                deadline_ms: 30_000,
                partitions: vec![
                    StreamPartition {
                        topic: "t".into(),
                        partition: 0,
                        offset: 5,
                    },
                    StreamPartition {
                        topic: "ü".into(),
                        partition: 3,
                        offset: 0,
                    },
                ],
            },
            StreamOp::Credit {
                stream_id: 7,
                add: 4096,
            },
            StreamOp::Cancel { stream_id: 7 },
        ] {
            let mut b = BytesMut::new();
            op.encode(&mut b);
            assert_eq!(StreamOp::decode(b.clone().freeze()).unwrap(), op);
            // Every truncation is an error, not a panic.
            for cut in 0..b.len() {
                assert!(StreamOp::decode(b.clone().freeze().slice(..cut)).is_err());
            }
        }
    }

    #[test]
    fn messages_round_trip() {
        for m in [
            StreamMsg::Ack {
                stream_id: 1,
                error: 0,
            },
            StreamMsg::End {
                stream_id: 1,
                seq: 9,
                reason: EndReason::Deadline,
                error: 0,
            },
            StreamMsg::Data {
                stream_id: 1,
                seq: 2,
                credit_left: 100,
                partitions: vec![
                    PushPartition {
                        topic: "a".into(),
                        partition: 1,
                        error: 0,
                        high_watermark: 10,
                        records: Bytes::from_static(b"0123456789"),
                    },
                    PushPartition {
                        topic: "b".into(),
                        partition: 0,
                        error: 1,
                        high_watermark: -1,
                        records: Bytes::new(),
                    },
                ],
            },
        ] {
            let body = body_of(&m.response_pieces(42));
            assert_eq!(i32::from_be_bytes(body[..4].try_into().unwrap()), 42);
            assert_eq!(StreamMsg::decode(body).unwrap(), m);
        }
    }
}
