//! The server-side assignors of consumer-protocol groups (KIP-848, `group.consumer.assignors`):
//! `uniform` (the default: every subscribed partition to one subscriber, the counts as even as
//! the subscriptions allow, each partition kept by its current owner where that stays even)
//! and `range` (per topic, contiguous ranges in member order, so members subscribed to
//! co-partitioned topics get the same partition numbers). Pure functions of the subscriptions,
//! the partition counts and (uniform) the previous target.

use std::collections::{BTreeMap, BTreeSet};

/// A member's partitions: topic → partitions.
pub type Partitions = BTreeMap<String, BTreeSet<i32>>;

/// The assignors weir runs, the default first.
pub const ASSIGNORS: [&str; 2] = ["uniform", "range"];

/// The target assignment of every member: `subscriptions` (member → subscribed topics that
/// exist), `counts` (topic → partitions), `previous` (the last target, for stickiness).
pub fn assign(
    assignor: &str,
    subscriptions: &BTreeMap<String, BTreeSet<String>>,
    counts: &BTreeMap<String, i32>,
    previous: &BTreeMap<String, Partitions>,
) -> BTreeMap<String, Partitions> {
    match assignor {
        "range" => range(subscriptions, counts),
        _ => uniform(subscriptions, counts, previous),
    }
}

fn range(
    subscriptions: &BTreeMap<String, BTreeSet<String>>,
    counts: &BTreeMap<String, i32>,
) -> BTreeMap<String, Partitions> {
    let mut out: BTreeMap<String, Partitions> = subscriptions
        .keys()
        .map(|m| (m.clone(), Partitions::new()))
        .collect();
    for (topic, &n) in counts {
        let members: Vec<&String> = subscriptions
            .iter()
            .filter(|(_, s)| s.contains(topic))
            .map(|(m, _)| m)
            .collect();
        if members.is_empty() || n <= 0 {
            continue;
        }
        let per = n as usize / members.len();
        let extra = n as usize % members.len();
        let mut next = 0i32;
        for (i, m) in members.iter().enumerate() {
            let take = per + usize::from(i < extra);
            let set: BTreeSet<i32> = (next..next + take as i32).collect();
            next += take as i32;
            if !set.is_empty() {
                out.get_mut(*m)
                    .expect("every member has an entry")
                    .insert(topic.clone(), set);
            }
        }
    }
    out
}

fn uniform(
    subscriptions: &BTreeMap<String, BTreeSet<String>>,
    counts: &BTreeMap<String, i32>,
    previous: &BTreeMap<String, Partitions>,
) -> BTreeMap<String, Partitions> {
    let mut out: BTreeMap<String, Partitions> = subscriptions
        .keys()
        .map(|m| (m.clone(), Partitions::new()))
        .collect();
    // Every subscribed partition and who may have it.
    let mut all: Vec<(String, i32, Vec<&String>)> = Vec::new();
    for (topic, &n) in counts {
        let eligible: Vec<&String> = subscriptions
            .iter()
            .filter(|(_, s)| s.contains(topic))
            .map(|(m, _)| m)
            .collect();
        if eligible.is_empty() {
            continue;
        }
        for p in 0..n.max(0) {
            all.push((topic.clone(), p, eligible.clone()));
        }
    }
    if subscriptions.is_empty() {
        return out;
    }
    // What each member may hold: the even share of the partitions it is eligible for, as if
    // every subscriber of a partition took an equal part of it, rounded up; with one
    // subscription for all this is ceil(P / M) for at most P % M members and floor for the
    // rest (`at_ceiling` enforces that), otherwise an upper bound kept loose enough that every
    // partition finds an eligible member below it.
    let members = subscriptions.len();
    let homogeneous = subscriptions
        .values()
        .all(|s| s == subscriptions.values().next().unwrap());
    let total = all.len();
    let floor = total / members;
    let ceiling_slots = total % members;
    let mut load: BTreeMap<&String, usize> = subscriptions.keys().map(|m| (m, 0)).collect();
    let mut at_ceiling = 0usize;
    let may_take = |m: &String, load: &BTreeMap<&String, usize>, at_ceiling: usize| -> bool {
        let l = load[m];
        if !homogeneous {
            return true;
        }
        l < floor || (l == floor && at_ceiling < ceiling_slots)
    };
    let owner_before: BTreeMap<(&str, i32), &String> = previous
        .iter()
        .flat_map(|(m, parts)| {
            parts
                .iter()
                .flat_map(move |(t, ps)| ps.iter().map(move |&p| ((t.as_str(), p), m)))
        })
        .collect();
    // Gives `topic`-`p` to `m`, counting `m`'s load (and whether it reached the ceiling).
    let mut give = |m: &String,
                    topic: &String,
                    p: i32,
                    load: &mut BTreeMap<&String, usize>,
                    at_ceiling: &mut usize| {
        if homogeneous && load[m] == floor {
            *at_ceiling += 1;
        }
        *load.get_mut(m).expect("a member") += 1;
        out.get_mut(m)
            .expect("a member")
            .entry(topic.clone())
            .or_default()
            .insert(p);
    };
    let mut unassigned = Vec::new();
    // Sticky pass: a partition stays with its previous owner while that keeps it even.
    for (topic, p, eligible) in &all {
        let prev = owner_before
            .get(&(topic.as_str(), *p))
            .filter(|m| eligible.contains(m))
            .copied();
        match prev {
            Some(m) if may_take(m, &load, at_ceiling) => {
                give(m, topic, *p, &mut load, &mut at_ceiling)
            }
            _ => unassigned.push((topic, *p, eligible)),
        }
    }
    // The rest, each to the least-loaded member that may have it.
    for (topic, p, eligible) in unassigned {
        let m = eligible
            .iter()
            .filter(|m| may_take(m, &load, at_ceiling))
            .min_by_key(|m| (load[**m], **m))
            .or_else(|| eligible.iter().min_by_key(|m| (load[**m], **m)))
            .copied()
            .expect("a partition is only listed with eligible members");
        give(m, topic, p, &mut load, &mut at_ceiling);
    }
    out
}

