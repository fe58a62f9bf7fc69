//! A group's membership as a record of its bucket's offsets log (Kafka's *group metadata*
//! record): written when a generation becomes Stable, removed (tombstone) when the group
//! becomes Empty or is deleted, so that a new coordinator — after a failover in a cluster,
//! or the same broker after a restart — resumes the group Stable with the same members,
//! generation and assignments instead of making every member rejoin. Record layout
//! (big-endian), beside `offsets.rs`' kind 1 and `txn.rs`' kinds 2 and 3:
//!
//! ```text
//! kind 4, group state: key   kind u8 | group len u16 | group
//!                      value version u8 (1) | protocol_type str | generation i32 | protocol str
//!                            | leader str | state_ms i64 | members u32 | member*
//!                      member:  member_id str | has_instance u8 | [instance_id str]
//!                            | client_id str | client_host str | rebalance_timeout_ms i32
//!                            | session_timeout_ms i32 | protocols u16 | (name str | metadata bytes)*
//!                            | assignment bytes
//!                      str = len u16 | UTF-8; bytes = len u32 | bytes
//!                      (no value = tombstone: the group is Empty or deleted)
//! ```
//!
//! Unlike Kafka's record (which keeps only the chosen protocol's subscription) every protocol
//! a member offered is kept, so a member rejoining with the same protocols after a failover
//! is recognised as unchanged and causes no rebalance. Brokers from before this record skip
//! it at replay (an unknown kind), so a downgrade loses only the membership (one rebalance).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use weir_storage::batch::RecordBatchBuilder;

use super::{get_str, now_ms, BucketError, OffsetStore};

pub(crate) const KIND_GROUP: u8 = 4;
const VERSION: u8 = 1;

/// One member of a stored group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// Every protocol the member offered: (name, metadata), in its order of preference.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
}

/// A Stable group as stored: its generation and members (in join order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredGroup {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: String,
    pub leader: String,
    /// When the state was written (ms since the epoch).
    pub state_ms: i64,
    pub members: Vec<StoredMember>,
}

impl StoredGroup {
    /// About how many bytes the record takes (for the store's compaction threshold).
    pub(crate) fn approx_bytes(&self) -> u64 {
        let members: usize = self
            .members
            .iter()
            .map(|m| {
                48 + m.member_id.len()
                    + m.group_instance_id.as_ref().map_or(0, |i| i.len())
                    + m.client_id.len()
                    + m.client_host.len()
                    + m.protocols
                        .iter()
                        .map(|(n, md)| 6 + n.len() + md.len())
                        .sum::<usize>()
                    + m.assignment.len()
            })
            .sum();
        (40 + self.protocol_type.len() + self.protocol.len() + self.leader.len() + members) as u64
    }
}

fn put_str(b: &mut BytesMut, s: &str) {
    let s = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
    b.put_u16(s.len() as u16);
    b.put_slice(s);
}

fn put_bytes(b: &mut BytesMut, v: &[u8]) {
    b.put_u32(v.len() as u32);
    b.put_slice(v);
}

fn get_bytes(buf: &mut &[u8]) -> Option<Bytes> {
    if buf.remaining() < 4 {
        return None;
    }
    let n = buf.get_u32() as usize;
    if buf.remaining() < n {
        return None;
    }
    let v = Bytes::copy_from_slice(&buf[..n]);
    buf.advance(n);
    Some(v)
}

pub(crate) fn encode_key(group: &str) -> Bytes {
    let mut k = BytesMut::with_capacity(3 + group.len());
    k.put_u8(KIND_GROUP);
    put_str(&mut k, group);
    k.freeze()
}

pub(crate) fn decode_key(mut k: &[u8]) -> Option<String> {
    if k.remaining() < 1 || k.get_u8() != KIND_GROUP {
        return None;
    }
    let group = get_str(&mut k)?;
    k.is_empty().then_some(group)
}

