//! Key-hash placement matches the Java client (murmur2, toPositive, modulo), equal keys
//! share a partition, and the records are really stored where the client said.

mod client_support;

use std::collections::HashMap;

use client_support::{run, within, TestBroker};
use weir::client::{
    murmur2, partition_for_key, Cluster, ClusterConfig, Consumer, ConsumerConfig, Partitioner,
    Producer, ProducerConfig, ProducerRecord, TopicPartition,
};

#[test]
fn murmur2_matches_java_utils() {
    // org.apache.kafka.common.utils.UtilsTest#testMurmur2
    assert_eq!(murmur2(b"21"), -973_932_308);
    assert_eq!(murmur2(b"foobar"), -790_332_482);
    assert_eq!(murmur2(b"a-little-bit-long-string"), -985_981_536);
    assert_eq!(
        murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"),
        -58_897_971
    );
}

#[test]
fn keyed_records_land_where_java_puts_them() {
    const PARTITIONS: usize = 6;
    let broker = TestBroker::start(&[]);
    let addr = broker.addr.clone();
    run(move || async move {
        let cluster = Cluster::connect(ClusterConfig::new(addr)).await.unwrap();
        cluster
            .create_topic("keys", PARTITIONS as i32)
            .await
            .unwrap();
        assert_eq!(cluster.partitions("keys").await.unwrap(), PARTITIONS);
        let producer = Producer::new(
            cluster.clone(),
            ProducerConfig {
                partitioner: Partitioner::KeyHash,
                ..ProducerConfig::default()
            },
        );
        let mut expected: HashMap<String, i32> = HashMap::new();
        let mut deliveries = Vec::new();
        for round in 0..3 {
            for k in 0..50 {
                let key = format!("user-{k}");
                let d = producer
                    .send(
                        ProducerRecord::new("keys", format!("{round}").as_bytes())
                            .key(key.as_bytes()),
                    )
                    .await
                    .unwrap();
                let want = partition_for_key(key.as_bytes(), PARTITIONS);
                assert_eq!(d.partition(), want, "{key}");
                // Equal keys, same partition, every time.
                assert_eq!(*expected.entry(key.clone()).or_insert(want), want);
                deliveries.push((key, d));
            }
        }
        within(30, "flush", producer.flush()).await;
        for (key, d) in deliveries {
            assert_eq!(d.await.unwrap().partition, expected[&key]);
        }
        let used: std::collections::HashSet<i32> = expected.values().copied().collect();
        assert!(
            used.len() > 3,
            "50 keys spread over the partitions: {used:?}"
        );
        // Read every partition back: each key only where it was predicted.
        let mut consumer = Consumer::new(cluster, ConsumerConfig::default());
        let tps: Vec<_> = (0..PARTITIONS as i32)
            .map(|p| TopicPartition::new("keys", p))
            .collect();
        consumer.assign(&tps);
        for tp in &tps {
            consumer.seek(tp, 0).unwrap();
        }
        let mut seen = 0;
        while seen < 150 {
            for r in within(10, "poll", consumer.poll()).await.unwrap() {
                let key = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
                assert_eq!(
                    r.partition.partition, expected[&key],
                    "{key} stored in the wrong partition"
                );
                seen += 1;
            }
        }
        assert_eq!(seen, 150);
    });
}

#[test]
fn round_robin_and_random_spread() {
    let broker = TestBroker::start(&[]);
    let addr = broker.addr.clone();
    run(move || async move {
        let cluster = Cluster::connect(ClusterConfig::new(addr)).await.unwrap();
        cluster.create_topic("spread", 4).await.unwrap();
        for kind in [Partitioner::RoundRobin, Partitioner::Random] {
            let producer = Producer::new(
                cluster.clone(),
                ProducerConfig {
                    partitioner: kind,
                    ..ProducerConfig::default()
                },
            );
            let mut counts = [0usize; 4];
            for _ in 0..200 {
                let d = producer
                    .send(ProducerRecord::new("spread", b"v"))
                    .await
                    .unwrap();
                counts[d.partition() as usize] += 1;
            }
            within(30, "flush", producer.flush()).await;
            if kind == Partitioner::RoundRobin {
                assert_eq!(counts, [50; 4]);
            } else {
                assert!(counts.iter().all(|c| *c > 20), "{counts:?}");
            }
        }
    });
}
