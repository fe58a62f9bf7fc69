//! The records' plan and apply, the voters' parsing.

use super::*;

fn broker(cores: usize, port: i32) -> BrokerInfo {
    BrokerInfo {
        cores,
        listeners: vec![ListenerEndpoints {
            host: "127.0.0.1".into(),
            port,
            cores: (0..cores)
                .map(|c| ("127.0.0.1".into(), port + 1 + c as i32))
                .collect(),
        }],
        rack: None,
    }
}

fn create(name: &str, count: usize) -> Record {
    Record::CreateTopic {
        name: name.into(),
        count,
        id: String::new(),
        partitions: Vec::new(),
        configs: BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]),
        replication_factor: 1,
        replicas: Vec::new(),
    }
}

fn create_rf(name: &str, count: usize, rf: usize) -> Record {
    let mut r = create(name, count);
    if let Record::CreateTopic {
        replication_factor, ..
    } = &mut r
    {
        *replication_factor = rf;
    }
    r
}

fn three_brokers(cores: [usize; 3]) -> Metadata {
    let mut m = Metadata::empty(2);
    for (i, c) in cores.into_iter().enumerate() {
        let reg = Record::RegisterBroker {
            id: i as u64 + 1,
            info: broker(c, 9000 + 100 * i as i32),
        };
        assert_eq!(apply(&mut m, &reg), Outcome::Done);
    }
    m
}

/// Two brokers applying the same planned records end with the same metadata, and the
/// placement spreads partitions over every (broker, core).
#[test]
fn same_records_same_metadata_and_spread() {
    let mut leader = Metadata::empty(2);
    let mut r = create("t", 5);
    assert_eq!(
        r.plan(&leader).unwrap_err(),
        "no broker has registered yet",
        "no placement before any broker registered"
    );
    let regs = [
        Record::RegisterBroker {
            id: 1,
            info: broker(2, 9000),
        },
        Record::RegisterBroker {
            id: 2,
            info: broker(1, 9100),
        },
    ];
    for reg in &regs {
        assert_eq!(apply(&mut leader, reg), Outcome::Done);
    }
    assert_eq!(apply(&mut leader, &regs[0]), Outcome::Unchanged);
    r.plan(&leader).unwrap();
    let Record::CreateTopic { partitions, id, .. } = &r else {
        unreachable!()
    };
    assert_eq!(id.len(), 32);
    let placed: Vec<(u64, usize)> = partitions.iter().map(|p| (p.broker, p.core)).collect();
    // Each partition on a core leading the fewest, then on the broker leading the fewest:
    // broker 1 (2 cores) and broker 2 (1 core) take turns while their cores' counts allow.
    assert_eq!(placed, vec![(1, 0), (2, 0), (1, 1), (2, 0), (1, 0)]);
    // A batch travels as bytes and is applied by another broker.
    let batch = Batch {
        req: 7,
        records: vec![regs[0].clone(), regs[1].clone(), r.clone()],
    };
    let back = Batch::decode(&batch.encode()).unwrap();
    assert_eq!(back, batch);
    let mut follower = Metadata::empty(4);
    for rec in &back.records {
        apply(&mut follower, rec);
    }
    apply(&mut leader, &r);
    assert_eq!(follower.topics, leader.topics);
    assert_eq!(follower.brokers, leader.brokers);
    assert_eq!(follower.topics["t"].brokers, vec![1, 2, 1, 2, 1]);
    assert_eq!(follower.topics["t"].owners, vec![0, 0, 1, 0, 0]);
    // The metadata file of a cluster broker round-trips through `parse`.
    let bytes = serde_json::to_vec(&follower).unwrap();
    assert_eq!(Metadata::parse(&bytes).unwrap(), follower);
}

#[test]
fn owner_is_local_only() {
    let mut m = Metadata::empty(2);
    apply(
        &mut m,
        &Record::RegisterBroker {
            id: 1,
            info: broker(2, 9000),
        },
    );
    apply(
        &mut m,
        &Record::RegisterBroker {
            id: 2,
            info: broker(2, 9100),
        },
    );
    let mut r = create("t", 4);
    r.plan(&m).unwrap();
    assert_eq!(apply(&mut m, &r), Outcome::Done);
    m.local_broker = Some(2);
    // Placed (1,0), (1,1), (2,0), (2,1).
    assert_eq!(m.owner("t", 0), None);
    assert!(m.placed_elsewhere("t", 0));
    assert_eq!(m.owner("t", 3), Some(1));
    assert!(!m.placed_elsewhere("t", 3));
    assert!(!m.placed_elsewhere("t", 9));
    m.local_broker = None;
    assert_eq!(
        m.owner("t", 0),
        Some(0),
        "standalone view: every partition is here"
    );
}

