package weir.clients;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DescribeProducersResult;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Partitioner;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.utils.Utils;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** KafkaProducer against weir: its defaults, every codec, headers, partitioners. */
@Timeout(120)
class ProducerTest {

    private static List<ConsumerRecord<String, String>> readAll(TopicPartition tp, int n) {
        try (KafkaConsumer<String, String> c = Weir.consumer(Map.of())) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            return Weir.poll(c, n, Duration.ofSeconds(30));
        }
    }

    @Test
    void defaultsAreAcksAllAndIdempotent() throws Exception {
        try (Admin admin = Weir.admin()) {
            String topic = Weir.createTopic(admin, "java-defaults", 3);
            List<Future<RecordMetadata>> acks = new ArrayList<>();
            try (KafkaProducer<String, String> p = Weir.producer(Map.of())) {
                for (int i = 0; i < 300; i++) {
                    acks.add(p.send(new ProducerRecord<>(topic, i % 3, "k" + i, "v" + i)));
                }
                p.flush();
            }
            long[] next = new long[3];
            for (int i = 0; i < 300; i++) {
                RecordMetadata md = acks.get(i).get(10, TimeUnit.SECONDS);
                assertEquals(i % 3, md.partition());
                assertEquals(next[i % 3]++, md.offset(), "offsets are consecutive per partition");
            }
            for (int p = 0; p < 3; p++) {
                List<ConsumerRecord<String, String>> got = readAll(new TopicPartition(topic, p), 100);
                assertEquals(100, got.size());
                for (int j = 0; j < 100; j++) {
                    ConsumerRecord<String, String> r = got.get(j);
                    assertEquals(j, r.offset());
                    assertEquals("k" + (j * 3 + p), r.key());
                    assertEquals("v" + (j * 3 + p), r.value());
                }
            }
            // The defaults (enable.idempotence=true, acks=all) made it an idempotent producer:
            // the broker remembers its producer id and last sequence per partition.
            DescribeProducersResult dp = admin.describeProducers(List.of(new TopicPartition(topic, 0)));
            List<ProducerState> states = dp.partitionResult(new TopicPartition(topic, 0))
                    .get(30, TimeUnit.SECONDS).activeProducers();
            assertEquals(1, states.size(), states.toString());
            assertTrue(states.get(0).producerId() >= 0, states.toString());
            assertEquals(99, states.get(0).lastSequence(), states.toString());
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"none", "gzip", "snappy", "lz4", "zstd"})
    void everyCompressionCodec(String codec) throws Exception {
        try (Admin admin = Weir.admin()) {
            String topic = Weir.createTopic(admin, "java-codec-" + codec, 1);
            String filler = "weir ".repeat(200); // 1000 bytes that compress well
            try (KafkaProducer<String, String> p = Weir.producer(Map.of(
                    ProducerConfig.COMPRESSION_TYPE_CONFIG, codec, ProducerConfig.LINGER_MS_CONFIG, 50,
                    ProducerConfig.BATCH_SIZE_CONFIG, 256 * 1024))) {
                for (int i = 0; i < 500; i++) {
                    p.send(new ProducerRecord<>(topic, "k" + i, i + ":" + filler));
                }
                p.flush();
            }
            List<ConsumerRecord<String, String>> got = readAll(new TopicPartition(topic, 0), 500);
            for (int i = 0; i < 500; i++) {
                assertEquals("k" + i, got.get(i).key());
                assertEquals(i + ":" + filler, got.get(i).value());
                assertEquals(i, got.get(i).offset());
            }
            // Stored as the client compressed it: DescribeLogDirs gives the partition's size.
            Map<Integer, Map<String, LogDirDescription>> dirs = admin.describeLogDirs(
                    admin.describeCluster().nodes().get(30, TimeUnit.SECONDS).stream().map(n -> n.id()).toList())
                    .allDescriptions().get(30, TimeUnit.SECONDS);
            long size = -1;
            for (Map<String, LogDirDescription> byDir : dirs.values()) {
                for (LogDirDescription d : byDir.values()) {
                    ReplicaInfo ri = d.replicaInfos().get(new TopicPartition(topic, 0));
                    if (ri != null) {
                        size = Math.max(size, ri.size());
                    }
                }
            }
            assertTrue(size > 0, "DescribeLogDirs lists the partition: " + dirs);
            if (codec.equals("none")) {
                assertTrue(size >= 500 * 1000, "uncompressed: " + size);
            } else {
                assertTrue(size < 500 * 1000 / 5, codec + " batches are stored compressed: " + size + " bytes");
            }
        }
    }

    @Test
    void headersKeysNullsAndTimestamps() throws Exception {
        String topic = Weir.createTopic("java-headers", 1);
        long ts = 1_700_000_000_123L;
        try (KafkaProducer<String, String> p = Weir.producer(Map.of())) {
            List<Header> headers = List.of(
                    new RecordHeader("trace", "abc".getBytes(StandardCharsets.UTF_8)),
                    new RecordHeader("trace", "second".getBytes(StandardCharsets.UTF_8)),
                    new RecordHeader("empty", new byte[0]),
                    new RecordHeader("null", (byte[]) null),
                    new RecordHeader("binary", new byte[]{0, (byte) 0xff, 7}));
            p.send(new ProducerRecord<>(topic, 0, ts, "key", "value", headers)).get(30, TimeUnit.SECONDS);
            p.send(new ProducerRecord<String, String>(topic, 0, ts + 1, null, null)).get(30, TimeUnit.SECONDS);
            p.send(new ProducerRecord<>(topic, 0, ts + 2, "", "")).get(30, TimeUnit.SECONDS);
        }
        List<ConsumerRecord<String, String>> got = readAll(new TopicPartition(topic, 0), 3);
        ConsumerRecord<String, String> r = got.get(0);
        assertEquals("key", r.key());
        assertEquals("value", r.value());
        assertEquals(ts, r.timestamp());
        assertEquals(TimestampType.CREATE_TIME, r.timestampType());
        Header[] hs = r.headers().toArray();
        assertEquals(5, hs.length);
        assertEquals("trace", hs[0].key());
        assertArrayEquals("abc".getBytes(StandardCharsets.UTF_8), hs[0].value());
        assertArrayEquals("second".getBytes(StandardCharsets.UTF_8), hs[1].value());
        assertArrayEquals(new byte[0], hs[2].value());
        assertNull(hs[3].value());
        assertArrayEquals(new byte[]{0, (byte) 0xff, 7}, hs[4].value());
        assertNull(got.get(1).key());
        assertNull(got.get(1).value());
        assertEquals(0, got.get(1).headers().toArray().length);
        assertEquals(ts + 1, got.get(1).timestamp());
        assertEquals("", got.get(2).key());
        assertEquals("", got.get(2).value());
    }

    /** Sends a key "N" to partition N mod the partition count. */
    public static class ModuloPartitioner implements Partitioner {
        @Override
        public int partition(String topic, Object key, byte[] keyBytes, Object value, byte[] valueBytes,
                             Cluster cluster) {
            return Integer.parseInt((String) key) % cluster.partitionCountForTopic(topic);
        }

        @Override
        public void close() {}

        @Override
        public void configure(Map<String, ?> configs) {}
    }

    @Test
    void customPartitionerAndTheDefaultKeyHash() throws Exception {
        int partitions = 5;
        String topic = Weir.createTopic("java-partitioner", partitions);
        Map<Integer, List<String>> expect = new HashMap<>();
        try (KafkaProducer<String, String> p = Weir.producer(Map.of(
                ProducerConfig.PARTITIONER_CLASS_CONFIG, ModuloPartitioner.class.getName()))) {
            for (int i = 0; i < 50; i++) {
                RecordMetadata md = p.send(new ProducerRecord<>(topic, Integer.toString(i), "custom")).get(30, TimeUnit.SECONDS);
                assertEquals(i % partitions, md.partition());
                expect.computeIfAbsent(i % partitions, k -> new ArrayList<>()).add(Integer.toString(i));
            }
        }
        // The built-in partitioner: murmur2 of the key bytes, as every Kafka client computes it.
        Map<Integer, List<String>> expectHashed = new HashMap<>();
        try (KafkaProducer<String, String> p = Weir.producer(Map.of())) {
            for (int i = 0; i < 50; i++) {
                String key = "user-" + i;
                int want = Utils.toPositive(Utils.murmur2(key.getBytes(StandardCharsets.UTF_8))) % partitions;
                RecordMetadata md = p.send(new ProducerRecord<>(topic, key, "hashed")).get(30, TimeUnit.SECONDS);
                assertEquals(want, md.partition(), key);
                expectHashed.computeIfAbsent(want, k -> new ArrayList<>()).add(key);
            }
        }
        for (int part = 0; part < partitions; part++) {
            List<String> want = new ArrayList<>(expect.getOrDefault(part, List.of()));
            want.addAll(expectHashed.getOrDefault(part, List.of()));
            List<ConsumerRecord<String, String>> got = readAll(new TopicPartition(topic, part), want.size());
            assertEquals(want, got.stream().map(ConsumerRecord::key).toList(), "partition " + part);
        }
    }
}