pub(crate) fn encode_value(g: &StoredGroup) -> Bytes {
    let mut v = BytesMut::with_capacity(g.approx_bytes() as usize);
    v.put_u8(VERSION);
    put_str(&mut v, &g.protocol_type);
    v.put_i32(g.generation);
    put_str(&mut v, &g.protocol);
    put_str(&mut v, &g.leader);
    v.put_i64(g.state_ms);
    v.put_u32(g.members.len() as u32);
    for m in &g.members {
        put_str(&mut v, &m.member_id);
        match &m.group_instance_id {
            Some(i) => {
                v.put_u8(1);
                put_str(&mut v, i);
            }
            None => v.put_u8(0),
        }
        put_str(&mut v, &m.client_id);
        put_str(&mut v, &m.client_host);
        v.put_i32(m.rebalance_timeout_ms);
        v.put_i32(m.session_timeout_ms);
        v.put_u16(m.protocols.len().min(u16::MAX as usize) as u16);
        for (name, md) in m.protocols.iter().take(u16::MAX as usize) {
            put_str(&mut v, name);
            put_bytes(&mut v, md);
        }
        put_bytes(&mut v, &m.assignment);
    }
    v.freeze()
}

pub(crate) fn decode_value(mut v: &[u8]) -> Option<StoredGroup> {
    if v.remaining() < 1 || v.get_u8() != VERSION {
        return None;
    }
    let protocol_type = get_str(&mut v)?;
    if v.remaining() < 4 {
        return None;
    }
    let generation = v.get_i32();
    let protocol = get_str(&mut v)?;
    let leader = get_str(&mut v)?;
    if v.remaining() < 12 {
        return None;
    }
    let state_ms = v.get_i64();
    let n = v.get_u32() as usize;
    let mut members = Vec::with_capacity(n.min(v.remaining() / 16));
    for _ in 0..n {
        let member_id = get_str(&mut v)?;
        if v.remaining() < 1 {
            return None;
        }
        let group_instance_id = match v.get_u8() {
            0 => None,
            1 => Some(get_str(&mut v)?),
            _ => return None,
        };
        let client_id = get_str(&mut v)?;
        let client_host = get_str(&mut v)?;
        if v.remaining() < 10 {
            return None;
        }
        let rebalance_timeout_ms = v.get_i32();
        let session_timeout_ms = v.get_i32();
        let np = v.get_u16() as usize;
        let mut protocols = Vec::with_capacity(np.min(v.remaining() / 6));
        for _ in 0..np {
            let name = get_str(&mut v)?;
            protocols.push((name, get_bytes(&mut v)?));
        }
        let assignment = get_bytes(&mut v)?;
        members.push(StoredMember {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            protocols,
            assignment,
        });
    }
    if !v.is_empty() {
        return None;
    }
    Some(StoredGroup {
        protocol_type,
        generation,
        protocol,
        leader,
        state_ms,
        members,
    })
}

impl OffsetStore {
    /// Durably stores `group`'s state (`None`: removes it, a tombstone). Answers once the
    /// record is flushed (standalone) or committed by a majority of the bucket's replicas.
    pub async fn store_group(
        &self,
        group: &str,
        state: Option<StoredGroup>,
    ) -> Result<(), BucketError> {
        let value = state.as_ref().map(encode_value);
        let batch = RecordBatchBuilder::new(now_ms())
            .record(Some(&encode_key(group)), value.as_deref(), &[])
            .build();
        self.append_applied(batch, |s| {
            let mut states = s.group_states.borrow_mut();
            match state {
                Some(st) => states.insert(group.to_owned(), st),
                None => states.remove(group),
            };
        })
        .await
    }

    /// The stored state of every group of this bucket that has one.
    pub fn group_states(&self) -> Vec<(String, StoredGroup)> {
        self.group_states
            .borrow()
            .iter()
            .map(|(g, s)| (g.clone(), s.clone()))
            .collect()
    }

    /// Whether `group` has a stored state here.
    pub fn has_group_state(&self, group: &str) -> bool {
        self.group_states.borrow().contains_key(group)
    }
}
