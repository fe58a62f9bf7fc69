//! Streaming fetch (docs/streaming-fetch.md) against a real broker: the native consumer
//! streams by default and gets every record exactly once, in order, through many pushes
//! and credit top-ups; on the wire, a push never exceeds the credit left, cancel and
//! deadline end streams with a final message, ordinary requests on the same connection are
//! answered while a stream is parked, and the extension is advertised only to clients that
//! ask for it.

mod client_support;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use client_support::{run, within, TestBroker};
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse, MetadataRequest};
use kafka_protocol::protocol::StrBytes;
use weir::client::{
    Cluster, ClusterConfig, Connection, Consumer, ConsumerConfig, Producer, ProducerConfig,
    ProducerRecord, TopicPartition,
};
use weir::protocol::stream_fetch::{EndReason, StreamMsg, StreamOp, StreamPartition, API_KEY};
use weir_storage::batch::Batches;

async fn produce(cluster: &std::rc::Rc<Cluster>, topic: &str, partition: i32, n: i64, size: usize) {
    let producer = Producer::new(cluster.clone(), ProducerConfig::default());
    for i in 0..n {
        let mut v = i.to_be_bytes().to_vec();
        v.resize(size.max(8), b'x');
        producer
            .send(ProducerRecord::new(topic, &v).partition(partition))
            .await
            .unwrap();
    }
    producer.flush().await;
}

async fn next_msg(rx: &glommio::channels::local_channel::LocalReceiver<Bytes>) -> StreamMsg {
    let body = within(15, "stream message", rx.recv())
        .await
        .expect("stream open");
    StreamMsg::decode(body).expect("a valid stream message")
}

fn open(stream_id: i32, topic: &str, credit: i32, max_push: i32, deadline_ms: i32) -> StreamOp {
    StreamOp::Open {
        stream_id,
        credit,
        max_push_bytes: max_push,
        deadline_ms,
        partitions: vec![StreamPartition {
            topic: topic.into(),
            partition: 0,
            offset: 0,
        }],
    }
}

#[test]
fn consumer_streams_every_record_once_in_order_while_producers_run() {
    const N: i64 = 20_000;
    let broker = TestBroker::start(&[]);
    let addr = broker.addr.clone();
    run(move || async move {
        let cluster = Cluster::connect(ClusterConfig::new(addr)).await.unwrap();
        cluster.create_topic("s", 2).await.unwrap();
        let c2 = cluster.clone();
        let prod = glommio::spawn_local(async move {
            for p in 0..2 {
                produce(&c2, "s", p, N / 2, 16).await;
            }
        });
        let mut consumer = Consumer::new(
            cluster,
            ConsumerConfig {
                // A small buffer: many pushes, many credit top-ups.
                stream_credit: 16 << 10,
                stream_max_push_bytes: 4 << 10,
                ..ConsumerConfig::default()
            },
        );
        let tps = [TopicPartition::new("s", 0), TopicPartition::new("s", 1)];
        consumer.assign(&tps);
        for tp in &tps {
            consumer.seek(tp, 0).unwrap();
        }
        let mut next: BTreeMap<i32, i64> = BTreeMap::new();
        let mut got = 0;
        while got < N {
            for r in within(15, "poll", consumer.poll()).await.unwrap() {
                let n = next.entry(r.partition.partition).or_insert(0);
                assert_eq!(r.offset, *n, "gap or duplicate in {}", r.partition);
                let v = i64::from_be_bytes(r.value.unwrap()[..8].try_into().unwrap());
                assert_eq!(v, *n);
                *n += 1;
                got += 1;
            }
        }
        assert!(consumer.is_streaming(), "the consumer used a stream");
        assert!(
            consumer.pushes_received() > 20,
            "{}",
            consumer.pushes_received()
        );
        prod.await;
        // Nothing more: every record came exactly once.
        let more = within(5, "poll", consumer.poll()).await.unwrap();
        assert!(more.is_empty(), "{} extra records", more.len());
    });
}

