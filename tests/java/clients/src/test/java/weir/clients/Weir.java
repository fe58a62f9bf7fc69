package weir.clients;

import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * What every test class needs: the broker started by tests/test_java_clients.py (system
 * property weir.bootstrap), the client settings of its listener (weir.client.config: a
 * properties file for SSL / SASL_SSL, absent for PLAINTEXT), fresh names, and clients.
 */
final class Weir {
    private Weir() {}

    static String bootstrap() {
        String b = System.getProperty("weir.bootstrap");
        if (b == null || b.isEmpty()) {
            throw new IllegalStateException("system property weir.bootstrap is not set (run via tests/test_java_clients.py)");
        }
        return b;
    }

    /** Security settings of the listener under test, plus bootstrap.servers. */
    static Map<String, Object> base() {
        Map<String, Object> m = new HashMap<>();
        String file = System.getProperty("weir.client.config");
        if (file != null && !file.isEmpty()) {
            Properties p = new Properties();
            try (InputStream in = new FileInputStream(file)) {
                p.load(in);
            } catch (IOException e) {
                throw new IllegalStateException("cannot read " + file, e);
            }
            p.forEach((k, v) -> m.put((String) k, v));
        }
        m.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap());
        return m;
    }

    static String name(String prefix) {
        return prefix + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    static Admin admin() {
        Map<String, Object> c = base();
        c.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 30000);
        c.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 15000);
        return Admin.create(c);
    }

    static String createTopic(Admin admin, String prefix, int partitions) throws Exception {
        return createTopic(admin, prefix, partitions, Map.of());
    }

    static String createTopic(Admin admin, String prefix, int partitions, Map<String, String> configs)
            throws Exception {
        String topic = name(prefix);
        admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1).configs(configs)))
                .all().get(30, TimeUnit.SECONDS);
        return topic;
    }

    static String createTopic(String prefix, int partitions) throws Exception {
        try (Admin admin = admin()) {
            return createTopic(admin, prefix, partitions);
        }
    }

    static KafkaProducer<String, String> producer(Map<String, Object> overrides) {
        Map<String, Object> c = base();
        c.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        c.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        c.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 60000);
        c.putAll(overrides);
        return new KafkaProducer<>(c);
    }

    static KafkaConsumer<String, String> consumer(Map<String, Object> overrides) {
        Map<String, Object> c = base();
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        c.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
        c.putAll(overrides);
        return new KafkaConsumer<>(c);
    }

    /** A consumer in group `group` (classic protocol). */
    static KafkaConsumer<String, String> groupConsumer(String group, Map<String, Object> overrides) {
        Map<String, Object> c = new HashMap<>(overrides);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        return consumer(c);
    }

    /** Polls until `n` records came (fails after `timeout` with what it has). */
    static List<ConsumerRecord<String, String>> poll(KafkaConsumer<String, String> consumer, int n,
                                                     Duration timeout) {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        long deadline = System.nanoTime() + timeout.toNanos();
        while (got.size() < n && System.nanoTime() < deadline) {
            consumer.poll(Duration.ofMillis(200)).forEach(got::add);
        }
        if (got.size() < n) {
            throw new AssertionError("got " + got.size() + " of " + n + " records within " + timeout + ": " + got);
        }
        return got;
    }

    /** Polls for `d` and returns everything that came. */
    static List<ConsumerRecord<String, String>> pollFor(KafkaConsumer<String, String> consumer, Duration d) {
        List<ConsumerRecord<String, String>> got = new ArrayList<>();
        long deadline = System.nanoTime() + d.toNanos();
        while (System.nanoTime() < deadline) {
            consumer.poll(Duration.ofMillis(100)).forEach(got::add);
        }
        return got;
    }

    /** Polls `consumers` in turn until `done` holds (each poll drives its group membership). */
    @SafeVarargs
    static void pollUntil(BooleanSupplier done, Duration timeout, String what,
                          KafkaConsumer<String, String>... consumers) {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (!done.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("timed out after " + timeout + " waiting for " + what);
            }
            for (KafkaConsumer<String, String> c : consumers) {
                c.poll(Duration.ofMillis(100));
            }
        }
    }
}