#[test]
fn conflicting_and_invalid_records_change_nothing() {
    let mut m = Metadata::empty(1);
    apply(
        &mut m,
        &Record::RegisterBroker {
            id: 1,
            info: broker(1, 9000),
        },
    );
    let mut a = create("t", 2);
    a.plan(&m).unwrap();
    let mut b = create("t", 3);
    b.plan(&m).unwrap();
    assert_eq!(apply(&mut m, &a), Outcome::Done);
    let before = m.clone();
    assert_eq!(apply(&mut m, &b), Outcome::TopicExists);
    assert_eq!(m, before);
    // Unplanned (no placement) and badly named topics are refused.
    assert!(matches!(
        apply(&mut m, &create("u", 2)),
        Outcome::InvalidPartitions(_)
    ));
    let mut bad = create("a/b", 1);
    bad.plan(&m).unwrap();
    assert!(matches!(apply(&mut m, &bad), Outcome::Invalid(_)));
    assert_eq!(
        apply(&mut m, &Record::DeleteTopic { name: "zz".into() }),
        Outcome::UnknownTopic
    );
    let shrink = Record::CreatePartitions {
        topic: "t".into(),
        count: 1,
        added: vec![],
        added_replicas: vec![],
    };
    assert!(matches!(
        apply(&mut m, &shrink),
        Outcome::InvalidPartitions(_)
    ));
    assert_eq!(m, before);
}

#[test]
fn alter_configs_grow_and_delete() {
    let mut m = Metadata::empty(1);
    apply(
        &mut m,
        &Record::RegisterBroker {
            id: 3,
            info: broker(1, 9000),
        },
    );
    let mut r = create("t", 1);
    r.plan(&m).unwrap();
    apply(&mut m, &r);
    let set = |k: &str, v: Option<&str>| (k.to_string(), v.map(str::to_string));
    let alter = Record::AlterConfigs {
        topic: "t".into(),
        replace_all: false,
        ops: vec![
            set("cleanup.policy", Some("compact")),
            set("retention.ms", None),
        ],
    };
    assert_eq!(apply(&mut m, &alter), Outcome::Done);
    assert_eq!(apply(&mut m, &alter), Outcome::Unchanged);
    assert_eq!(
        m.topics["t"].configs,
        BTreeMap::from([("cleanup.policy".to_string(), "compact".to_string())])
    );
    let replace = Record::AlterConfigs {
        topic: "t".into(),
        replace_all: true,
        ops: vec![set("segment.ms", Some("5000"))],
    };
    assert_eq!(apply(&mut m, &replace), Outcome::Done);
    assert_eq!(m.topics["t"].configs.len(), 1);
    let mut grow = Record::CreatePartitions {
        topic: "t".into(),
        count: 3,
        added: vec![],
        added_replicas: vec![],
    };
    grow.plan(&m).unwrap();
    assert_eq!(apply(&mut m, &grow), Outcome::Done);
    assert_eq!(m.topics["t"].brokers, vec![3, 3, 3]);
    assert_eq!(
        apply(&mut m, &Record::DeleteTopic { name: "t".into() }),
        Outcome::Done
    );
    assert!(m.topics.is_empty());
}