#[test]
fn seek_replaces_the_stream() {
    let broker = TestBroker::start(&[]);
    let addr = broker.addr.clone();
    run(move || async move {
        let cluster = Cluster::connect(ClusterConfig::new(addr)).await.unwrap();
        cluster.create_topic("seek", 1).await.unwrap();
        produce(&cluster, "seek", 0, 2_000, 8).await;
        let tp = TopicPartition::new("seek", 0);
        let mut consumer = Consumer::new(
            cluster,
            ConsumerConfig {
                stream_credit: 4 << 10,
                stream_max_push_bytes: 1 << 10,
                ..ConsumerConfig::default()
            },
        );
        consumer.assign(std::slice::from_ref(&tp));
        consumer.seek(&tp, 0).unwrap();
        // (The first stream's credit is smaller than a producer batch: the consumer opens
        // the next one with more.)
        let mut first = Vec::new();
        while first.is_empty() {
            first = within(10, "poll", consumer.poll()).await.unwrap();
        }
        assert_eq!(first[0].offset, 0);
        consumer.seek(&tp, 7).unwrap();
        let mut next = 7;
        while next < 2_000 {
            for r in within(10, "poll", consumer.poll()).await.unwrap() {
                assert_eq!(r.offset, next);
                next += 1;
            }
        }
    });
}

