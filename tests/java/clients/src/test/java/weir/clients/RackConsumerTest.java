package weir.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.List;
import java.util.Map;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Follower fetching (KIP-392), run by tests/test_cluster_hosts.py against brokers in racks:
 * records written to partition 0 of weir.rack.topic are read back whole and in order by a
 * consumer with client.rack=weir.rack. Which broker served them the Python test checks.
 */
@Timeout(120)
class RackConsumerTest {
    @Test
    void aConsumerWithARackReadsEveryRecordInOrder() {
        String topic = System.getProperty("weir.rack.topic");
        String rack = System.getProperty("weir.rack");
        int n = Integer.parseInt(System.getProperty("weir.rack.records", "2000"));
        try (KafkaProducer<String, String> p = Weir.producer(Map.of())) {
            for (int i = 0; i < n; i++) {
                p.send(new ProducerRecord<>(topic, 0, "k" + i, "v" + i));
            }
            p.flush();
        }
        try (KafkaConsumer<String, String> c = Weir.consumer(Map.of(ConsumerConfig.CLIENT_RACK_CONFIG, rack))) {
            TopicPartition tp = new TopicPartition(topic, 0);
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            List<ConsumerRecord<String, String>> got = Weir.poll(c, n, Duration.ofSeconds(60));
            assertEquals(n, got.size());
            for (int i = 0; i < n; i++) {
                assertEquals(i, got.get(i).offset());
                assertEquals("v" + i, got.get(i).value());
            }
            assertEquals(0, Weir.pollFor(c, Duration.ofMillis(500)).size(), "records past the end");
        }
    }
}
