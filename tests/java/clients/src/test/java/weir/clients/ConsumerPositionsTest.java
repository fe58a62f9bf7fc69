package weir.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Commits (auto, sync, async), committed(), seek, offsetsForTimes, begin/end offsets, pause. */
@Timeout(120)
class ConsumerPositionsTest {

    private static void produce(String topic, int partition, int n, long firstTs) {
        try (KafkaProducer<String, String> p = Weir.producer(Map.of())) {
            for (int i = 0; i < n; i++) {
                p.send(new ProducerRecord<>(topic, partition, firstTs < 0 ? null : firstTs + i * 1000L, "k" + i, "v" + i));
            }
            p.flush();
        }
    }

    @Test
    void autoCommitStoresThePositionAndANewMemberResumesThere() throws Exception {
        String topic = Weir.createTopic("java-autocommit", 1);
        String group = Weir.name("java-autocommit");
        TopicPartition tp = new TopicPartition(topic, 0);
        produce(topic, 0, 10, -1);
        try (KafkaConsumer<String, String> c = Weir.groupConsumer(group, Map.of(
                ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, true, ConsumerConfig.AUTO_COMMIT_INTERVAL_MS_CONFIG, 200))) {
            c.subscribe(List.of(topic));
            Weir.poll(c, 10, Duration.ofSeconds(30));
            Weir.pollUntil(() -> {
                OffsetAndMetadata om = c.committed(Set.of(tp)).get(tp);
                return om != null && om.offset() == 10;
            }, Duration.ofSeconds(20), "the auto commit of offset 10", c);
        }
        produce(topic, 0, 3, -1);
        try (KafkaConsumer<String, String> c = Weir.groupConsumer(group, Map.of())) {
            c.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> got = Weir.poll(c, 3, Duration.ofSeconds(30));
            assertEquals(10, got.get(0).offset(), "resumes at the committed offset");
            assertEquals(List.of("v0", "v1", "v2"), got.stream().map(ConsumerRecord::value).toList());
        }
    }

    @Test
    void manualSyncAndAsyncCommitsAreReadBack() throws Exception {
        String topic = Weir.createTopic("java-commits", 2);
        String group = Weir.name("java-commits");
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        produce(topic, 0, 5, -1);
        produce(topic, 1, 5, -1);
        try (KafkaConsumer<String, String> c = Weir.groupConsumer(group, Map.of())) {
            c.subscribe(List.of(topic));
            Weir.poll(c, 10, Duration.ofSeconds(30));
            c.commitSync(Map.of(p0, new OffsetAndMetadata(3, "sync-meta")));
            assertEquals(new OffsetAndMetadata(3, "sync-meta").offset(), c.committed(Set.of(p0)).get(p0).offset());
            assertEquals("sync-meta", c.committed(Set.of(p0)).get(p0).metadata());
            assertNull(c.committed(Set.of(p1)).get(p1), "nothing committed for p1 yet");

            CompletableFuture<Map<TopicPartition, OffsetAndMetadata>> done = new CompletableFuture<>();
            c.commitAsync(Map.of(p1, new OffsetAndMetadata(4, "async-meta")), (offsets, err) -> {
                if (err != null) {
                    done.completeExceptionally(err);
                } else {
                    done.complete(offsets);
                }
            });
            Weir.pollUntil(done::isDone, Duration.ofSeconds(20), "the async commit's callback", c);
            assertEquals(4L, done.get().get(p1).offset());
            // Everything consumed: commitSync() with no arguments commits the positions.
            c.commitSync();
            Map<TopicPartition, OffsetAndMetadata> all = c.committed(Set.of(p0, p1));
            assertEquals(5L, all.get(p0).offset());
            assertEquals(5L, all.get(p1).offset());
        }
        // Read back by another consumer of the group, and by the admin client.
        try (KafkaConsumer<String, String> other = Weir.groupConsumer(group, Map.of());
             Admin admin = Weir.admin()) {
            assertEquals(5L, other.committed(Set.of(p0)).get(p0).offset());
            Map<TopicPartition, OffsetAndMetadata> byAdmin = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get(30, TimeUnit.SECONDS);
            assertEquals(5L, byAdmin.get(p0).offset());
            assertEquals(5L, byAdmin.get(p1).offset());
        }
    }

