//! A consumer-protocol group's state as stored in its bucket (`offsets::consumer_state`,
//! record kind 5): what a coordinator needs to resume the group after a restart or a failover
//! without a rebalance — epochs, the assignor, the partition counts the target was computed
//! for, and per member its identity, epochs, subscription, current, revoking and target
//! partitions. Sessions and revocation deadlines are not stored: they start again when the
//! group is restored, as the classic groups' sessions do. Layout (big-endian):
//!
//! ```text
//! value:  version u8 (2) | group_epoch i32 | assignment_epoch i32 | assignor str
//!         | counts u32 | (topic str | partitions i32)* | members u32 | member*
//! member: id str | instance opt | rack opt | client_id str | client_host str | epoch i32
//!         | previous_epoch i32 | state u8 (0 stable, 1 unrevoked, 2 unreleased)
//!         | subscribed u32 | topic str* | assignor opt | rebalance_timeout_ms u64 | away u8
//!         | assigned parts | revoking parts | target parts | names u32 | topic str*
//!         | regex opt | classic u8 (0 | 1 session_timeout_ms u64 | protocols u32
//!         | (name str | metadata len u32 | bytes)*)
//! parts:  topics u32 | (topic str | n u32 | partition i32 * n)*
//! str:    len u16 | UTF-8;  opt: 0 | 1 str
//! ```
//!
//! `subscribed` is what the member's subscription resolved to; `names` and `regex` are the
//! subscription itself. Version 1 (before regex subscriptions) ends a member at its target
//! partitions; its `subscribed` were the names. Version 2 (before classic members,
//! `classic.rs`) ends a member at its regex.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::assign::Partitions;
use super::subscription::Subscription;
use super::{ClassicInfo, ConsumerConfig, ConsumerGroup, Member, MemberState};
use crate::broker::group::offsets::get_str;

const VERSION: u8 = 3;

fn put_str(b: &mut BytesMut, s: &str) {
    let s = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
    b.put_u16(s.len() as u16);
    b.put_slice(s);
}

fn put_opt(b: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => {
            b.put_u8(1);
            put_str(b, s);
        }
        None => b.put_u8(0),
    }
}

fn put_parts(b: &mut BytesMut, p: &Partitions) {
    b.put_u32(p.len() as u32);
    for (t, ps) in p {
        put_str(b, t);
        b.put_u32(ps.len() as u32);
        for &x in ps {
            b.put_i32(x);
        }
    }
}

fn get_opt(b: &mut &[u8]) -> Option<Option<String>> {
    if b.remaining() < 1 {
        return None;
    }
    match b.get_u8() {
        0 => Some(None),
        1 => Some(Some(get_str(b)?)),
        _ => None,
    }
}

fn get_u32(b: &mut &[u8]) -> Option<u32> {
    (b.remaining() >= 4).then(|| b.get_u32())
}

fn get_i32(b: &mut &[u8]) -> Option<i32> {
    (b.remaining() >= 4).then(|| b.get_i32())
}

fn get_parts(b: &mut &[u8]) -> Option<Partitions> {
    let topics = get_u32(b)?;
    let mut p = Partitions::new();
    for _ in 0..topics {
        let t = get_str(b)?;
        let n = get_u32(b)? as usize;
        if b.remaining() < n.checked_mul(4)? {
            return None;
        }
        let set: BTreeSet<i32> = (0..n).map(|_| b.get_i32()).collect();
        p.insert(t, set);
    }
    Some(p)
}

fn get_classic(b: &mut &[u8]) -> Option<Option<ClassicInfo>> {
    if b.remaining() < 1 {
        return None;
    }
    if b.get_u8() == 0 {
        return Some(None);
    }
    if b.remaining() < 12 {
        return None;
    }
    let session_timeout = Duration::from_millis(b.get_u64());
    let n = get_u32(b)? as usize;
    let mut protocols = Vec::with_capacity(n.min(b.remaining() / 6));
    for _ in 0..n {
        let name = get_str(b)?;
        let len = get_u32(b)? as usize;
        if b.remaining() < len {
            return None;
        }
        protocols.push((name, Bytes::copy_from_slice(&b[..len])));
        b.advance(len);
    }
    Some(Some(ClassicInfo {
        session_timeout,
        protocols,
        deadline: None,
    }))
}

