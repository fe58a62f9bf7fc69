//! A partition group's Raft message between brokers (docs/replication.md §5.2): which group
//! — the topic id (not the name: a topic deleted and created again is another group) and the
//! partition — and the raft-rs `Message`. Carried in the inter-broker frame kind 4
//! (`broker::peer::net::Frame::Partition`), core 0 to core 0; the receiving core 0 hands it to
//! the core that owns the partition there.
//!
//! Body layout: `topic id (16 bytes) | partition (u32 BE) | raft-rs Message (protobuf)`.

use protobuf::Message as _;
use raft::prelude::Message;

const HEAD_BYTES: usize = 20;

#[derive(Debug, Clone, PartialEq)]
pub struct PartitionMessage {
    /// The topic id as `TopicMeta::id` holds it: 32 hex digits.
    pub topic_id: String,
    pub partition: u32,
    pub msg: Message,
}

impl PartitionMessage {
    pub fn encode_body(&self) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        self.encode_body_into(&mut out)?;
        Ok(out)
    }

    /// Appends the body to `out`: the entries' bytes are copied once, into `out`.
    pub fn encode_body_into(&self, out: &mut Vec<u8>) -> Result<(), String> {
        let mut head = [0u8; HEAD_BYTES];
        head[..16].copy_from_slice(&hex16(&self.topic_id)?);
        head[16..].copy_from_slice(&self.partition.to_be_bytes());
        write_message(out, &head, &self.msg).map_err(|e| format!("encoding a Raft message: {e}"))
    }

    pub fn decode_body(body: &[u8]) -> Result<PartitionMessage, String> {
        Self::decode_body_bytes(&bytes::Bytes::copy_from_slice(body))
    }

    /// [`Self::decode_body`] of a received frame's bytes: the entries' data are slices of
    /// `body`, not copies.
    pub fn decode_body_bytes(body: &bytes::Bytes) -> Result<PartitionMessage, String> {
        if body.len() < HEAD_BYTES {
            return Err(format!("partition message of {} bytes", body.len()));
        }
        let id: [u8; 16] = body[..16].try_into().expect("16 bytes");
        // `TopicMeta::id`'s form: 32 lowercase hex digits.
        let topic_id = uuid::Uuid::from_bytes(id).simple().to_string();
        let partition = u32::from_be_bytes(body[16..20].try_into().expect("4 bytes"));
        if partition > i32::MAX as u32 {
            return Err(format!("partition {partition}"));
        }
        let msg = Message::parse_from_carllerche_bytes(&body.slice(HEAD_BYTES..))
            .map_err(|e| format!("bad Raft message: {e}"))?;
        Ok(PartitionMessage {
            topic_id,
            partition,
            msg,
        })
    }
}

/// Appends `head` and then `msg`'s encoding to `out`, in one allocation: the message is sized
/// once and written in place, so its entries are copied once. One byte more is reserved
/// because protobuf's flush reserves it, which would double a `Vec` filled to capacity.
pub(super) fn write_message(
    out: &mut Vec<u8>,
    head: &[u8],
    msg: &Message,
) -> protobuf::ProtobufResult<()> {
    let size = msg.compute_size() as usize;
    out.reserve(head.len() + size + 1);
    out.extend_from_slice(head);
    let mut os = protobuf::CodedOutputStream::vec(out);
    msg.write_to_with_cached_sizes(&mut os)?;
    os.flush()
}

fn hex16(id: &str) -> Result<[u8; 16], String> {
    let mut out = [0u8; 16];
    if id.len() != 32 {
        return Err(format!("topic id {id:?}"));
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&id[2 * i..2 * i + 2], 16)
            .map_err(|_| format!("topic id {id:?}"))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::prelude::{Entry, MessageType};

    fn sample() -> PartitionMessage {
        let e = Entry {
            index: 5,
            term: 2,
            data: bytes::Bytes::from_static(b"a record batch would be here"),
            ..Default::default()
        };
        let mut msg = Message::default();
        msg.set_msg_type(MessageType::MsgAppend);
        msg.from = 1;
        msg.to = 3;
        msg.term = 2;
        msg.log_term = 2;
        msg.index = 4;
        msg.commit = 4;
        msg.entries = vec![e].into();
        PartitionMessage {
            topic_id: "00ff10a0b1c2d3e4f5a6b7c8d9e0f1a2".into(),
            partition: 7,
            msg,
        }
    }

    #[test]
    fn roundtrip_and_garbage_is_an_error() {
        let m = sample();
        let body = m.encode_body().unwrap();
        assert_eq!(PartitionMessage::decode_body(&body).unwrap(), m);
        for cut in 0..HEAD_BYTES {
            assert!(
                PartitionMessage::decode_body(&body[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        let mut bad = body.clone();
        bad[16] = 0x80; // partition above i32::MAX
        assert!(PartitionMessage::decode_body(&bad).is_err());
        let mut garbage = body[..HEAD_BYTES].to_vec();
        garbage.extend_from_slice(&[0xff; 7]);
        assert!(PartitionMessage::decode_body(&garbage).is_err());
        // Random bytes never panic: they decode to an error or to some message.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..300 {
            let junk: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = PartitionMessage::decode_body(&junk);
        }
        let mut wrong_id = sample();
        wrong_id.topic_id = "xyz".into();
        assert!(wrong_id.encode_body().is_err());
    }
}
