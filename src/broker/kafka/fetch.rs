//! Fetch: partitions grouped by owning core, one call per owner at once, early answers
//! when enough has arrived (`FetchWake`), and the response trimmed to `max_bytes`.

use super::fetch_response::FetchReply;
use crate::broker::errors;
use crate::broker::shard::{FetchCall, FetchKey, FetchPart, FetchResult, FetchWakeCall, Shard};
use kafka_protocol::messages::*;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use super::*;

// ---- Fetch ----

pub(super) async fn fetch(
    shard: &Rc<Shard>,
    req: &Request,
    f: &FetchRequest,
    session: &weir::acl::Session,
    listener: usize,
) -> Result<Response, ProtocolError> {
    // v13+ names topics by id (KIP-516); v11+ carries the consumer's rack (KIP-392), and
    // may be answered by a follower.
    let rack = (req.version >= 11 && f.replica_id.0 < 0).then_some(f.rack_id.as_str());
    let replies = gather_fetch(shard, f, req.version >= 13, rack, Some(session)).await;
    let hints = if req.version >= 16 {
        leader_hints(shard, &replies, listener)
    } else {
        Default::default()
    };
    let body = super::fetch_response::encode(req.version, req.correlation_id, &replies, &hints);
    Ok(Some(body))
}

/// KIP-951 (Fetch v16+): for each partition answered NOT_LEADER_OR_FOLLOWER or
/// FENCED_LEADER_EPOCH, the leader this broker knows (`Shard::leader_hint`) and its endpoint
/// on the client's listener, so the consumer moves there without a metadata round trip.
fn leader_hints(
    shard: &Rc<Shard>,
    replies: &[FetchReply],
    listener: usize,
) -> super::fetch_response::LeaderHints {
    let mut hints = super::fetch_response::LeaderHints::default();
    let meta = shard.metadata();
    for (ti, t) in replies.iter().enumerate() {
        for (pi, (p, r)) in t.partitions.iter().enumerate() {
            if r.error != errors::NOT_LEADER_OR_FOLLOWER && r.error != errors::FENCED_LEADER_EPOCH {
                continue;
            }
            // A fenced epoch on the leader itself: the hint is this node, at the epoch the
            // client lacks.
            let hint = shard.leader_hint(&meta, &t.topic, *p, None).or_else(|| {
                let tm = meta.topics.get(&t.topic)?;
                let pu = usize::try_from(*p).ok()?;
                let epoch = weir::metadata::Metadata::leader_epoch(tm, pu);
                (r.error == errors::FENCED_LEADER_EPOCH && epoch > 0)
                    .then(|| (shard.leader_node(&meta, tm, pu), epoch as i32))
            });
            if let Some(hint) = hint {
                hints.partitions.insert((ti, pi), hint);
            }
        }
    }
    if !hints.partitions.is_empty() {
        let named: std::collections::BTreeSet<i32> =
            hints.partitions.values().map(|h| h.0).collect();
        hints.endpoints = shard.endpoints_of(listener, &named);
    }
    hints
}

