//! Errors reach the caller instead of hanging it: unknown topics with auto-creation off
//! (after bounded retries of the retriable UNKNOWN_TOPIC_OR_PARTITION), bad partitions,
//! offsets out of range, and a broker that goes away with requests in flight.

mod client_support;

use std::time::{Duration, Instant};

use client_support::{run, within, TestBroker};
use kafka_protocol::ResponseError;
use weir::client::{
    Cluster, ClusterConfig, Consumer, ConsumerConfig, Error, Producer, ProducerConfig,
    ProducerRecord, TopicPartition,
};

#[test]
fn unknown_topic_without_auto_create_is_an_error_after_bounded_retries() {
    let broker = TestBroker::start(&["auto.create.topics.enable=false"]);
    let addr = broker.addr.clone();
    run(move || async move {
        let mut cfg = ClusterConfig::new(addr);
        cfg.allow_auto_create_topics = false;
        cfg.metadata_retries = 3;
        cfg.retry_backoff = Duration::from_millis(50);
        let cluster = Cluster::connect(cfg).await.unwrap();
        let producer = Producer::new(cluster.clone(), ProducerConfig::default());
        let t = Instant::now();
        let err = within(
            10,
            "send to unknown topic",
            producer.send(ProducerRecord::new("nope", b"v")),
        )
        .await
        .err()
        .expect("sending to a missing topic fails");
        assert_eq!(
            err.kafka_error(),
            Some(ResponseError::UnknownTopicOrPartition),
            "{err}"
        );
        assert!(
            err.is_retriable(),
            "the code is retriable; the client gave up after its bound"
        );
        // 3 retries at 50 ms backoff: it did retry, and it did stop.
        assert!(
            t.elapsed() >= Duration::from_millis(150),
            "{:?}",
            t.elapsed()
        );
        // Nothing was created behind our back.
        assert!(cluster.partitions("nope").await.is_err());
    });
}

#[test]
fn bad_partition_and_out_of_range_offset_are_errors() {
    let broker = TestBroker::start(&[]);
    let addr = broker.addr.clone();
    run(move || async move {
        let cluster = Cluster::connect(ClusterConfig::new(addr)).await.unwrap();
        cluster.create_topic("small", 2).await.unwrap();
        let producer = Producer::new(cluster.clone(), ProducerConfig::default());
        let err = producer
            .send(ProducerRecord::new("small", b"v").partition(5))
            .await
            .err()
            .expect("partition 5 of 2");
        assert!(matches!(err, Error::Invalid(_)), "{err}");
        producer
            .send(ProducerRecord::new("small", b"v").partition(0))
            .await
            .unwrap()
            .await
            .unwrap();
        let tp = TopicPartition::new("small", 0);
        let mut consumer = Consumer::new(cluster, ConsumerConfig::default());
        consumer.assign(std::slice::from_ref(&tp));
        consumer.seek(&tp, 1_000).unwrap();
        let err = within(10, "fetch out of range", consumer.poll())
            .await
            .expect_err("offset 1000 of a 1-record log");
        assert_eq!(
            err.kafka_error(),
            Some(ResponseError::OffsetOutOfRange),
            "{err}"
        );
        assert!(consumer.seek(&TopicPartition::new("other", 0), 0).is_err());
    });
}

#[test]
fn broker_going_away_fails_outstanding_requests() {
    let mut broker = Some(TestBroker::start(&[]));
    let addr = broker.as_ref().unwrap().addr.clone();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let h = std::thread::spawn(move || {
        run(move || async move {
            let cluster = Cluster::connect(ClusterConfig::new(addr)).await.unwrap();
            cluster.create_topic("gone", 1).await.unwrap();
            let tp = TopicPartition::new("gone", 0);
            let mut consumer = Consumer::new(
                cluster,
                ConsumerConfig {
                    max_wait: Duration::from_secs(20),
                    ..ConsumerConfig::default()
                },
            );
            consumer.assign(std::slice::from_ref(&tp));
            consumer.seek(&tp, 0).unwrap();
            ready_tx.send(()).unwrap();
            // Parked in a long poll when the broker dies: an error, not a 20 s wait.
            let t = Instant::now();
            let res = within(15, "poll on a dead broker", consumer.poll()).await;
            assert!(res.is_err(), "{res:?}");
            assert!(t.elapsed() < Duration::from_secs(15));
            tx.send(()).unwrap();
        })
    });
    ready_rx.recv().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    broker.take();
    rx.recv_timeout(Duration::from_secs(20))
        .expect("poll returned");
    h.join().unwrap();
}
