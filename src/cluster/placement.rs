//! Where new partitions go (docs/replication.md §5.1): placed by the metadata leader from
//! every (broker, core)'s load, or where a request's explicit assignment says.

use std::collections::BTreeMap;

use super::{Placement, NODE_ID_STRIDE};
use crate::metadata::Metadata;

/// Per (broker, core) of every registered broker: the partitions it is the preferred leader
/// of, and the replicas it holds.
pub(super) type Load = BTreeMap<(u64, usize), (usize, usize)>;

pub(super) fn load(meta: &Metadata) -> Load {
    let mut load = BTreeMap::new();
    for (&b, info) in &meta.brokers {
        for c in 0..info.cores.max(1) {
            load.insert((b, c), (0usize, 0usize));
        }
    }
    for t in meta.topics.values() {
        for p in 0..t.owners.len() {
            for (i, r) in Metadata::replicas_of(t, p, 0).into_iter().enumerate() {
                if let Some((leaders, replicas)) = load.get_mut(&r) {
                    *leaders += usize::from(i == 0);
                    *replicas += 1;
                }
            }
        }
    }
    load
}

/// `count` new partitions of `rf` replicas each (docs/replication.md §5.1). The first
/// replica (the preferred leader) is the (broker, core) leading the fewest partitions, then
/// on the broker leading the fewest, then holding the fewest replicas (ties: the lowest
/// broker, then core) — so leaders spread over cores and over brokers; each further one is on
/// another broker, in another rack than those chosen while one is left (`rack_taken`), on the same core index when that broker has as many cores as the
/// first's (core-aligned: a partition's Raft traffic then flows between core *i* of each
/// broker), else on its core holding the fewest replicas; among brokers, the one whose
/// chosen core holds the fewest replicas. (Until 2026-11-25 the broker's leaders did not
/// count, so a broker's cores filled before the next broker's: a topic's first partitions
/// were all led by broker 1.)
pub(super) fn place(
    meta: &Metadata,
    load: &mut Load,
    count: usize,
    rf: usize,
) -> Result<Vec<Vec<Placement>>, String> {
    if load.is_empty() {
        return Err("no broker has registered yet".into());
    }
    let held = |load: &Load, b: u64, c: usize| load.get(&(b, c)).map_or(0, |l| l.1);
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let leading =
            |b: u64| -> usize { load.range((b, 0)..=(b, usize::MAX)).map(|(_, l)| l.0).sum() };
        let (&(b0, c0), _) = load
            .iter()
            .min_by_key(|(k, n)| (n.0, leading(k.0), n.1, **k))
            .expect("load is not empty");
        let mut replicas = vec![(b0, c0)];
        while replicas.len() < rf {
            let best = meta
                .brokers
                .keys()
                .filter(|b| replicas.iter().all(|r| r.0 != **b))
                .map(|&b| {
                    let c = follower_core(meta, load, b, (b0, c0));
                    (rack_taken(meta, &replicas, b), held(load, b, c), b, c)
                })
                .min();
            match best {
                Some((_, _, b, c)) => replicas.push((b, c)),
                None => break,
            }
        }
        out.push(taken(load, replicas));
    }
    Ok(out)
}

/// Partitions placed where a request's explicit assignment says (CreateTopics'
/// `assignments`, CreatePartitions'): one list of Kafka node ids per partition, its first the
/// preferred leader. A node id names a broker (`listeners.per.core` off: the broker id), or
/// one core of a broker (`broker * NODE_ID_STRIDE + core`). On a broker named as a whole, the
/// core is chosen as [`place`] chooses: for the first replica the core leading the fewest
/// partitions, for the others the first's core index when the broker has as many cores, else
/// its core holding the fewest replicas. Refused, with why: an empty list, lists of different
/// lengths, an unknown node, a broker named twice in one list.
pub fn place_assigned(meta: &Metadata, nodes: &[Vec<i32>]) -> Result<Vec<Vec<Placement>>, String> {
    let mut load = load(meta);
    let cores = |b: u64| cores(meta, b);
    let resolve = |n: i32| -> Result<(u64, Option<usize>), String> {
        let id = u64::try_from(n).map_err(|_| format!("unknown broker {n}"))?;
        if meta.brokers.contains_key(&id) {
            return Ok((id, None));
        }
        let stride = NODE_ID_STRIDE as u64;
        let (b, c) = (id / stride, (id % stride) as usize);
        if meta.brokers.contains_key(&b) && c < cores(b) {
            Ok((b, Some(c)))
        } else {
            Err(format!("unknown broker {n}"))
        }
    };
    let rf = nodes.first().map_or(0, Vec::len);
    let mut out = Vec::with_capacity(nodes.len());
    for (p, list) in nodes.iter().enumerate() {
        if list.is_empty() || list.len() != rf {
            return Err(format!(
                "partition {p}: {} replicas where the first partition has {rf}",
                list.len()
            ));
        }
        let mut replicas: Vec<(u64, usize)> = Vec::with_capacity(rf);
        for &n in list {
            let (b, core) = resolve(n)?;
            if replicas.iter().any(|r| r.0 == b) {
                return Err(format!("partition {p}: broker {b} named twice"));
            }
            let c = core.unwrap_or_else(|| match replicas.first() {
                None => (0..cores(b))
                    .min_by_key(|&c| (load.get(&(b, c)).copied().unwrap_or_default(), c))
                    .unwrap_or(0),
                Some(&first) => follower_core(meta, &load, b, first),
            });
            replicas.push((b, c));
        }
        out.push(taken(&mut load, replicas));
    }
    Ok(out)
}

/// Whether broker `b` is in the rack (`broker.rack`) of a replica chosen already: such a
/// broker comes after every broker of another rack, so a partition's replicas span as many
/// racks as there are, as Kafka's rack-aware assignment does. A broker without a rack is in
/// none.
fn rack_taken(meta: &Metadata, chosen: &[(u64, usize)], b: u64) -> bool {
    let rack = |b: u64| meta.brokers.get(&b).and_then(|i| i.rack.as_deref());
    rack(b).is_some_and(|r| chosen.iter().any(|&(o, _)| rack(o) == Some(r)))
}

/// One partition's replicas, counted into `load` (the first as its preferred leader).
fn taken(load: &mut Load, replicas: Vec<(u64, usize)>) -> Vec<Placement> {
    for (i, r) in replicas.iter().enumerate() {
        let l = load.entry(*r).or_default();
        l.0 += usize::from(i == 0);
        l.1 += 1;
    }
    replicas
        .into_iter()
        .map(|(broker, core)| Placement { broker, core })
        .collect()
}

/// How many cores broker `b` registered (1 if unknown).
fn cores(meta: &Metadata, b: u64) -> usize {
    meta.brokers.get(&b).map_or(1, |i| i.cores.max(1))
}

/// The core of a further replica on broker `b`, the first replica being `first`: the first's
/// core index when `b` has as many cores (core-aligned), else `b`'s core holding the fewest
/// replicas.
fn follower_core(meta: &Metadata, load: &Load, b: u64, first: (u64, usize)) -> usize {
    if cores(meta, b) == cores(meta, first.0) {
        return first.1;
    }
    (0..cores(meta, b))
        .min_by_key(|&c| (load.get(&(b, c)).map_or(0, |l| l.1), c))
        .unwrap_or(0)
}
