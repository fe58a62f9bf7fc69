package weir.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Classic-protocol consumer groups: assignors, rebalances, listeners, static membership. */
@Timeout(150)
class ConsumerGroupTest {

    /** Every rebalance callback, in order, as "assigned [..]", "revoked [..]", "lost [..]". */
    static class Recorder implements ConsumerRebalanceListener {
        final List<String> events = new CopyOnWriteArrayList<>();
        final Set<TopicPartition> owned = Collections.synchronizedSet(new HashSet<>());

        private static String fmt(Collection<TopicPartition> ps) {
            return ps.stream().map(TopicPartition::partition).sorted().toList().toString();
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> ps) {
            events.add("revoked " + fmt(ps));
            owned.removeAll(ps);
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> ps) {
            events.add("assigned " + fmt(ps));
            owned.addAll(ps);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> ps) {
            events.add("lost " + fmt(ps));
            owned.removeAll(ps);
        }

        Set<Integer> partitions() {
            synchronized (owned) {
                Set<Integer> s = new HashSet<>();
                owned.forEach(tp -> s.add(tp.partition()));
                return s;
            }
        }
    }

    private static Map<String, Object> assignorConf(String assignor) {
        String cls = assignor.equals("range") ? RangeAssignor.class.getName() : CooperativeStickyAssignor.class.getName();
        return Map.of(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, cls,
                ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 10000,
                ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 500);
    }

    private static void produce(String topic, int partitions, int perPartition) {
        try (KafkaProducer<String, String> p = Weir.producer(Map.of())) {
            for (int part = 0; part < partitions; part++) {
                for (int i = 0; i < perPartition; i++) {
                    p.send(new ProducerRecord<>(topic, part, "k", part + ":" + i));
                }
            }
            p.flush();
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"range", "cooperative-sticky"})
    void twoMembersSplitThePartitionsAndTheSurvivorTakesAllOnLeave(String assignor) throws Exception {
        String topic = Weir.createTopic("java-assign-" + assignor, 4);
        String group = Weir.name("java-group-" + assignor);
        produce(topic, 4, 5);
        Recorder ra = new Recorder();
        Recorder rb = new Recorder();
        KafkaConsumer<String, String> a = Weir.groupConsumer(group, assignorConf(assignor));
        KafkaConsumer<String, String> b = Weir.groupConsumer(group, assignorConf(assignor));
        try {
            a.subscribe(List.of(topic), ra);
            Weir.pollUntil(() -> ra.partitions().size() == 4, Duration.ofSeconds(30), "a owns all 4", a);
            b.subscribe(List.of(topic), rb);
            List<ConsumerRecord<String, String>> seen = new CopyOnWriteArrayList<>();
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (!(ra.partitions().size() == 2 && rb.partitions().size() == 2)) {
                assertTrue(System.nanoTime() < deadline, "no 2+2 split: a " + ra.events + " b " + rb.events);
                a.poll(Duration.ofMillis(100)).forEach(seen::add);
                b.poll(Duration.ofMillis(100)).forEach(seen::add);
            }
            Set<Integer> union = new HashSet<>(ra.partitions());
            union.addAll(rb.partitions());
            assertEquals(Set.of(0, 1, 2, 3), union, "disjoint and complete");
            if (assignor.equals("range")) {
                // Eager: everything revoked at the second join, then the new split assigned.
                assertTrue(ra.events.contains("revoked [0, 1, 2, 3]"), ra.events.toString());
            } else {
                // Cooperative: a keeps two partitions throughout, gives up only the other two.
                assertFalse(ra.events.contains("revoked [0, 1, 2, 3]"), ra.events.toString());
                assertTrue(ra.events.stream().anyMatch(e -> e.startsWith("revoked [") && e.length() == "revoked [x, y]".length()),
                        ra.events.toString());
            }
            Set<Integer> bHad = rb.partitions();
            // b leaves (LeaveGroup at close): a rebalances and takes b's partitions too.
            b.close(Duration.ofSeconds(10));
            assertTrue(rb.events.get(rb.events.size() - 1).startsWith("revoked"), rb.events.toString());
            Weir.pollUntil(() -> ra.partitions().size() == 4, Duration.ofSeconds(30), "a owns all 4 again", a);
            assertTrue(ra.events.get(ra.events.size() - 1).startsWith("assigned"), ra.events.toString());
            if (!assignor.equals("range")) {
                assertEquals("assigned " + new ArrayList<>(new java.util.TreeSet<>(bHad)),
                        ra.events.get(ra.events.size() - 1), "cooperative: only b's partitions are added");
            }
            // Every record was delivered to someone; after the rebalance, a reads the rest.
            a.commitSync();
        } finally {
            a.close(Duration.ofSeconds(10));
            b.close(Duration.ofSeconds(1));
        }
    }