#[test]
fn users_and_acls() {
    use crate::acl::{Operation, PatternType, Permission, ResourceType};
    let mut m = Metadata::empty(1);
    let cred = ScramCredential {
        salt: "c2FsdA==".into(),
        iterations: 4096,
        stored_key: "a2V5".into(),
        server_key: "a2V5".into(),
    };
    let set = Record::AlterUser {
        user: "alice".into(),
        mechanism: "SCRAM-SHA-256".into(),
        credential: Some(cred.clone()),
    };
    let del = Record::AlterUser {
        user: "alice".into(),
        mechanism: "SCRAM-SHA-256".into(),
        credential: None,
    };
    assert_eq!(apply(&mut m, &del), Outcome::NotFound);
    assert_eq!(apply(&mut m, &set), Outcome::Done);
    assert_eq!(apply(&mut m, &set), Outcome::Unchanged);
    assert_eq!(m.users["alice"]["SCRAM-SHA-256"], cred);
    assert_eq!(apply(&mut m, &del), Outcome::Done);
    assert!(m.users.is_empty(), "a user without credentials is gone");
    let acl = |name: &str| AclBinding {
        resource_type: ResourceType::Topic,
        resource_name: name.into(),
        pattern_type: PatternType::Literal,
        principal: "User:alice".into(),
        host: "*".into(),
        operation: Operation::Write,
        permission: Permission::Allow,
    };
    let create = Record::CreateAcls {
        acls: vec![acl("b"), acl("a"), acl("b")],
    };
    assert_eq!(apply(&mut m, &create), Outcome::Done);
    assert_eq!(
        m.acls,
        vec![acl("a"), acl("b")],
        "sorted, without duplicates"
    );
    assert_eq!(apply(&mut m, &create), Outcome::Unchanged);
    let delete = Record::DeleteAcls {
        acls: vec![acl("a")],
    };
    assert_eq!(apply(&mut m, &delete), Outcome::Done);
    assert_eq!(apply(&mut m, &delete), Outcome::Unchanged);
    assert_eq!(m.acls, vec![acl("b")]);
    // They travel in a batch like the topic records.
    let b = Batch {
        req: 1,
        records: vec![set, create, delete],
    };
    assert_eq!(Batch::decode(&b.encode()).unwrap(), b);
}

#[test]
fn voters() {
    let v = parse_voters("1@127.0.0.1:9101, 2@localhost:9102").unwrap();
    assert_eq!(v.len(), 2);
    assert_eq!(
        v[1],
        Voter {
            id: 2,
            addr: "localhost:9102".into()
        }
    );
    assert!(parse_voters("0@h:1").is_err());
    assert!(parse_voters("1@h").is_err());
    assert!(parse_voters("1@h:1,1@h:2").is_err());
    assert!(parse_voters("x@h:1").is_err());
}

/// Replication factor 3 on three brokers of equal core counts: every partition has a replica
/// on each broker, all on the same core index (core-aligned), and the preferred leaders
/// (first replicas) are spread over brokers and cores; a record of it round-trips and
/// applies the same on another broker, and the metadata file holding it loads back.
#[test]
fn replicas_on_distinct_brokers_core_aligned() {
    let mut m = three_brokers([2, 2, 2]);
    let mut r = create_rf("t", 6, 3);
    r.plan(&m).unwrap();
    let Record::CreateTopic {
        partitions,
        replicas,
        ..
    } = &r
    else {
        unreachable!()
    };
    assert_eq!(replicas.len(), 6);
    for (p, rs) in replicas.iter().enumerate() {
        assert_eq!(rs[0], partitions[p], "first replica = preferred leader");
        let mut b: Vec<u64> = rs.iter().map(|x| x.broker).collect();
        b.sort();
        assert_eq!(b, vec![1, 2, 3], "partition {p}: one replica per broker");
        assert!(
            rs.iter().all(|x| x.core == rs[0].core),
            "core-aligned: {rs:?}"
        );
    }
    let mut leaders: Vec<(u64, usize)> = partitions.iter().map(|p| (p.broker, p.core)).collect();
    leaders.sort();
    leaders.dedup();
    assert_eq!(leaders.len(), 6, "leaders spread over every (broker, core)");
    let back = Batch::decode(
        &Batch {
            req: 1,
            records: vec![r.clone()],
        }
        .encode(),
    )
    .unwrap();
    let mut other = m.clone();
    assert_eq!(apply(&mut m, &r), Outcome::Done);
    assert_eq!(apply(&mut other, &back.records[0]), Outcome::Done);
    assert_eq!(m.topics, other.topics);
    let t = &m.topics["t"];
    assert_eq!(Metadata::replication_factor(t), 3);
    assert_eq!(Metadata::replicas_of(t, 0, 0).len(), 3);
    let bytes = serde_json::to_vec(&m).unwrap();
    assert_eq!(Metadata::parse(&bytes).unwrap(), m);
    // A leader reports itself and its in-sync replicas (every partition gets an ISR slot).
    let (b0, c0) = m.topics["t"].replicas[0][1];
    let report = Record::PartitionLeader {
        topic: "t".into(),
        topic_id: m.topics["t"].id.clone(),
        partition: 0,
        broker: b0,
        core: c0,
        epoch: 1,
        isr: vec![1, 2, 3],
    };
    assert_eq!(apply(&mut m, &report), Outcome::Done);
    assert_eq!(m.topics["t"].isr.len(), 6);
    // Growing the topic keeps its replication factor; the new partitions have no ISR yet
    // (regression: the ISR list was not grown, and the record was refused).
    let mut grow = Record::CreatePartitions {
        topic: "t".into(),
        count: 8,
        added: vec![],
        added_replicas: vec![],
    };
    grow.plan(&m).unwrap();
    assert_eq!(apply(&mut m, &grow), Outcome::Done);
    assert_eq!(m.topics["t"].replicas.len(), 8);
    assert!(m.topics["t"].replicas.iter().all(|r| r.len() == 3));
    assert_eq!(m.topics["t"].isr.len(), 8);
    assert_eq!(m.topics["t"].isr[0], vec![1, 2, 3]);
    assert!(m.topics["t"].isr[6..].iter().all(|i| i.is_empty()));
    // A metadata file with a replica list that breaks the rules is refused at load.
    let mut bad = m.clone();
    let t = bad.topics.get_mut("t").unwrap();
    t.replicas[1][2].0 = t.replicas[1][1].0;
    let err = Metadata::parse(&serde_json::to_vec(&bad).unwrap()).unwrap_err();
    assert!(err.contains("two replicas on one broker"), "{err}");
}