#[test]
fn a_push_never_exceeds_the_credit_and_credit_resumes_it() {
    let broker = TestBroker::start(&[]);
    let addr = broker.addr.clone();
    run(move || async move {
        let cluster = Cluster::connect(ClusterConfig::new(addr.clone()))
            .await
            .unwrap();
        cluster.create_topic("credit", 1).await.unwrap();
        produce(&cluster, "credit", 0, 2_000, 100).await; // ~250 KiB
        let conn = Connection::connect(&addr, "weir-client").await.unwrap();
        assert!(conn.supports_streaming());
        let credit = 20_000;
        // No credit added: the stream stops at the credit, then ends at its deadline (or
        // when the credit is exactly spent).
        let rx = conn
            .open_stream(&open(1, "credit", credit, 3_000, 1_500))
            .await
            .unwrap();
        assert_eq!(
            next_msg(&rx).await,
            StreamMsg::Ack {
                stream_id: 1,
                error: 0
            }
        );
        // Read slowly: the broker must not run ahead of the credit anyway.
        glommio::timer::sleep(Duration::from_millis(300)).await;
        let mut left = i64::from(credit);
        let mut next = 0i64;
        let mut seq = 0;
        loop {
            match next_msg(&rx).await {
                StreamMsg::Data {
                    seq: s,
                    credit_left,
                    partitions,
                    ..
                } => {
                    seq += 1;
                    assert_eq!(s, seq, "pushes are numbered in order");
                    let bytes: usize = partitions.iter().map(|p| p.records.len()).sum();
                    assert!(bytes as i64 <= left, "push of {bytes} over credit {left}");
                    left -= bytes as i64;
                    assert_eq!(i64::from(credit_left), left);
                    for p in &partitions {
                        for (h, _) in Batches::new(&p.records) {
                            assert!(h.base_offset.get() <= next && h.last_offset() >= next);
                            next = h.last_offset() + 1;
                        }
                    }
                }
                StreamMsg::End { reason, error, .. } => {
                    assert!(
                        matches!(reason, EndReason::CreditSpent | EndReason::Deadline)
                            && error == 0,
                        "{reason:?} {error}"
                    );
                    // It ended because the next batch did not fit (checked below).
                    let left_at_end = left;
                    assert!(next > 0 && next < 2_000, "stopped at the credit: {next}");
                    // A new stream from where the last ended, with credit added as it goes.
                    let op = StreamOp::Open {
                        stream_id: 2,
                        credit,
                        max_push_bytes: 3_000,
                        deadline_ms: 30_000,
                        partitions: vec![StreamPartition {
                            topic: "credit".into(),
                            partition: 0,
                            offset: next,
                        }],
                    };
                    let rx2 = conn.open_stream(&op).await.unwrap();
                    assert!(matches!(
                        next_msg(&rx2).await,
                        StreamMsg::Ack { error: 0, .. }
                    ));
                    let mut left2 = i64::from(credit);
                    let mut first_push = true;
                    while next < 2_000 {
                        match next_msg(&rx2).await {
                            StreamMsg::Data { partitions, .. } => {
                                if first_push {
                                    first_push = false;
                                    let (h, _) = Batches::new(&partitions[0].records)
                                        .next()
                                        .expect("a batch");
                                    assert!(
                                        h.total_bytes() as i64 > left_at_end,
                                        "stream 1 ended with {left_at_end} left, next batch {}",
                                        h.total_bytes()
                                    );
                                }
                                let bytes: usize = partitions.iter().map(|p| p.records.len()).sum();
                                assert!(bytes as i64 <= left2);
                                left2 -= bytes as i64;
                                for p in &partitions {
                                    for (h, _) in Batches::new(&p.records) {
                                        assert!(h.base_offset.get() <= next);
                                        next = h.last_offset() + 1;
                                    }
                                }
                                conn.stream_op(&StreamOp::Credit {
                                    stream_id: 2,
                                    add: bytes as i32,
                                })
                                .await
                                .unwrap();
                                left2 += bytes as i64;
                            }
                            other => panic!("unexpected {other:?} at {next}"),
                        }
                    }
                    conn.stream_op(&StreamOp::Cancel { stream_id: 2 })
                        .await
                        .unwrap();
                    match next_msg(&rx2).await {
                        StreamMsg::End { reason, .. } => assert_eq!(reason, EndReason::Cancelled),
                        other => panic!("expected the end, got {other:?}"),
                    }
                    break;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(next, 2_000);
    });
}

#[test]
fn deadline_and_cancel_end_streams_and_other_requests_are_not_held_up() {
    let broker = TestBroker::start(&[]);
    let addr = broker.addr.clone();
    run(move || async move {
        let cluster = Cluster::connect(ClusterConfig::new(addr.clone()))
            .await
            .unwrap();
        cluster.create_topic("idle", 1).await.unwrap();
        let conn = Connection::connect(&addr, "weir-client").await.unwrap();
        // Deadline on an idle partition.
        let rx = conn
            .open_stream(&open(1, "idle", 1 << 20, 1 << 16, 300))
            .await
            .unwrap();
        assert!(matches!(
            next_msg(&rx).await,
            StreamMsg::Ack { error: 0, .. }
        ));
        assert!(matches!(
            next_msg(&rx).await,
            StreamMsg::End {
                reason: EndReason::Deadline,
                ..
            }
        ));
        // A parked stream, then ordinary requests on the same connection: answered.
        let rx = conn
            .open_stream(&open(2, "idle", 1 << 20, 1 << 16, 30_000))
            .await
            .unwrap();
        assert!(matches!(
            next_msg(&rx).await,
            StreamMsg::Ack { error: 0, .. }
        ));
        for _ in 0..3 {
            let v = conn.version::<MetadataRequest>(9).unwrap();
            let md = within(5, "metadata", async {
                conn.send(&MetadataRequest::default().with_topics(None), v)
                    .await
                    .unwrap()
                    .await
                    .unwrap()
            })
            .await;
            assert!(md
                .topics
                .iter()
                .any(|t| t.name.as_ref().unwrap().as_str() == "idle"));
        }
        // An ordinary Fetch on the same connection, while the stream is parked, is
        // answered (here: its own long poll of 200 ms on the idle partition).
        {
            use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
            use kafka_protocol::messages::{FetchRequest, TopicName};
            let v = conn.version::<FetchRequest>(12).unwrap();
            let req = FetchRequest::default()
                .with_replica_id((-1).into())
                .with_max_wait_ms(200)
                .with_min_bytes(1)
                .with_max_bytes(1 << 20)
                .with_session_epoch(-1)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_static_str("idle")))
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(0)
                        .with_partition_max_bytes(1 << 20)])]);
            let resp = within(5, "ordinary fetch", async {
                conn.send(&req, v).await.unwrap().await.unwrap()
            })
            .await;
            let p = &resp.responses[0].partitions[0];
            assert_eq!((p.error_code, p.high_watermark), (0, 0));
        }
        // Data wakes the parked stream.
        produce(&cluster, "idle", 0, 1, 8).await;
        match next_msg(&rx).await {
            StreamMsg::Data { partitions, .. } => {
                assert_eq!(partitions.len(), 1);
                assert!(!partitions[0].records.is_empty());
            }
            other => panic!("expected a push, got {other:?}"),
        }
        conn.stream_op(&StreamOp::Cancel { stream_id: 2 })
            .await
            .unwrap();
        assert!(matches!(
            next_msg(&rx).await,
            StreamMsg::End {
                reason: EndReason::Cancelled,
                ..
            }
        ));
        // A bad open is refused with an ack, and the connection lives on.
        let rx = conn.open_stream(&open(3, "idle", 0, 1, 1)).await.unwrap();
        assert!(matches!(
            next_msg(&rx).await,
            StreamMsg::Ack { error: 42, .. }
        ));
        let v = conn.version::<MetadataRequest>(9).unwrap();
        conn.send(&MetadataRequest::default().with_topics(None), v)
            .await
            .unwrap()
            .await
            .unwrap();
    });
}

