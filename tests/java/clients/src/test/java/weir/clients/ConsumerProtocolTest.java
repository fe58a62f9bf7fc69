package weir.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Consumer-protocol groups (KIP-848, {@code group.protocol=consumer}): the broker assigns,
 * rebalances are incremental (a member gives up only what moves), and a record committed by
 * one member is never read again by another.
 */
@Timeout(150)
class ConsumerProtocolTest {

    private static Map<String, Object> conf(String assignor) {
        Map<String, Object> c = new HashMap<>();
        c.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        if (assignor != null) {
            c.put(ConsumerConfig.GROUP_REMOTE_ASSIGNOR_CONFIG, assignor);
        }
        return c;
    }

    private static KafkaConsumer<String, String> member(String group, String assignor) {
        Map<String, Object> c = conf(assignor);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        return Weir.consumer(c);
    }

    private static void produce(String topic, int partitions, int perPartition, int from) {
        try (KafkaProducer<String, String> p = Weir.producer(Map.of())) {
            for (int part = 0; part < partitions; part++) {
                for (int i = from; i < from + perPartition; i++) {
                    p.send(new ProducerRecord<>(topic, part, "k", part + ":" + i));
                }
            }
            p.flush();
        }
    }

    /** Reads with commitSync after every poll; every (partition, offset) must come once. */
    private static void drain(KafkaConsumer<String, String> c, Set<String> seen, List<String> dups) {
        for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
            if (!seen.add(r.partition() + "@" + r.offset())) {
                dups.add(r.partition() + "@" + r.offset());
            }
        }
        c.commitSync();
    }

    @Test
    void membersJoinAndLeaveIncrementallyAndNothingIsReadTwiceOrSkipped() throws Exception {
        String topic = Weir.createTopic("java-kip848", 4);
        String group = Weir.name("java-kip848-group");
        produce(topic, 4, 50, 0);
        ConsumerGroupTest.Recorder ra = new ConsumerGroupTest.Recorder();
        ConsumerGroupTest.Recorder rb = new ConsumerGroupTest.Recorder();
        Set<String> seen = new HashSet<>();
        List<String> dups = new java.util.ArrayList<>();
        KafkaConsumer<String, String> a = member(group, null);
        KafkaConsumer<String, String> b = member(group, null);
        try {
            a.subscribe(List.of(topic), ra);
            Weir.pollUntil(() -> ra.partitions().size() == 4, Duration.ofSeconds(30), "a owns all 4", a);
            for (int i = 0; i < 10; i++) {
                drain(a, seen, dups);
            }
            b.subscribe(List.of(topic), rb);
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (!(ra.partitions().size() == 2 && rb.partitions().size() == 2)) {
                assertTrue(System.nanoTime() < deadline, "no 2+2 split: a " + ra.events + " b " + rb.events);
                drain(a, seen, dups);
                drain(b, seen, dups);
            }
            Set<Integer> union = new HashSet<>(ra.partitions());
            union.addAll(rb.partitions());
            assertEquals(Set.of(0, 1, 2, 3), union, "disjoint and complete");
            // Incremental: a gave up two partitions, never all four.
            assertFalse(ra.events.contains("revoked [0, 1, 2, 3]"), ra.events.toString());
            assertTrue(ra.events.stream().anyMatch(e -> e.startsWith("revoked [") && e.length() == "revoked [x, y]".length()),
                    ra.events.toString());

            // The broker describes the group as a consumer-protocol group.
            try (Admin admin = Weir.admin()) {
                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
                assertEquals(GroupType.CONSUMER, d.type(), d.toString());
                assertEquals(GroupState.STABLE, d.groupState(), d.toString());
                assertEquals(2, d.members().size(), d.toString());
                Set<TopicPartition> assigned = new HashSet<>();
                for (MemberDescription m : d.members()) {
                    assertEquals(2, m.assignment().topicPartitions().size(), d.toString());
                    assigned.addAll(m.assignment().topicPartitions());
                }
                assertEquals(4, assigned.size(), d.toString());
            }

            produce(topic, 4, 50, 50);
            for (int i = 0; i < 20; i++) {
                drain(a, seen, dups);
                drain(b, seen, dups);
            }
            Set<Integer> bHad = rb.partitions();
            // b leaves: a takes b's partitions and only those.
            b.close(Duration.ofSeconds(10));
            Weir.pollUntil(() -> ra.partitions().size() == 4, Duration.ofSeconds(30), "a owns all 4 again", a);
            assertEquals("assigned " + new java.util.ArrayList<>(new TreeSet<>(bHad)),
                    ra.events.get(ra.events.size() - 1), "only b's partitions are added: " + ra.events);
            deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
            while (seen.size() < 400 && System.nanoTime() < deadline) {
                drain(a, seen, dups);
            }
            assertEquals(List.of(), dups, "records read twice after a commit");
            assertEquals(400, seen.size(), "every record read");
        } finally {
            a.close(Duration.ofSeconds(10));
            b.close(Duration.ofSeconds(1));
        }
    }

    @Test
    void theRangeAssignorGivesCoPartitionedTopicsTheSamePartitions() throws Exception {
        String t1 = Weir.createTopic("java-kip848-range-a", 4);
        String t2 = Weir.createTopic("java-kip848-range-b", 4);
        String group = Weir.name("java-kip848-range");
        ConsumerGroupTest.Recorder ra = new ConsumerGroupTest.Recorder();
        ConsumerGroupTest.Recorder rb = new ConsumerGroupTest.Recorder();
        KafkaConsumer<String, String> a = member(group, "range");
        KafkaConsumer<String, String> b = member(group, "range");
        try {
            a.subscribe(List.of(t1, t2), ra);
            b.subscribe(List.of(t1, t2), rb);
            Weir.pollUntil(() -> ra.owned.size() == 4 && rb.owned.size() == 4, Duration.ofSeconds(60),
                    "a 4+4 split", a, b);
            for (ConsumerGroupTest.Recorder r : List.of(ra, rb)) {
                Set<Integer> of1 = new TreeSet<>();
                Set<Integer> of2 = new TreeSet<>();
                synchronized (r.owned) {
                    r.owned.forEach(tp -> (tp.topic().equals(t1) ? of1 : of2).add(tp.partition()));
                }
                assertEquals(of1, of2, "the same partitions of both topics");
                assertEquals(2, of1.size());
            }
        } finally {
            a.close(Duration.ofSeconds(10));
            b.close(Duration.ofSeconds(10));
        }
    }

    /** The broker resolves a {@link SubscriptionPattern} (RE2J syntax, whole topic names) and
     *  assigns a matching topic created while the member runs. */
    @Test
    void aBrokerResolvedPatternReadsMatchingTopicsAndOnesCreatedLater() throws Exception {
        String prefix = Weir.name("java-kip848-rx");
        String group = Weir.name("java-kip848-rx-group");
        try (Admin admin = Weir.admin()) {
            admin.createTopics(List.of(new NewTopic(prefix + "-a", 2, (short) 1),
                    new NewTopic(prefix + "-b", 1, (short) 1),
                    new NewTopic("x" + prefix + "-a", 1, (short) 1))).all().get();
        }
        ConsumerGroupTest.Recorder r = new ConsumerGroupTest.Recorder();
        KafkaConsumer<String, String> c = member(group, null);
        try {
            c.subscribe(new SubscriptionPattern(prefix + "-[ab]|" + prefix + "-later"), r);
            Weir.pollUntil(() -> r.owned.size() == 3, Duration.ofSeconds(30), "a-0, a-1 and b-0 owned", c);
            Set<String> topics = new TreeSet<>();
            synchronized (r.owned) {
                r.owned.forEach(tp -> topics.add(tp.topic()));
            }
            assertEquals(new TreeSet<>(List.of(prefix + "-a", prefix + "-b")), topics, "whole names only");
            try (Admin admin = Weir.admin()) {
                admin.createTopics(List.of(new NewTopic(prefix + "-later", 1, (short) 1))).all().get();
            }
            Weir.pollUntil(() -> r.owned.contains(new TopicPartition(prefix + "-later", 0)),
                    Duration.ofSeconds(30), "the topic created later owned", c);
        } finally {
            c.close(Duration.ofSeconds(10));
        }
    }
}
