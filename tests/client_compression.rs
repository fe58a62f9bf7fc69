//! The native consumer reads batches other producers compressed: confluent-kafka
//! (librdkafka) produces with each codec — gzip, snappy, lz4 (frame format), zstd — to a real
//! broker, and `Consumer::poll` returns exactly the records sent. A compressed batch whose
//! bytes were damaged is a clear error naming the codec, not a panic. (Before,
//! `FetchedBatch::records` returned `None` for any compressed batch, so the consumer failed
//! against such producers.) kcat 1.7.1 is not used here: its `-z` leaves batches uncompressed
//! on this build, which is what the codec assertion below caught.

mod client_support;

use std::process::Command;

use client_support::{run, within, TestBroker};
use weir::client::{Cluster, ClusterConfig, Consumer, ConsumerConfig, TopicPartition};

const N: i64 = 500;

/// Produces N keyed records to partition 0 of `topic` with confluent-kafka and `codec`
/// (scripts/test.sh installs the pinned client; `PYTHON` names the interpreter).
fn librdkafka_produce(addr: &str, topic: &str, codec: &str) {
    let script = format!(
        r#"
from confluent_kafka import Producer
p = Producer({{"bootstrap.servers": "{addr}", "compression.type": "{codec}",
              "linger.ms": 50, "batch.num.messages": 1000}})
errors = []
for i in range({N}):
    p.produce("{topic}", key=b"k%d" % i, value=b"value-%d-" % i + b"abc" * 20, partition=0,
              on_delivery=lambda err, msg: err and errors.append(err))
assert p.flush(30) == 0, "undelivered"
assert not errors, errors
"#
    );
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&python)
        .args(["-c", &script])
        .output()
        .expect("python3 with confluent-kafka (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "confluent-kafka produce with {codec} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn consumer_decompresses_every_codec() {
    let broker = TestBroker::start(&[]);
    let addr = broker.addr.clone();
    let codecs = [("gzip", 1u8), ("snappy", 2), ("lz4", 3), ("zstd", 4)];
    let create = addr.clone();
    run(move || async move {
        let cluster = Cluster::connect(ClusterConfig::new(create)).await.unwrap();
        for (codec, _) in codecs {
            cluster
                .create_topic(&format!("z-{codec}"), 1)
                .await
                .unwrap();
        }
    });
    for (codec, _) in codecs {
        librdkafka_produce(&addr, &format!("z-{codec}"), codec);
    }
    run(move || async move {
        let cluster = Cluster::connect(ClusterConfig::new(addr)).await.unwrap();
        for (codec, id) in codecs {
            let tp = TopicPartition::new(format!("z-{codec}"), 0);
            let mut consumer = Consumer::new(cluster.clone(), ConsumerConfig::default());
            consumer.assign(std::slice::from_ref(&tp));
            consumer.seek_to_beginning(&tp).await.unwrap();
            // The batches really are compressed with this codec.
            let batches = within(10, "poll_batches", consumer.poll_batches())
                .await
                .unwrap();
            assert!(!batches.is_empty(), "{codec}: no batches");
            for b in &batches {
                assert_eq!(b.compression, id, "{codec}: batch codec");
            }
            // A damaged compressed batch is an error naming the codec, not a panic.
            let mut bad = batches[0].clone();
            let mut bytes = bad.bytes.to_vec();
            let body = weir_storage::batch::HEADER_BYTES;
            for b in &mut bytes[body..] {
                *b ^= 0x5a;
            }
            bad.bytes = bytes.into();
            let err = bad.records().expect_err("a damaged batch is an error");
            assert!(
                err.to_string().contains(&format!("codec {id}")),
                "{codec}: {err}"
            );
            // Every record back, exactly, in order (a fresh consumer: the first one's
            // pipelined fetch is already past these batches).
            let mut consumer = Consumer::new(cluster.clone(), ConsumerConfig::default());
            consumer.assign(std::slice::from_ref(&tp));
            consumer.seek_to_beginning(&tp).await.unwrap();
            let mut next = 0i64;
            while next < N {
                for r in within(10, "poll", consumer.poll()).await.unwrap() {
                    assert_eq!(r.offset, next, "{codec}: offsets contiguous");
                    assert_eq!(r.key.as_deref(), Some(format!("k{next}").as_bytes()));
                    let value = format!("value-{next}-{}", "abc".repeat(20));
                    assert_eq!(r.value.as_deref(), Some(value.as_bytes()), "{codec}");
                    next += 1;
                }
            }
        }
    });
}