#[test]
fn advertised_only_to_clients_that_ask() {
    let broker = TestBroker::start(&[]);
    let addr = broker.addr.clone();
    run(move || async move {
        // The native client asks by name; a connection naming itself otherwise sees
        // Kafka's APIs only.
        let conn = Connection::connect(&addr, "x").await.unwrap();
        assert!(conn.supports_streaming());
        for (name, listed) in [("librdkafka", false), ("weir-client", true)] {
            let req = ApiVersionsRequest::default()
                .with_client_software_name(StrBytes::from_static_str(name))
                .with_client_software_version(StrBytes::from_static_str("1"));
            let resp: ApiVersionsResponse = conn.send(&req, 3).await.unwrap().await.unwrap();
            assert_eq!(
                resp.api_keys.iter().any(|k| k.api_key == API_KEY),
                listed,
                "{name}"
            );
        }
    });
}

/// Credit given back while the broker is parked reading is not lost: a tailing consumer
/// keeps up with producers for many times its credit (this stalled at ~one credit's worth
/// when the broker overwrote credit added during a parked read).
#[test]
fn tailing_consumer_streams_many_times_its_credit() {
    let broker = TestBroker::start(&[]);
    let addr = broker.addr.clone();
    run(move || async move {
        let cluster = Cluster::connect(ClusterConfig::new(addr)).await.unwrap();
        cluster.create_topic("tail", 2).await.unwrap();
        let tps = [
            TopicPartition::new("tail", 0),
            TopicPartition::new("tail", 1),
        ];
        // The default credit (8 MiB).
        let mut consumer = Consumer::new(cluster.clone(), ConsumerConfig::default());
        consumer.assign(&tps);
        for tp in &tps {
            consumer.seek_to_end(tp).await.unwrap();
        }
        let c2 = cluster.clone();
        let prod = glommio::spawn_local(async move {
            let producer = Producer::new(
                c2,
                ProducerConfig {
                    linger: Duration::ZERO,
                    ..ProducerConfig::default()
                },
            );
            let mut sent = 0i64;
            // ~16 MiB in small batches: twice the credit.
            for _ in 0..800 {
                for _ in 0..20 {
                    let v = vec![7u8; 1024];
                    producer
                        .send(ProducerRecord::new("tail", &v).partition((sent % 2) as i32))
                        .await
                        .unwrap();
                    sent += 1;
                }
                glommio::timer::sleep(Duration::from_millis(1)).await;
            }
            producer.flush().await;
            sent
        });
        // Bounded as a whole: a stall (lost credit) lasts until the stream's 30 s deadline.
        let got = within(20, "16,000 records", async {
            let mut got = 0i64;
            while got < 16_000 {
                got += consumer.poll().await.unwrap().len() as i64;
            }
            got
        })
        .await;
        assert_eq!(prod.await, 16_000);
        assert_eq!(got, 16_000);
        assert!(consumer.is_streaming());
    });
}
