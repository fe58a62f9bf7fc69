//! Produce → consume round trips against a real broker with each acks level: every
//! record comes back once, in order, with its key, value and headers.

mod client_support;

use std::time::Duration;

use client_support::{run, within, TestBroker};
use weir::client::{
    Acks, Cluster, ClusterConfig, Consumer, ConsumerConfig, Producer, ProducerConfig,
    ProducerRecord, TopicPartition,
};

async fn round_trip(addr: String, acks: Acks, topic: &str) {
    const N: i64 = 2_000;
    let cluster = Cluster::connect(ClusterConfig::new(addr)).await.unwrap();
    cluster.create_topic(topic, 1).await.unwrap();
    let producer = Producer::new(
        cluster.clone(),
        ProducerConfig {
            acks,
            batch_size: 8 << 10,
            linger: Duration::from_millis(2),
            ..ProducerConfig::default()
        },
    );
    let mut deliveries = Vec::new();
    for i in 0..N {
        let key = format!("k{i}");
        let value = format!("value-{i}");
        let rec = ProducerRecord::new(topic, value.as_bytes())
            .key(key.as_bytes())
            .partition(0)
            .headers(&[("h", b"x")]);
        deliveries.push(producer.send(rec).await.unwrap());
    }
    within(30, "flush", producer.flush()).await;
    for (i, d) in deliveries.into_iter().enumerate() {
        let md = d.await.unwrap();
        assert_eq!(md.partition, 0);
        match acks {
            Acks::None => assert_eq!(md.offset, -1, "acks=0 has no offsets"),
            _ => assert_eq!(md.offset, i as i64, "record {i} offset"),
        }
    }
    let tp = TopicPartition::new(topic, 0);
    let mut consumer = Consumer::new(cluster, ConsumerConfig::default());
    consumer.assign(std::slice::from_ref(&tp));
    consumer.seek_to_beginning(&tp).await.unwrap();
    assert_eq!(consumer.position(&tp), Some(0));
    let mut next = 0i64;
    while next < N {
        let recs = within(10, "poll", consumer.poll()).await.unwrap();
        for r in recs {
            assert_eq!(r.offset, next, "offsets are contiguous");
            assert_eq!(r.key.as_deref(), Some(format!("k{next}").as_bytes()));
            assert_eq!(r.value.as_deref(), Some(format!("value-{next}").as_bytes()));
            assert_eq!(r.headers.len(), 1);
            next += 1;
        }
    }
    assert_eq!(next, N);
    assert_eq!(consumer.position(&tp), Some(N));
    producer.close().await;
}

#[test]
fn round_trip_with_each_acks_level() {
    let broker = TestBroker::start(&[]);
    for (acks, topic) in [
        (Acks::Leader, "rt-acks1"),
        (Acks::All, "rt-acks-all"),
        (Acks::None, "rt-acks0"),
    ] {
        let addr = broker.addr.clone();
        eprintln!("round trip with {acks:?}");
        run(move || async move { round_trip(addr, acks, topic).await });
    }
}

/// Many concurrent acks=-1 requests in flight on one connection all succeed.
#[test]
fn acks_all_with_requests_in_flight() {
    let broker = TestBroker::start(&[]);
    let addr = broker.addr.clone();
    run(move || async move {
        let cluster = Cluster::connect(ClusterConfig::new(addr)).await.unwrap();
        cluster.create_topic("inflight", 3).await.unwrap();
        let producer = Producer::new(
            cluster,
            ProducerConfig {
                acks: Acks::All,
                batch_size: 1024,
                linger: Duration::ZERO,
                max_in_flight: 8,
                request_timeout: Duration::from_secs(5),
                ..ProducerConfig::default()
            },
        );
        let value = vec![7u8; 300];
        let mut ds = Vec::new();
        for _ in 0..600 {
            ds.push(
                producer
                    .send(ProducerRecord::new("inflight", &value))
                    .await
                    .unwrap(),
            );
        }
        within(30, "flush", producer.flush()).await;
        let mut per_partition = [Vec::new(), Vec::new(), Vec::new()];
        for d in ds {
            let md = match d.await {
                Ok(m) => m,
                Err(e) => panic!("delivery failed: {e:?}"),
            };
            per_partition[md.partition as usize].push(md.offset);
        }
        for offs in per_partition {
            let mut sorted = offs.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), offs.len(), "no offset given twice");
            assert_eq!(sorted, (0..offs.len() as i64).collect::<Vec<_>>());
        }
    });
}