    @Test
    void staticMemberRestartKeepsItsAssignmentWithoutARebalance() throws Exception {
        String topic = Weir.createTopic("java-static", 4);
        String group = Weir.name("java-static-group");
        Map<String, Object> conf = new java.util.HashMap<>(assignorConf("range"));
        conf.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 30000);
        Map<String, Object> confA = new java.util.HashMap<>(conf);
        confA.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "member-a");
        Map<String, Object> confB = new java.util.HashMap<>(conf);
        confB.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, "member-b");
        Recorder ra = new Recorder();
        Recorder rb = new Recorder();
        KafkaConsumer<String, String> a = Weir.groupConsumer(group, confA);
        KafkaConsumer<String, String> b = Weir.groupConsumer(group, confB);
        KafkaConsumer<String, String> a2 = null;
        try {
            a.subscribe(List.of(topic), ra);
            b.subscribe(List.of(topic), rb);
            Weir.pollUntil(() -> ra.partitions().size() == 2 && rb.partitions().size() == 2,
                    Duration.ofSeconds(60), "a 2+2 split", a, b);
            // Settle: both members in the same, stable generation.
            for (int i = 0; i < 10; i++) {
                a.poll(Duration.ofMillis(100));
                b.poll(Duration.ofMillis(100));
            }
            Set<Integer> aHad = ra.partitions();
            Set<Integer> bHad = rb.partitions();
            int bEvents = rb.events.size();
            // A static member's close leaves no LeaveGroup: the group waits a session timeout.
            a.close(Duration.ofSeconds(10));
            a = null;
            for (int i = 0; i < 10; i++) {
                b.poll(Duration.ofMillis(100));
            }
            Recorder ra2 = new Recorder();
            a2 = Weir.groupConsumer(group, confA);
            a2.subscribe(List.of(topic), ra2);
            KafkaConsumer<String, String> a2f = a2;
            Weir.pollUntil(() -> !ra2.partitions().isEmpty(), Duration.ofSeconds(30), "the restarted member's assignment", a2, b);
            assertEquals(aHad, ra2.partitions(), "the same partitions as before the restart: " + ra2.events);
            // Keep both polling for several heartbeats: b sees no rebalance at all.
            for (int i = 0; i < 20; i++) {
                a2f.poll(Duration.ofMillis(100));
                b.poll(Duration.ofMillis(100));
            }
            assertEquals(bEvents, rb.events.size(), "b saw no rebalance: " + rb.events);
            assertEquals(bHad, rb.partitions());
            assertEquals(List.of("assigned " + new ArrayList<>(new java.util.TreeSet<>(aHad))), ra2.events);
        } finally {
            if (a != null) {
                a.close(Duration.ofSeconds(5));
            }
            if (a2 != null) {
                a2.close(Duration.ofSeconds(5));
            }
            b.close(Duration.ofSeconds(5));
        }
    }

    @Test
    void partitionsAreLostWhenTheMemberMissesItsPollInterval() throws Exception {
        String topic = Weir.createTopic("java-lost", 2);
        String group = Weir.name("java-lost-group");
        Map<String, Object> conf = new java.util.HashMap<>(assignorConf("range"));
        conf.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, 2000);
        Recorder r = new Recorder();
        try (KafkaConsumer<String, String> c = Weir.groupConsumer(group, conf)) {
            c.subscribe(List.of(topic), r);
            Weir.pollUntil(() -> r.partitions().size() == 2, Duration.ofSeconds(30), "assignment", c);
            assertEquals(List.of("assigned [0, 1]"), r.events);
            // No poll for longer than max.poll.interval.ms: the client leaves the group; its next
            // poll finds its generation gone and calls onPartitionsLost, then rejoins.
            Thread.sleep(4000);
            Weir.pollUntil(() -> r.events.size() >= 3 && r.partitions().size() == 2, Duration.ofSeconds(30),
                    "lost then assigned again", c);
            assertEquals(List.of("assigned [0, 1]", "lost [0, 1]", "assigned [0, 1]"), r.events);
        }
    }
}