/// The stored form of `g`.
pub fn encode(g: &ConsumerGroup) -> Bytes {
    let mut b = BytesMut::with_capacity(256);
    // Version 2 while no member is classic: a broker from before classic members reads it.
    let classic = g.members.values().any(|m| m.classic.is_some());
    b.put_u8(if classic { VERSION } else { 2 });
    b.put_i32(g.group_epoch);
    b.put_i32(g.assignment_epoch);
    put_str(&mut b, &g.assignor);
    b.put_u32(g.counts.len() as u32);
    for (t, n) in &g.counts {
        put_str(&mut b, t);
        b.put_i32(*n);
    }
    b.put_u32(g.members.len() as u32);
    let empty = Partitions::new();
    for m in g.members.values() {
        put_str(&mut b, &m.id);
        put_opt(&mut b, m.instance_id.as_deref());
        put_opt(&mut b, m.rack_id.as_deref());
        put_str(&mut b, &m.client_id);
        put_str(&mut b, &m.client_host);
        b.put_i32(m.epoch);
        b.put_i32(m.previous_epoch);
        b.put_u8(match m.state {
            MemberState::Stable => 0,
            MemberState::UnrevokedPartitions => 1,
            MemberState::UnreleasedPartitions => 2,
        });
        b.put_u32(m.subscribed.len() as u32);
        for t in &m.subscribed {
            put_str(&mut b, t);
        }
        put_opt(&mut b, m.assignor.as_deref());
        b.put_u64(m.rebalance_timeout.as_millis() as u64);
        b.put_u8(u8::from(m.away));
        put_parts(&mut b, &m.assigned);
        put_parts(&mut b, &m.revoking);
        put_parts(&mut b, g.target.get(&m.id).unwrap_or(&empty));
        b.put_u32(m.subscription.names.len() as u32);
        for t in &m.subscription.names {
            put_str(&mut b, t);
        }
        put_opt(&mut b, m.subscription.regex.as_deref());
        match &m.classic {
            None if !classic => {}
            None => b.put_u8(0),
            Some(c) => {
                b.put_u8(1);
                b.put_u64(c.session_timeout.as_millis() as u64);
                b.put_u32(c.protocols.len() as u32);
                for (name, md) in &c.protocols {
                    put_str(&mut b, name);
                    b.put_u32(md.len() as u32);
                    b.put_slice(md);
                }
            }
        }
    }
    b.freeze()
}

/// A group from its stored form, its members' sessions (and pending revocations) starting
/// at `now`. `None` if the bytes do not decode (a record of a newer format).
pub fn decode(mut b: &[u8], config: &ConsumerConfig, now: Instant) -> Option<ConsumerGroup> {
    let b = &mut b;
    if b.remaining() < 1 {
        return None;
    }
    let version = b.get_u8();
    if !(1..=VERSION).contains(&version) {
        return None;
    }
    let mut g = ConsumerGroup {
        group_epoch: get_i32(b)?,
        assignment_epoch: get_i32(b)?,
        assignor: get_str(b)?,
        ..Default::default()
    };
    for _ in 0..get_u32(b)? {
        let t = get_str(b)?;
        g.counts.insert(t, get_i32(b)?);
    }
    for _ in 0..get_u32(b)? {
        let id = get_str(b)?;
        let instance_id = get_opt(b)?;
        let rack_id = get_opt(b)?;
        let client_id = get_str(b)?;
        let client_host = get_str(b)?;
        let epoch = get_i32(b)?;
        let previous_epoch = get_i32(b)?;
        if b.remaining() < 1 {
            return None;
        }
        let state = match b.get_u8() {
            0 => MemberState::Stable,
            1 => MemberState::UnrevokedPartitions,
            2 => MemberState::UnreleasedPartitions,
            _ => return None,
        };
        let mut subscribed = BTreeSet::new();
        for _ in 0..get_u32(b)? {
            subscribed.insert(get_str(b)?);
        }
        let assignor = get_opt(b)?;
        if b.remaining() < 9 {
            return None;
        }
        let rebalance_timeout = Duration::from_millis(b.get_u64());
        let away = b.get_u8() != 0;
        let assigned = get_parts(b)?;
        let revoking = get_parts(b)?;
        let target = get_parts(b)?;
        let subscription = if version >= 2 {
            let mut names = BTreeSet::new();
            for _ in 0..get_u32(b)? {
                names.insert(get_str(b)?);
            }
            Subscription {
                names,
                regex: get_opt(b)?,
            }
        } else {
            Subscription {
                names: subscribed.clone(),
                regex: None,
            }
        };
        let classic = if version >= 3 { get_classic(b)? } else { None };
        let session_timeout = classic
            .as_ref()
            .map_or(config.session_timeout, |c| c.session_timeout);
        let revoke_deadline = (!revoking.is_empty()).then(|| now + rebalance_timeout);
        g.target.insert(id.clone(), target);
        g.members.insert(
            id.clone(),
            Member {
                id,
                instance_id,
                rack_id,
                client_id,
                client_host,
                epoch,
                previous_epoch,
                state,
                subscription,
                subscribed,
                assignor,
                rebalance_timeout,
                assigned,
                revoking,
                told: None,
                session_deadline: now + session_timeout,
                revoke_deadline,
                away,
                classic,
            },
        );
    }
    b.is_empty().then_some(g)
}