/// Brokers of different core counts: the other replicas go to the least loaded core of
/// their broker (no core-aligned placement is possible).
#[test]
fn replicas_on_brokers_with_other_core_counts() {
    let mut m = three_brokers([4, 1, 2]);
    let mut r = create_rf("t", 4, 2);
    r.plan(&m).unwrap();
    assert_eq!(apply(&mut m, &r), Outcome::Done);
    for rs in &m.topics["t"].replicas {
        assert_eq!(rs.len(), 2);
        assert_ne!(rs[0].0, rs[1].0);
        for &(b, c) in rs {
            assert!(c < m.brokers[&b].cores, "core {c} of broker {b}");
        }
    }
}

/// More replicas than registered brokers: the leader leaves the record unplaced and every
/// broker refuses it with the same outcome (INVALID_REPLICATION_FACTOR for the client).
#[test]
fn replication_factor_above_the_brokers_is_refused() {
    let mut m = three_brokers([1, 1, 1]);
    let mut r = create_rf("t", 2, 4);
    r.plan(&m).unwrap();
    let before = m.clone();
    assert!(matches!(
        apply(&mut m, &r),
        Outcome::InvalidReplicationFactor(_)
    ));
    assert_eq!(m, before);
}

/// Records and metadata files written by step 2 (no replication fields) still load, as
/// replication factor 1, and a factor-1 record is written exactly as step 2 wrote it.
#[test]
fn step_2_records_and_files_still_load() {
    let old = br#"{"req":3,"records":[{"type":"CreateTopic","name":"t","count":1,
        "id":"0123456789abcdef0123456789abcdef","partitions":[{"broker":1,"core":0}],
        "configs":{}},{"type":"CreatePartitions","topic":"t","count":2,
        "added":[{"broker":1,"core":1}]}]}"#;
    let b = Batch::decode(old).unwrap();
    let mut m = Metadata::empty(2);
    apply(
        &mut m,
        &Record::RegisterBroker {
            id: 1,
            info: broker(2, 9000),
        },
    );
    for r in &b.records {
        assert_eq!(apply(&mut m, r), Outcome::Done);
    }
    assert_eq!(Metadata::replication_factor(&m.topics["t"]), 1);
    let text = String::from_utf8(b.encode()).unwrap();
    assert!(!text.contains("replica"), "{text}");
    let file = serde_json::to_string(&m).unwrap();
    assert!(!file.contains("replicas"), "{file}");
    assert_eq!(Metadata::parse(file.as_bytes()).unwrap(), m);
}

