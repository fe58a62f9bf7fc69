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
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;
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

    /** A rebalance listener that commits what its consumer read before it gives partitions up
     *  (what an application that must not read a record twice does). */
    static final class Committing extends ConsumerGroupTest.Recorder {
        KafkaConsumer<String, String> consumer;

        @Override
        public void onPartitionsRevoked(java.util.Collection<TopicPartition> ps) {
            consumer.commitSync();
            super.onPartitionsRevoked(ps);
        }
    }

    private static Committing listen(KafkaConsumer<String, String> c, String topic) {
        Committing r = new Committing();
        r.consumer = c;
        c.subscribe(List.of(topic), r);
        return r;
    }

    /** Polls each consumer once and commits what it read (a commit refused mid-rebalance is
     *  made by the revocation callback instead). */
    private static void readAll(List<KafkaConsumer<String, String>> cs, Set<String> seen, List<String> dups) {
        for (KafkaConsumer<String, String> c : cs) {
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(100))) {
                if (!seen.add(r.partition() + "@" + r.offset())) {
                    dups.add(r.partition() + "@" + r.offset());
                }
            }
            try {
                c.commitSync();
            } catch (RebalanceInProgressException | CommitFailedException e) {
                // Committed on revocation, or read again by this member.
            }
        }
    }

    private static void readUntil(java.util.function.BooleanSupplier done, String what,
                                  List<KafkaConsumer<String, String>> cs, Set<String> seen, List<String> dups) {
        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        while (!done.getAsBoolean()) {
            assertTrue(System.nanoTime() < deadline, "timed out waiting for " + what);
            readAll(cs, seen, dups);
        }
    }

    private static GroupType typeOf(String group) throws Exception {
        try (Admin admin = Weir.admin()) {
            return admin.describeConsumerGroups(List.of(group)).all().get().get(group).type();
        }
    }

    /** Kafka 4's online migration ({@code group.consumer.migration.policy=bidirectional}): a
     *  classic group's consumers are joined by one with {@code group.protocol=consumer}, which
     *  turns the group into a consumer-protocol group whose classic members (one cooperative,
     *  one eager) the broker assigns for; when it leaves, the group is classic again. They read
     *  all along, and every record is read exactly once. */
    @Test
    void aClassicGroupMovesToTheConsumerProtocolAndBackWhileItsMembersRead() throws Exception {
        String topic = Weir.createTopic("java-migrate", 4);
        String group = Weir.name("java-migrate-group");
        produce(topic, 4, 50, 0);
        Set<String> seen = new HashSet<>();
        List<String> dups = new java.util.ArrayList<>();
        KafkaConsumer<String, String> a = Weir.groupConsumer(group, Map.of(
                ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, CooperativeStickyAssignor.class.getName(),
                ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 500));
        KafkaConsumer<String, String> b = Weir.groupConsumer(group, Map.of(
                ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
                RangeAssignor.class.getName() + "," + CooperativeStickyAssignor.class.getName(),
                ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 500));
        KafkaConsumer<String, String> c = member(group, null);
        try {
            Committing ra = listen(a, topic);
            Committing rb = listen(b, topic);
            readUntil(() -> ra.owned.size() == 2 && rb.owned.size() == 2, "a classic 2+2 split",
                    List.of(a, b), seen, dups);
            assertEquals(GroupType.CLASSIC, typeOf(group));

            // The upgrade: a consumer-protocol member joins the classic group.
            Committing rc = listen(c, topic);
            readUntil(() -> !rc.owned.isEmpty() && !ra.owned.isEmpty() && !rb.owned.isEmpty()
                            && ra.owned.size() + rb.owned.size() + rc.owned.size() == 4,
                    "partitions split over the classic and the consumer-protocol members", List.of(a, b, c), seen, dups);
            Set<TopicPartition> all = new HashSet<>(ra.owned);
            all.addAll(rb.owned);
            all.addAll(rc.owned);
            assertEquals(4, all.size(), "no partition owned twice: a " + ra.events + " b " + rb.events + " c " + rc.events);
            try (Admin admin = Weir.admin()) {
                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
                assertEquals(GroupType.CONSUMER, d.type(), d.toString());
                assertEquals(3, d.members().size(), d.toString());
                long classic = d.members().stream().filter(m -> m.upgraded().equals(java.util.Optional.of(false))).count();
                assertEquals(2, classic, "two classic members: " + d);
            }
            assertFalse(ra.events.stream().anyMatch(e -> e.startsWith("lost")), "a lost partitions: " + ra.events);
            assertFalse(rb.events.stream().anyMatch(e -> e.startsWith("lost")), "b lost partitions: " + rb.events);
            produce(topic, 4, 50, 50);
            readUntil(() -> seen.size() >= 400, "400 records", List.of(a, b, c), seen, dups);

            // The downgrade: the consumer-protocol member leaves; the classic members rebalance.
            c.close(Duration.ofSeconds(10));
            readUntil(() -> ra.owned.size() + rb.owned.size() == 4 && !ra.owned.isEmpty() && !rb.owned.isEmpty(),
                    "the classic members own all 4 again", List.of(a, b), seen, dups);
            assertEquals(GroupType.CLASSIC, typeOf(group));
            produce(topic, 4, 50, 100);
            readUntil(() -> seen.size() >= 600, "600 records", List.of(a, b), seen, dups);
            for (int i = 0; i < 10; i++) {
                readAll(List.of(a, b), seen, dups);
            }
            assertEquals(List.of(), dups, "records read twice after a commit");
            assertEquals(600, seen.size(), "every record read once");
        } finally {
            a.close(Duration.ofSeconds(10));
            b.close(Duration.ofSeconds(10));
            c.close(Duration.ofSeconds(1));
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
