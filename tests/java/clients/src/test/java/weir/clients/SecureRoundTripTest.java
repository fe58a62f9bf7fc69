package weir.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.FileInputStream;
import java.io.InputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.errors.AuthenticationException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Producer, group consumer and admin over the listener in weir.bootstrap with the settings in
 * weir.client.config (SSL, SASL_SSL with SCRAM-SHA-512, or mutual TLS); a client with the
 * settings in weir.bad.client.config (no trust, wrong password, no certificate) is refused.
 */
@Timeout(120)
class SecureRoundTripTest {

    @Test
    void produceConsumeAndAdminOverTheSecuredListener() throws Exception {
        String topic;
        try (Admin admin = Weir.admin()) {
            topic = Weir.createTopic(admin, "java-secure", 2);
            // Metadata over this listener names this listener's ports, never the plaintext one.
            String plain = System.getProperty("weir.plaintext.bootstrap");
            for (Node n : admin.describeCluster().nodes().get(30, TimeUnit.SECONDS)) {
                assertNotEquals(plain, n.host() + ":" + n.port(), "a plaintext endpoint for a secured client");
            }
        }
        List<String> sent = new ArrayList<>();
        try (KafkaProducer<String, String> p = Weir.producer(Map.of())) {
            for (int i = 0; i < 200; i++) {
                sent.add("secure-" + i);
                p.send(new ProducerRecord<>(topic, i % 2, "k" + i, "secure-" + i));
            }
            p.flush();
        }
        try (KafkaConsumer<String, String> c = Weir.groupConsumer(Weir.name("java-secure-group"), Map.of())) {
            c.subscribe(List.of(topic));
            List<ConsumerRecord<String, String>> got = Weir.poll(c, 200, Duration.ofSeconds(60));
            List<String> values = new ArrayList<>(got.stream().map(ConsumerRecord::value).toList());
            values.sort(null);
            List<String> want = new ArrayList<>(sent);
            want.sort(null);
            assertEquals(want, values);
            for (int part = 0; part < 2; part++) {
                final int pp = part;
                List<Long> offsets = got.stream().filter(r -> r.partition() == pp).map(ConsumerRecord::offset).toList();
                assertEquals(100, offsets.size());
                for (int i = 0; i < 100; i++) {
                    assertEquals((long) i, offsets.get(i));
                }
            }
            c.commitSync();
        }
    }

    @Test
    void aClientWithoutTheRightCredentialsIsRefused() throws Exception {
        String file = System.getProperty("weir.bad.client.config");
        assertTrue(file != null && !file.isEmpty(), "weir.bad.client.config is not set");
        Properties p = new Properties();
        try (InputStream in = new FileInputStream(file)) {
            p.load(in);
        }
        Map<String, Object> c = new HashMap<>();
        p.forEach((k, v) -> c.put((String) k, v));
        c.put("bootstrap.servers", Weir.bootstrap());
        c.put("default.api.timeout.ms", 15000);
        c.put("request.timeout.ms", 10000);
        try (Admin admin = Admin.create(c)) {
            ExecutionException e = org.junit.jupiter.api.Assertions.assertThrows(ExecutionException.class,
                    () -> admin.describeCluster().nodes().get(30, TimeUnit.SECONDS));
            org.junit.jupiter.api.Assertions.assertInstanceOf(AuthenticationException.class, e.getCause(), e.toString());
        }
    }
}
