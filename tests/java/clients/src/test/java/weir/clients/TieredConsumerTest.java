package weir.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Map;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Tiered storage (issue 41), run by tests/test_tiered_storage.py once partition 0 of
 * weir.tiered.topic holds weir.tiered.records records (values "%09d|..."), most of them only
 * in the S3 bucket: the Admin client's ListOffsets names the tiers (earliest 0, earliest local
 * above it, latest tiered at or past the local start), and a consumer reads from offset 0
 * across the boundary, every record once and in order.
 */
@Timeout(180)
class TieredConsumerTest {
    @Test
    void aConsumerReadsEveryRecordFromTheRemoteTierOn() throws Exception {
        String topic = System.getProperty("weir.tiered.topic");
        int n = Integer.parseInt(System.getProperty("weir.tiered.records"));
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Admin admin = Weir.admin()) {
            long earliest = admin.listOffsets(Map.of(tp, OffsetSpec.earliest())).partitionResult(tp).get().offset();
            long local = admin.listOffsets(Map.of(tp, OffsetSpec.earliestLocal())).partitionResult(tp).get().offset();
            long tiered = admin.listOffsets(Map.of(tp, OffsetSpec.latestTiered())).partitionResult(tp).get().offset();
            assertEquals(0, earliest);
            assertTrue(local > 0, "earliest local offset " + local);
            assertTrue(tiered >= local - 1, "latest tiered " + tiered + ", earliest local " + local);
        }
        try (KafkaConsumer<String, String> c = Weir.consumer(Map.of())) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            List<ConsumerRecord<String, String>> got = Weir.poll(c, n, Duration.ofSeconds(120));
            assertEquals(n, got.size());
            for (int i = 0; i < n; i++) {
                assertEquals(i, got.get(i).offset());
                assertEquals(String.format("%09d|", i), got.get(i).value().substring(0, 10));
            }
            assertEquals(0, Weir.pollFor(c, Duration.ofMillis(500)).size(), "records past the end");
        }
    }
}