/// A partition's group announces its leaders: a newer epoch moves the leader (to a replica
/// only), an older or equal one changes nothing, another topic id is not this topic.
#[test]
fn partition_leader_records() {
    let mut m = three_brokers([2, 2, 2]);
    let mut r = create_rf("t", 2, 3);
    r.plan(&m).unwrap();
    apply(&mut m, &r);
    let id = m.topics["t"].id.clone();
    let first = m.topics["t"].replicas[0][0];
    let other = m.topics["t"].replicas[0][2];
    let lead = |broker: u64, core: usize, epoch: u64, topic_id: &str| Record::PartitionLeader {
        topic: "t".into(),
        topic_id: topic_id.into(),
        partition: 0,
        broker,
        core,
        epoch,
        isr: vec![],
    };
    assert_eq!(
        apply(&mut m, &lead(other.0, other.1, 3, &id)),
        Outcome::Done
    );
    let t = &m.topics["t"];
    assert_eq!((t.brokers[0], t.owners[0]), other);
    assert_eq!(Metadata::leader_epoch(t, 0), 3);
    assert_eq!(Metadata::leader_epoch(t, 1), 0);
    assert_eq!(
        apply(&mut m, &lead(first.0, first.1, 2, &id)),
        Outcome::Unchanged,
        "an older epoch never wins"
    );
    assert!(matches!(
        apply(&mut m, &lead(9, 0, 5, &id)),
        Outcome::Invalid(_)
    ));
    assert_eq!(
        apply(
            &mut m,
            &lead(first.0, first.1, 5, "00000000000000000000000000000000")
        ),
        Outcome::UnknownTopic
    );
    // The leader reports its in-sync replicas at its epoch; an old leader cannot.
    let with_isr = |broker: u64, core: usize, epoch: u64, isr: Vec<u64>| Record::PartitionLeader {
        topic: "t".into(),
        topic_id: id.clone(),
        partition: 0,
        broker,
        core,
        epoch,
        isr,
    };
    let isr = vec![other.0, first.0];
    assert_eq!(
        apply(&mut m, &with_isr(other.0, other.1, 3, isr.clone())),
        Outcome::Done
    );
    assert_eq!(m.topics["t"].isr[0], isr);
    assert_eq!(
        apply(&mut m, &with_isr(other.0, other.1, 3, isr.clone())),
        Outcome::Unchanged
    );
    assert_eq!(
        apply(&mut m, &with_isr(first.0, first.1, 3, vec![first.0])),
        Outcome::Unchanged,
        "not the leader of epoch 3"
    );
    assert!(matches!(
        apply(&mut m, &with_isr(other.0, other.1, 3, vec![9])),
        Outcome::Invalid(_)
    ));
    assert_eq!(m.topics["t"].isr[0], isr);
    // The file with a moved leader and its epochs loads back.
    let bytes = serde_json::to_vec(&m).unwrap();
    assert_eq!(Metadata::parse(&bytes).unwrap(), m);
    // This broker's replica is found whichever broker leads.
    m.local_broker = Some(first.0);
    assert_eq!(m.local_replica("t", 0), Some(first.1));
    assert_eq!(
        m.owner("t", 0),
        None,
        "not the leader: requests go elsewhere"
    );
    assert!(m.placed_elsewhere("t", 0));
}

/// `broker.rack` travels in the broker's registration; a registration without one (a broker
/// with no rack, or written by a weir before racks) reads as no rack, and one without a rack
/// is written exactly as before.
#[test]
fn a_registration_carries_the_rack_and_older_ones_read_as_none() {
    let mut info = broker(2, 9092);
    let plain = serde_json::to_string(&info).unwrap();
    assert!(!plain.contains("rack"), "{plain}");
    let old: BrokerInfo = serde_json::from_str(&plain).unwrap();
    assert_eq!(old.rack, None);
    info.rack = Some("eu-west-1a".into());
    let with = serde_json::to_vec(&info).unwrap();
    let back: BrokerInfo = serde_json::from_slice(&with).unwrap();
    assert_eq!(back, info);
}

/// With `broker.rack` set, every partition's replicas span as many racks as there are (Kafka's
/// rack-aware assignment): six brokers in three racks, brokers 1-2 in one, 3-4, 5-6; without
/// racks, the same cluster puts replicas of a partition on brokers of one rack.
#[test]
fn replicas_span_the_racks() {
    let spread = |racks: bool| {
        let mut m = Metadata::empty(2);
        for id in 1..=6u64 {
            let mut info = broker(2, 9000 + 100 * id as i32);
            if racks {
                info.rack = Some(format!("rack-{}", id.div_ceil(2)));
            }
            let reg = Record::RegisterBroker { id, info };
            assert_eq!(apply(&mut m, &reg), Outcome::Done);
        }
        let mut r = create_rf("t", 24, 3);
        r.plan(&m).unwrap();
        assert_eq!(apply(&mut m, &r), Outcome::Done);
        let t = &m.topics["t"];
        (0..24)
            .map(|p| {
                let mut racks: Vec<u64> = Metadata::replicas_of(t, p, 0)
                    .iter()
                    .map(|&(b, _)| b.div_ceil(2))
                    .collect();
                racks.sort();
                racks.dedup();
                racks.len()
            })
            .collect::<Vec<_>>()
    };
    assert!(spread(true).iter().all(|&n| n == 3), "{:?}", spread(true));
    assert!(
        spread(false).iter().any(|&n| n < 3),
        "the test would pass without racks"
    );
}
