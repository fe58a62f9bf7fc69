package weir.clients;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.TopicPartition;

/**
 * The Java side of tests/test_java_clients.py::test_idempotent_producer_exactly_once_across_kill9:
 * an idempotent producer (acks=all, max.in.flight.requests.per.connection=5, retries) writes
 * "P:SEQ" for SEQ = 0..perPartition-1 to each partition, paced, printing "ACKED n" as
 * acknowledgements come, while the test kills the broker with SIGKILL and restarts it on the
 * same ports. Then it reads every partition back and checks each holds its sequence exactly
 * once, in order. Prints "RESULT ok ..." (exit 0) or "RESULT FAIL ..." (exit 1).
 *
 * Arguments: bootstrap topic partitions perPartition
 */
public final class KillNineProducer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        int perPartition = Integer.parseInt(args[3]);
        System.setProperty("weir.bootstrap", bootstrap);

        AtomicLong acked = new AtomicLong();
        ConcurrentLinkedQueue<String> errors = new ConcurrentLinkedQueue<>();
        Map<String, Object> conf = new HashMap<>();
        conf.put(ProducerConfig.ACKS_CONFIG, "all");
        conf.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        conf.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, 5);
        conf.put(ProducerConfig.RETRIES_CONFIG, Integer.MAX_VALUE);
        conf.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 120000);
        conf.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 10000);
        conf.put(ProducerConfig.LINGER_MS_CONFIG, 2);
        conf.put(ProducerConfig.BATCH_SIZE_CONFIG, 1024); // many small batches: many in flight
        conf.put(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, 50);
        conf.put(ProducerConfig.RECONNECT_BACKOFF_MS_CONFIG, 50);
        conf.put(ProducerConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, 500);
        conf.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 120000);
        long retries;
        long total = (long) partitions * perPartition;
        try (KafkaProducer<String, String> p = Weir.producer(conf)) {
            long lastPrinted = 0;
            for (int seq = 0; seq < perPartition; seq++) {
                for (int part = 0; part < partitions; part++) {
                    String v = part + ":" + seq;
                    p.send(new ProducerRecord<>(topic, part, null, v), (md, err) -> {
                        if (err != null) {
                            errors.add(v + " " + err);
                        } else {
                            acked.incrementAndGet();
                        }
                    });
                }
                if (seq % 25 == 24) {
                    Thread.sleep(10); // paced: the test's kills land while records are in flight
                }
                long a = acked.get();
                if (a - lastPrinted >= 500) {
                    System.out.println("ACKED " + a);
                    System.out.flush();
                    lastPrinted = a;
                }
            }
            System.out.println("SENT " + total);
            while (acked.get() + errors.size() < total) {
                Thread.sleep(100);
                System.out.println("ACKED " + acked.get());
                System.out.flush();
            }
            p.flush();
            retries = metric(p.metrics(), "record-retry-total");
        }
        if (!errors.isEmpty()) {
            System.out.println("RESULT FAIL " + errors.size() + " records not delivered, e.g. " + errors.peek());
            System.exit(1);
        }
        // Read back: each partition holds P:0 .. P:perPartition-1, once each, in order.
        List<String> problems = new ArrayList<>();
        try (KafkaConsumer<String, String> c = Weir.consumer(Map.of("max.poll.records", 5000))) {
            for (int part = 0; part < partitions; part++) {
                TopicPartition tp = new TopicPartition(topic, part);
                c.assign(List.of(tp));
                c.seekToBeginning(List.of(tp));
                long end = c.endOffsets(List.of(tp)).get(tp);
                if (end != perPartition) {
                    problems.add("partition " + part + " has " + end + " records, want " + perPartition);
                }
                int next = 0;
                long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
                while (c.position(tp) < end && System.nanoTime() < deadline) {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                        String want = part + ":" + next;
                        if (!want.equals(r.value())) {
                            if (problems.size() < 20) {
                                problems.add("partition " + part + " offset " + r.offset() + ": " + r.value()
                                        + ", want " + want);
                            }
                        } else {
                            next++;
                        }
                    }
                }
                if (next != perPartition) {
                    problems.add("partition " + part + ": read " + next + " of the sequence in order");
                }
            }
        }
        if (!problems.isEmpty()) {
            System.out.println("RESULT FAIL " + String.join("; ", problems));
            System.exit(1);
        }
        System.out.println("RESULT ok acked=" + acked.get() + " retries=" + retries);
        System.exit(0);
    }

    private static long metric(Map<MetricName, ? extends Metric> metrics, String name) {
        for (Map.Entry<MetricName, ? extends Metric> e : metrics.entrySet()) {
            if (e.getKey().name().equals(name) && e.getKey().group().equals("producer-metrics")) {
                return (long) ((Number) e.getValue().metricValue()).doubleValue();
            }
        }
        return -1;
    }
}
