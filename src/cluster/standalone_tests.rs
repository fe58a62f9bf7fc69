//! A standalone broker's records: planned on its own cores (`Record::plan_standalone`) and
//! applied by the same `apply` as a cluster's, keeping no broker list.

use super::*;

fn create(name: &str, count: usize, rf: usize) -> Record {
    Record::CreateTopic {
        name: name.into(),
        count,
        id: String::new(),
        partitions: Vec::new(),
        configs: BTreeMap::new(),
        replication_factor: rf,
        replicas: Vec::new(),
    }
}

fn grow(topic: &str, count: usize, added: Vec<Placement>) -> Record {
    Record::CreatePartitions {
        topic: topic.into(),
        count,
        added,
        added_replicas: Vec::new(),
    }
}

fn spread(m: &Metadata) -> Vec<usize> {
    let mut per_core = vec![0; m.cores];
    for t in m.topics.values() {
        for &c in &t.owners {
            per_core[c] += 1;
        }
    }
    per_core
}

#[test]
fn planned_on_this_brokers_cores_without_a_broker_list() {
    let mut m = Metadata::empty(3);
    let mut r = create("t", 4, 1);
    r.plan_standalone(&m);
    assert_eq!(apply(&mut m, &r), Outcome::Done);
    let t = &m.topics["t"];
    assert_eq!(t.id.len(), 32, "the planner gives the topic an id");
    assert!(t.brokers.is_empty() && t.replicas.is_empty());
    assert_eq!(spread(&m), vec![2, 1, 1]);

    let mut r = grow("t", 6, Vec::new());
    r.plan_standalone(&m);
    assert_eq!(apply(&mut m, &r), Outcome::Done);
    assert_eq!(m.topics["t"].owners.len(), 6);
    assert!(m.topics["t"].brokers.is_empty());
    assert_eq!(
        spread(&m),
        vec![2, 2, 2],
        "new partitions go to the least loaded cores"
    );

    // A placement the request made itself (an assignment with listeners.per.core) is kept.
    let mut r = grow(
        "t",
        7,
        vec![Placement {
            broker: STANDALONE,
            core: 0,
        }],
    );
    r.plan_standalone(&m);
    assert_eq!(apply(&mut m, &r), Outcome::Done);
    assert_eq!(m.topics["t"].owners[6], 0);
}

#[test]
fn standalone_and_cluster_placements_do_not_mix() {
    let mut m = Metadata::empty(2);
    let mut r = create("t", 2, 1);
    r.plan_standalone(&m);
    assert_eq!(apply(&mut m, &r), Outcome::Done);
    let before = m.clone();
    // A standalone topic does not grow onto a cluster broker...
    let r = grow("t", 3, vec![Placement { broker: 1, core: 0 }]);
    assert!(matches!(apply(&mut m, &r), Outcome::Invalid(_)));
    // ...nor is a topic created half on broker 0.
    let mut r = create("u", 2, 1);
    if let Record::CreateTopic { id, partitions, .. } = &mut r {
        *id = crate::metadata::new_topic_id();
        *partitions = vec![
            Placement {
                broker: STANDALONE,
                core: 0,
            },
            Placement { broker: 1, core: 0 },
        ];
    }
    assert!(matches!(apply(&mut m, &r), Outcome::Invalid(_)));
    assert_eq!(m, before, "refused records change nothing");

    // A cluster topic does not grow onto broker 0.
    m.brokers.insert(
        1,
        BrokerInfo {
            cores: 2,
            listeners: Vec::new(),
            rack: None,
        },
    );
    let mut r = create("c", 1, 1);
    r.plan(&m).unwrap();
    assert_eq!(apply(&mut m, &r), Outcome::Done);
    assert_eq!(m.topics["c"].brokers, vec![1]);
    let r = grow(
        "c",
        2,
        vec![Placement {
            broker: STANDALONE,
            core: 0,
        }],
    );
    assert!(matches!(apply(&mut m, &r), Outcome::Invalid(_)));
    assert_eq!(m.topics["c"].owners.len(), 1);
}

#[test]
fn a_standalone_broker_refuses_replicas() {
    let mut m = Metadata::empty(2);
    let mut r = create("t", 2, 2);
    r.plan_standalone(&m);
    assert!(matches!(
        apply(&mut m, &r),
        Outcome::InvalidReplicationFactor(_)
    ));
    assert!(m.topics.is_empty());
}
