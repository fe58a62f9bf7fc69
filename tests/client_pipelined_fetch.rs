//! Pipelined fetch (MISSION.md point 5): the next fetch is on the wire before records are
//! handed to the application, and across many small fetches the records arrive in order
//! with no gaps and no duplicates — also while a producer is still appending, and across
//! a seek made while a fetch is in flight.

mod client_support;

use std::time::Duration;

use client_support::{run, within, TestBroker};
use weir::client::{
    Cluster, ClusterConfig, Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord,
    TopicPartition,
};

const N: i64 = 20_000;

fn small_fetches() -> ConsumerConfig {
    ConsumerConfig {
        // A few batches per response, so the test makes hundreds of fetches.
        max_partition_bytes: 4 << 10,
        max_bytes: 4 << 10,
        max_wait: Duration::from_millis(200),
        // The long-poll path (what the consumer uses against brokers without weir's
        // streaming fetch; tests/client_streaming_fetch.rs covers streams).
        streaming: false,
        ..ConsumerConfig::default()
    }
}

#[test]
fn pipelined_fetch_is_in_order_without_gaps_or_duplicates() {
    let broker = TestBroker::start(&[]);
    let addr = broker.addr.clone();
    run(move || async move {
        let cluster = Cluster::connect(ClusterConfig::new(addr)).await.unwrap();
        cluster.create_topic("pipe", 1).await.unwrap();
        let tp = TopicPartition::new("pipe", 0);
        let producer = Producer::new(
            cluster.clone(),
            ProducerConfig {
                batch_size: 2 << 10,
                linger: Duration::ZERO,
                ..ProducerConfig::default()
            },
        );
        // Produce concurrently with consuming: the consumer tails a growing log.
        let prod = glommio::spawn_local(async move {
            for i in 0..N {
                let v = i.to_be_bytes();
                producer
                    .send(ProducerRecord::new("pipe", &v).partition(0))
                    .await
                    .unwrap();
                if i % 100 == 0 {
                    glommio::timer::sleep(Duration::from_micros(200)).await;
                }
            }
            producer.flush().await;
        });
        let mut consumer = Consumer::new(cluster, small_fetches());
        consumer.assign(std::slice::from_ref(&tp));
        consumer.seek(&tp, 0).unwrap();
        let mut next = 0i64;
        let mut polls = 0;
        while next < N {
            let recs = within(10, "poll", consumer.poll()).await.unwrap();
            polls += 1;
            // The point of pipelining: by the time we hold records, the next fetch is
            // already written.
            assert_eq!(consumer.fetches_in_flight(), 1, "next fetch on the wire");
            assert_eq!(consumer.fetches_sent(), polls + 1);
            for r in recs {
                assert_eq!(r.offset, next, "gap or duplicate");
                let v = i64::from_be_bytes(r.value.unwrap()[..].try_into().unwrap());
                assert_eq!(v, next, "value of offset {next}");
                next += 1;
            }
        }
        assert!(polls > 50, "expected many small fetches, got {polls}");
        prod.await;
    });
}

#[test]
fn seek_while_a_fetch_is_in_flight_restarts_from_the_new_position() {
    let broker = TestBroker::start(&[]);
    let addr = broker.addr.clone();
    run(move || async move {
        let cluster = Cluster::connect(ClusterConfig::new(addr)).await.unwrap();
        cluster.create_topic("seek", 1).await.unwrap();
        let tp = TopicPartition::new("seek", 0);
        let producer = Producer::new(cluster.clone(), ProducerConfig::default());
        for i in 0..2_000i64 {
            producer
                .send(ProducerRecord::new("seek", &i.to_be_bytes()).partition(0))
                .await
                .unwrap();
        }
        producer.flush().await;
        let mut consumer = Consumer::new(cluster, small_fetches());
        consumer.assign(std::slice::from_ref(&tp));
        consumer.seek(&tp, 0).unwrap();
        let first = within(10, "poll", consumer.poll()).await.unwrap();
        assert_eq!(first[0].offset, 0);
        assert_eq!(consumer.fetches_in_flight(), 1);
        // Replay: seek back while the pipelined fetch (from the old position) is out.
        consumer.seek(&tp, 7).unwrap();
        let mut next = 7;
        while next < 2_000 {
            for r in within(10, "poll", consumer.poll()).await.unwrap() {
                assert_eq!(r.offset, next);
                next += 1;
            }
        }
        // At the end: an idle long poll returns empty after max_wait instead of hanging.
        consumer.seek_to_end(&tp).await.unwrap();
        assert_eq!(consumer.position(&tp), Some(2_000));
        loop {
            // Drain whatever the pipelined fetch from before the seek brings.
            let recs = within(10, "poll", consumer.poll()).await.unwrap();
            assert!(recs.iter().all(|r| r.offset >= 2_000));
            if recs.is_empty() {
                break;
            }
        }
        let t = std::time::Instant::now();
        let empty = within(10, "poll", consumer.poll()).await.unwrap();
        assert!(empty.is_empty());
        assert!(
            t.elapsed() >= Duration::from_millis(150),
            "long poll waited"
        );
    });
}