/// Reads what a fetch asks for from the owning cores, parking (in their wheels) until
/// `min_bytes` are there or `max_wait_ms` passes: the per-partition results, by topic.
/// Also the data path of streaming fetch (`streaming.rs`). `by_id`: the request names its
/// topics by id (Fetch v13+); an id this broker does not know gets UNKNOWN_TOPIC_ID.
/// `rack`: a consumer's Fetch v11+ (KIP-392) and its `client.rack`: this broker's replica
/// answers it whether or not it leads. `session`: whose READ to check per topic (ACLs);
/// `None` when already checked (streams).
pub async fn gather_fetch(
    shard: &Rc<Shard>,
    f: &FetchRequest,
    by_id: bool,
    rack: Option<&str>,
    session: Option<&weir::acl::Session>,
) -> Vec<FetchReply> {
    let meta = shard.metadata();
    let rack: Option<std::sync::Arc<str>> = rack.map(Into::into);
    // (topic index, partition index) of every part, grouped by owner.
    let mut replies: Vec<FetchReply> = Vec::new();
    let mut by_owner: ByOwner<FetchPart> = BTreeMap::new();
    for (ti, t) in f.topics.iter().enumerate() {
        let (name, unknown) = if by_id {
            match shard.topic_name(&t.topic_id) {
                Some(n) => (n, errors::NONE),
                None => (String::new(), errors::UNKNOWN_TOPIC_ID),
            }
        } else {
            (t.topic.to_string(), errors::NONE)
        };
        let unknown = match session {
            Some(s)
                if unknown == errors::NONE
                    && !super::authz::topic(shard, s, weir::acl::Operation::Read, &name) =>
            {
                errors::TOPIC_AUTHORIZATION_FAILED
            }
            _ => unknown,
        };
        let mut reply = FetchReply {
            topic: name.clone(),
            topic_id: t.topic_id,
            partitions: Vec::with_capacity(t.partitions.len()),
        };
        for (pi, fp) in t.partitions.iter().enumerate() {
            let mut r = crate::broker::shard::FetchResult {
                high_watermark: -1,
                last_stable_offset: -1,
                log_start_offset: -1,
                ..Default::default()
            };
            let routed =
                match super::route(shard, &meta, &name, fp.partition, fp.current_leader_epoch) {
                    // A consumer with a rack (KIP-392) may read from this broker's follower.
                    Err(errors::NOT_LEADER_OR_FOLLOWER) if rack.is_some() => meta
                        .local_replica(&name, fp.partition)
                        .ok_or(errors::NOT_LEADER_OR_FOLLOWER),
                    routed => routed,
                };
            match routed {
                _ if unknown != errors::NONE => r.error = unknown,
                Err(code) => r.error = code,
                Ok(owner) => {
                    let part = FetchPart {
                        topic: name.clone(),
                        partition: fp.partition,
                        offset: fp.fetch_offset,
                        max_bytes: fp.partition_max_bytes,
                        committed: f.isolation_level == 1,
                        rack: rack.clone(),
                    };
                    super::plan(&mut by_owner, owner, part, (ti, pi));
                }
            }
            reply.partitions.push((fp.partition, r));
        }
        replies.push(reply);
    }
    // A request for unknown partitions is answered at once.
    let any_error = replies
        .iter()
        .any(|t| t.partitions.iter().any(|(_, r)| r.error != errors::NONE));
    let max_wait_ms = if any_error { 0 } else { f.max_wait_ms };
    let id = shard.next_fetch_id();
    let key = FetchKey { from: shard.id, id };
    let owners = by_owner.len();
    if owners == 1 {
        let (owner, (parts, slots)) = by_owner.into_iter().next().expect("one owner");
        let resp = if owner == shard.id {
            Some(
                shard
                    .fetch_local(None, f.min_bytes, max_wait_ms, f.max_bytes, &parts)
                    .await,
            )
        } else {
            let fetch = FetchCall {
                key,
                min_bytes: f.min_bytes,
                max_wait_ms,
                max_bytes: f.max_bytes,
                parts,
            };
            shard.ask(owner, fetch).await
        };
        place(&mut replies, resp, slots);
    } else if owners > 1 {
        // Ask every owning core at once; as soon as the replies so far hold min_bytes, tell
        // the cores still waiting to answer now (no polling).
        let (tx, rx) = glommio::channels::local_channel::new_bounded(owners);
        let tx = Rc::new(tx);
        let mut pending: HashMap<usize, Vec<(usize, usize)>> = HashMap::new();
        for (owner, (parts, slots)) in by_owner {
            pending.insert(owner, slots);
            let sh = shard.clone();
            let tx = tx.clone();
            let (min_bytes, max_bytes) = (f.min_bytes, f.max_bytes);
            glommio::spawn_local(async move {
                let fetch = FetchCall {
                    key,
                    min_bytes,
                    max_wait_ms,
                    max_bytes,
                    parts,
                };
                let resp = sh.ask(owner, fetch).await;
                let _ = tx.send((owner, resp)).await;
            })
            .detach();
        }
        drop(tx);
        let mut total = 0usize;
        let mut woke = false;
        while !pending.is_empty() {
            let Some((owner, resp)) = rx.recv().await else {
                break;
            };
            let slots = pending.remove(&owner).unwrap_or_default();
            let (got, errored) = place(&mut replies, resp, slots);
            total += got;
            if !woke && (total as i64 >= i64::from(f.min_bytes) || errored) {
                woke = true;
                for &other in pending.keys() {
                    let sh = shard.clone();
                    glommio::spawn_local(async move {
                        sh.ask(other, FetchWakeCall(key)).await;
                    })
                    .detach();
                }
            }
        }
    }
    // max_bytes is for the whole response: each owner core filled up to it on its own.
    crate::broker::kafka::fetch_budget::enforce(&mut replies, f.max_bytes);
    replies
}

/// Puts an owner core's fetch results in their places; returns (bytes, whether to answer
/// now: an error, or a partition sent to another replica). A core
/// that could not answer (shutting down) gives its partitions NOT_LEADER_OR_FOLLOWER, which
/// clients retry after a metadata refresh — never NONE with no data and -1 watermarks.
pub(super) fn place(
    replies: &mut [FetchReply],
    resp: Option<Vec<FetchResult>>,
    slots: Vec<(usize, usize)>,
) -> (usize, bool) {
    match resp {
        Some(rs) if rs.len() == slots.len() => {
            let bytes = rs.iter().map(|r| r.bytes()).sum();
            // A partition sent elsewhere (KIP-392) is answered at once, as an error is.
            let errored = rs
                .iter()
                .any(|r| r.error != errors::NONE || r.preferred_read_replica.is_some());
            for (r, (ti, pi)) in rs.into_iter().zip(slots) {
                replies[ti].partitions[pi].1 = r;
            }
            (bytes, errored)
        }
        _ => {
            for (ti, pi) in slots {
                replies[ti].partitions[pi].1.error = errors::NOT_LEADER_OR_FOLLOWER;
            }
            (0, true)
        }
    }
}