    @Test
    void seekOffsetsForTimesAndBeginningEndOffsets() throws Exception {
        String topic = Weir.createTopic("java-seek", 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        long t0 = 1_600_000_000_000L;
        produce(topic, 0, 10, t0); // timestamps t0, t0+1s, ..., t0+9s
        try (KafkaConsumer<String, String> c = Weir.consumer(Map.of());
             Admin admin = Weir.admin()) {
            assertEquals(0L, c.beginningOffsets(List.of(tp)).get(tp));
            assertEquals(10L, c.endOffsets(List.of(tp)).get(tp));

            Map<TopicPartition, OffsetAndTimestamp> byTime = c.offsetsForTimes(Map.of(tp, t0 + 2500));
            assertEquals(3L, byTime.get(tp).offset(), "first record at or after the time");
            assertEquals(t0 + 3000, byTime.get(tp).timestamp());
            assertEquals(0L, c.offsetsForTimes(Map.of(tp, 0L)).get(tp).offset());
            assertNull(c.offsetsForTimes(Map.of(tp, t0 + 60_000)).get(tp), "nothing that late");

            c.assign(List.of(tp));
            c.seek(tp, 7);
            List<ConsumerRecord<String, String>> got = Weir.poll(c, 3, Duration.ofSeconds(30));
            assertEquals(List.of(7L, 8L, 9L), got.stream().map(ConsumerRecord::offset).toList());
            assertEquals(t0 + 7000, got.get(0).timestamp());
            c.seekToBeginning(List.of(tp));
            assertEquals(0L, c.position(tp));
            c.seek(tp, byTime.get(tp).offset());
            assertEquals("v3", Weir.poll(c, 1, Duration.ofSeconds(30)).get(0).value());
            c.seekToEnd(List.of(tp));
            assertEquals(10L, c.position(tp));

            // DeleteRecords moves the log start: beginningOffsets follows, and a seek below it
            // resets (auto.offset.reset=earliest) to the new start.
            admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(4))).all().get(30, TimeUnit.SECONDS);
            assertEquals(4L, c.beginningOffsets(List.of(tp)).get(tp));
            c.seek(tp, 1);
            got = Weir.poll(c, 1, Duration.ofSeconds(30));
            assertEquals(4L, got.get(0).offset());
        }
    }

    @Test
    void pauseAndResume() throws Exception {
        String topic = Weir.createTopic("java-pause", 2);
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        produce(topic, 0, 5, -1);
        produce(topic, 1, 5, -1);
        try (KafkaConsumer<String, String> c = Weir.consumer(Map.of())) {
            c.assign(List.of(p0, p1));
            c.seekToBeginning(List.of(p0, p1));
            c.pause(List.of(p1));
            assertEquals(Set.of(p1), c.paused());
            List<ConsumerRecord<String, String>> got = Weir.poll(c, 5, Duration.ofSeconds(30));
            got.addAll(Weir.pollFor(c, Duration.ofSeconds(1)));
            assertEquals(5, got.size());
            assertTrue(got.stream().allMatch(r -> r.partition() == 0), got.toString());
            assertEquals(0L, c.position(p1));
            c.resume(List.of(p1));
            got = Weir.poll(c, 5, Duration.ofSeconds(30));
            assertTrue(got.stream().allMatch(r -> r.partition() == 1), got.toString());
            assertEquals(List.of(0L, 1L, 2L, 3L, 4L), got.stream().map(ConsumerRecord::offset).toList());
        }
    }
}