// Set operations on partitions, for reconciliation (`mod.rs`).

pub fn count(p: &Partitions) -> usize {
    p.values().map(BTreeSet::len).sum()
}

pub fn minus(a: &Partitions, b: &Partitions) -> Partitions {
    let mut out = Partitions::new();
    for (t, ps) in a {
        let left: BTreeSet<i32> = match b.get(t) {
            Some(bs) => ps.difference(bs).copied().collect(),
            None => ps.clone(),
        };
        if !left.is_empty() {
            out.insert(t.clone(), left);
        }
    }
    out
}

pub fn intersect(a: &Partitions, b: &Partitions) -> Partitions {
    let mut out = Partitions::new();
    for (t, ps) in a {
        if let Some(bs) = b.get(t) {
            let both: BTreeSet<i32> = ps.intersection(bs).copied().collect();
            if !both.is_empty() {
                out.insert(t.clone(), both);
            }
        }
    }
    out
}

pub fn union(a: &Partitions, b: &Partitions) -> Partitions {
    let mut out = a.clone();
    for (t, ps) in b {
        out.entry(t.clone()).or_default().extend(ps);
    }
    out
}

pub fn is_subset(a: &Partitions, b: &Partitions) -> bool {
    a.iter()
        .all(|(t, ps)| ps.is_empty() || b.get(t).is_some_and(|bs| ps.is_subset(bs)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subs(members: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
        members
            .iter()
            .map(|(m, ts)| (m.to_string(), ts.iter().map(|t| t.to_string()).collect()))
            .collect()
    }

    fn counts(topics: &[(&str, i32)]) -> BTreeMap<String, i32> {
        topics.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    fn sizes(a: &BTreeMap<String, Partitions>) -> Vec<usize> {
        a.values()
            .map(|p| p.values().map(BTreeSet::len).sum())
            .collect()
    }

    /// Every partition of a subscribed topic is assigned exactly once, to a subscriber.
    fn check_complete(
        a: &BTreeMap<String, Partitions>,
        s: &BTreeMap<String, BTreeSet<String>>,
        c: &BTreeMap<String, i32>,
    ) {
        let mut seen = BTreeSet::new();
        for (m, parts) in a {
            for (t, ps) in parts {
                assert!(s[m].contains(t), "{m} got {t} it does not subscribe to");
                for p in ps {
                    assert!(seen.insert((t.clone(), *p)), "{t}-{p} assigned twice");
                }
            }
        }
        let want: usize = c
            .iter()
            .filter(|(t, _)| s.values().any(|x| x.contains(*t)))
            .map(|(_, n)| *n as usize)
            .sum();
        assert_eq!(seen.len(), want);
    }

    #[test]
    fn uniform_is_even_and_keeps_partitions_where_it_can() {
        let s = subs(&[("a", &["t"]), ("b", &["t"])]);
        let c = counts(&[("t", 6)]);
        let first = assign("uniform", &s, &c, &BTreeMap::new());
        check_complete(&first, &s, &c);
        assert_eq!(sizes(&first), [3, 3]);
        // A third member: each of a and b gives up one partition and keeps the rest.
        let s3 = subs(&[("a", &["t"]), ("b", &["t"]), ("c", &["t"])]);
        let second = assign("uniform", &s3, &c, &first);
        check_complete(&second, &s3, &c);
        assert_eq!(sizes(&second), [2, 2, 2]);
        for m in ["a", "b"] {
            let kept = second[m]["t"].intersection(&first[m]["t"]).count();
            assert_eq!(kept, 2, "{m} keeps two of its three");
        }
        // 7 partitions over 3: 3, 2, 2 in some order; none moves that need not.
        let c7 = counts(&[("t", 7)]);
        let third = assign("uniform", &s3, &c7, &second);
        check_complete(&third, &s3, &c7);
        let mut z = sizes(&third);
        z.sort();
        assert_eq!(z, [2, 2, 3]);
        for m in ["a", "b", "c"] {
            assert!(
                second[m]["t"].is_subset(&third[m]["t"]),
                "{m} lost a partition"
            );
        }
    }

    #[test]
    fn uniform_with_different_subscriptions_gives_each_partition_to_a_subscriber() {
        let s = subs(&[("a", &["t", "u"]), ("b", &["u"]), ("c", &["v"])]);
        let c = counts(&[("t", 4), ("u", 4), ("v", 1), ("w", 3)]);
        let a = assign("uniform", &s, &c, &BTreeMap::new());
        check_complete(&a, &s, &c);
    }

    #[test]
    fn range_gives_co_partitioned_topics_the_same_numbers() {
        let s = subs(&[("a", &["t", "u"]), ("b", &["t", "u"]), ("c", &["t", "u"])]);
        let c = counts(&[("t", 7), ("u", 7)]);
        let a = assign("range", &s, &c, &BTreeMap::new());
        check_complete(&a, &s, &c);
        for m in ["a", "b", "c"] {
            assert_eq!(a[m]["t"], a[m]["u"]);
        }
        assert_eq!(a["a"]["t"], (0..3).collect());
        assert_eq!(a["b"]["t"], (3..5).collect());
    }
}
