package weir.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.ConsumerGroupListing;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.MemberDescription;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.ElectionNotNeededException;
import org.apache.kafka.common.errors.GroupIdNotFoundException;
import org.apache.kafka.common.errors.GroupNotEmptyException;
import org.apache.kafka.common.errors.GroupSubscribedToTopicException;
import org.apache.kafka.common.errors.InvalidPartitionsException;
import org.apache.kafka.common.errors.InvalidReplicaAssignmentException;
import org.apache.kafka.common.errors.InvalidRequestException;
import org.apache.kafka.common.errors.NoReassignmentInProgressException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Every AdminClient call weir advertises an API for (but ACLs and SCRAM: SecuredAdminTest). */
@Timeout(120)
class AdminTest {
    static Admin admin;

    @BeforeAll
    static void open() {
        admin = Weir.admin();
    }

    @AfterAll
    static void close() {
        admin.close(Duration.ofSeconds(10));
    }

    private static <T> T get(org.apache.kafka.common.KafkaFuture<T> f) throws Exception {
        return f.get(30, TimeUnit.SECONDS);
    }

    /** The cause of a failed future, asserting its type. */
    private static <E extends Throwable> E failure(Class<E> type, org.apache.kafka.common.KafkaFuture<?> f) {
        ExecutionException e = assertThrows(ExecutionException.class, () -> f.get(30, TimeUnit.SECONDS));
        return assertInstanceOf(type, e.getCause(), e.toString());
    }

    private static Map<String, ConfigEntry> configs(ConfigResource r) throws Exception {
        Config c = get(admin.describeConfigs(List.of(r)).all()).get(r);
        return c.entries().stream().collect(Collectors.toMap(ConfigEntry::name, e -> e));
    }

    private static void produce(String topic, int partition, int n) {
        try (KafkaProducer<String, String> p = Weir.producer(Map.of())) {
            for (int i = 0; i < n; i++) {
                p.send(new ProducerRecord<>(topic, partition, "k" + i, "v" + i));
            }
            p.flush();
        }
    }

    @Test
    void topicsCreateListDescribeDeleteWithConfigs() throws Exception {
        String topic = Weir.name("java-admin-topic");
        var result = admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1).configs(Map.of(
                "retention.ms", "3600000", "cleanup.policy", "compact", "max.message.bytes", "200000"))));
        get(result.all());
        assertEquals(3, get(result.numPartitions(topic)));
        assertNotNull(get(result.topicId(topic)));

        assertTrue(get(admin.listTopics().names()).contains(topic));
        assertFalse(get(admin.listTopics(new ListTopicsOptions().listInternal(false)).names()).stream()
                .anyMatch(t -> t.startsWith("__")), "no internal topics without listInternal");
        TopicDescription d = get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic);
        assertEquals(3, d.partitions().size());
        assertFalse(d.isInternal());
        Set<Integer> brokerIds = get(admin.describeCluster().nodes()).stream().map(Node::id).collect(Collectors.toSet());
        for (TopicPartitionInfo p : d.partitions()) {
            assertNotNull(p.leader(), "partition " + p.partition() + " has a leader");
            assertTrue(brokerIds.contains(p.leader().id()), p.toString());
            assertEquals(List.of(p.leader()), p.replicas());
            assertEquals(List.of(p.leader()), p.isr());
        }

        Map<String, ConfigEntry> cfg = configs(new ConfigResource(ConfigResource.Type.TOPIC, topic));
        assertEquals("3600000", cfg.get("retention.ms").value());
        assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, cfg.get("retention.ms").source());
        assertEquals(ConfigEntry.ConfigType.LONG, cfg.get("retention.ms").type());
        assertEquals("compact", cfg.get("cleanup.policy").value());
        assertEquals(ConfigEntry.ConfigType.LIST, cfg.get("cleanup.policy").type());
        assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG, cfg.get("segment.bytes").source());

        failure(TopicExistsException.class, admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all());
        get(admin.deleteTopics(List.of(topic)).all());
        long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
        while (get(admin.listTopics().names()).contains(topic)) {
            assertTrue(System.nanoTime() < deadline, "deleted topic still listed");
            Thread.sleep(100);
        }
        failure(UnknownTopicOrPartitionException.class, admin.describeTopics(List.of(topic)).allTopicNames());
        failure(UnknownTopicOrPartitionException.class, admin.deleteTopics(List.of(topic)).all());
    }

    @Test
    void createTopicsAnswersTheNewTopicsConfigs() throws Exception {
        // KIP-525 (CreateTopics v5+): the response carries the created topic's configs, as
        // DescribeConfigs would give them; AdminClient hands them out as result.config(topic).
        String topic = Weir.name("java-admin-kip525");
        var result = admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1).configs(Map.of(
                "retention.ms", "3600000"))));
        get(result.all());
        Config c = get(result.config(topic));
        ConfigEntry e = c.get("retention.ms");
        assertNotNull(e, "retention.ms not among the configs CreateTopics answered: " + c);
        assertEquals("3600000", e.value());
        assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, e.source());
        assertNotNull(c.get("segment.bytes"), "defaults are answered too: " + c);
        assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG, c.get("segment.bytes").source());
    }

    @Test
    void createPartitions() throws Exception {
        String topic = Weir.createTopic(admin, "java-admin-partitions", 2);
        get(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all());
        long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
        while (get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic).partitions().size() != 5) {
            assertTrue(System.nanoTime() < deadline, "still not 5 partitions");
            Thread.sleep(100);
        }
        // The new partition takes records (the producer refreshes its metadata).
        try (KafkaProducer<String, String> p = Weir.producer(Map.of(ProducerConfig.MAX_BLOCK_MS_CONFIG, 30000))) {
            assertEquals(4, p.send(new ProducerRecord<>(topic, 4, "k", "v")).get(30, TimeUnit.SECONDS).partition());
        }
        failure(InvalidPartitionsException.class, admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(3))).all());
        failure(UnknownTopicOrPartitionException.class,
                admin.createPartitions(Map.of(Weir.name("java-no-such"), NewPartitions.increaseTo(3))).all());
    }

    @Test
    void incrementalAlterConfigsOnTopics() throws Exception {
        String topic = Weir.createTopic(admin, "java-admin-iac", 1);
        ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        Map<ConfigResource, Collection<AlterConfigOp>> ops = Map.of(r, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "120000"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND)));
        get(admin.incrementalAlterConfigs(ops).all());
        Map<String, ConfigEntry> cfg = configs(r);
        assertEquals("120000", cfg.get("retention.ms").value());
        assertEquals("delete,compact", cfg.get("cleanup.policy").value());

        get(admin.incrementalAlterConfigs(Map.of(r, List.of(
                new AlterConfigOp(new ConfigEntry("cleanup.policy", "delete"), AlterConfigOp.OpType.SUBTRACT),
                new AlterConfigOp(new ConfigEntry("retention.ms", null), AlterConfigOp.OpType.DELETE)))).all());
        cfg = configs(r);
        assertEquals("compact", cfg.get("cleanup.policy").value());
        assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG, cfg.get("retention.ms").source());
        assertEquals("604800000", cfg.get("retention.ms").value());

        // validateOnly changes nothing; an invalid value is refused.
        get(admin.incrementalAlterConfigs(Map.of(r, List.of(new AlterConfigOp(new ConfigEntry("retention.ms", "1000"),
                AlterConfigOp.OpType.SET))), new org.apache.kafka.clients.admin.AlterConfigsOptions().validateOnly(true)).all());
        assertEquals("604800000", configs(r).get("retention.ms").value());
        failure(org.apache.kafka.common.errors.InvalidConfigurationException.class,
                admin.incrementalAlterConfigs(Map.of(r, List.of(new AlterConfigOp(
                        new ConfigEntry("retention.ms", "not-a-number"), AlterConfigOp.OpType.SET)))).all());
    }

    @Test
    void brokerConfigsAreDescribedAndStatic() throws Exception {
        Node node = get(admin.describeCluster().nodes()).iterator().next();
        ConfigResource r = new ConfigResource(ConfigResource.Type.BROKER, Integer.toString(node.id()));
        Map<String, ConfigEntry> cfg = configs(r);
        assertEquals("1", cfg.get("num.partitions").value(), cfg.get("num.partitions").toString());
        assertEquals(ConfigEntry.ConfigType.INT, cfg.get("num.partitions").type());
        assertNotNull(cfg.get("log.retention.ms"));
        assertTrue(cfg.get("num.partitions").isReadOnly());
        // weir's broker settings are static (read-only, as Kafka's non-dynamic ones): altering
        // one is refused with INVALID_REQUEST, as Kafka refuses a read-only config.
        InvalidRequestException e = failure(InvalidRequestException.class, admin.incrementalAlterConfigs(Map.of(r,
                List.of(new AlterConfigOp(new ConfigEntry("num.partitions", "3"), AlterConfigOp.OpType.SET)))).all());
        assertTrue(e.getMessage().contains("static"), e.getMessage());
        assertEquals("1", configs(r).get("num.partitions").value());
    }

    @Test
    void deleteRecordsMovesTheLogStart() throws Exception {
        String topic = Weir.createTopic(admin, "java-admin-delrec", 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        produce(topic, 0, 20);
        var res = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(12)));
        assertEquals(12L, get(res.lowWatermarks().get(tp)).lowWatermark());
        try (KafkaConsumer<String, String> c = Weir.consumer(Map.of())) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            List<ConsumerRecord<String, String>> got = Weir.poll(c, 8, Duration.ofSeconds(30));
            assertEquals(12L, got.get(0).offset());
            assertEquals("v12", got.get(0).value());
        }
        // -1: up to the high watermark.
        res = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(-1)));
        assertEquals(20L, get(res.lowWatermarks().get(tp)).lowWatermark());
        failure(org.apache.kafka.common.errors.OffsetOutOfRangeException.class,
                admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(25))).all());
    }

    @Test
    void consumerGroupAdmin() throws Exception {
        String topic = Weir.createTopic(admin, "java-admin-groups", 2);
        String group = Weir.name("java-admin-group");
        produce(topic, 0, 10);
        produce(topic, 1, 10);
        TopicPartition p0 = new TopicPartition(topic, 0);
        TopicPartition p1 = new TopicPartition(topic, 1);
        try (KafkaConsumer<String, String> c = Weir.groupConsumer(group, Map.of())) {
            c.subscribe(List.of(topic));
            Weir.poll(c, 20, Duration.ofSeconds(30));
            c.commitSync();
            // While the member is there: Stable, one member owning both partitions.
            ConsumerGroupDescription d = get(admin.describeConsumerGroups(List.of(group)).all()).get(group);
            assertEquals(GroupState.STABLE, d.groupState());
            assertEquals("range", d.partitionAssignor().isEmpty() ? "range" : d.partitionAssignor().split(",")[0]);
            assertEquals(1, d.members().size());
            MemberDescription m = d.members().iterator().next();
            assertEquals(Set.of(p0, p1), m.assignment().topicPartitions());
            assertNotNull(d.coordinator());
            assertFalse(d.isSimpleConsumerGroup());

            Collection<ConsumerGroupListing> listed = get(admin.listConsumerGroups().all());
            assertTrue(listed.stream().anyMatch(l -> l.groupId().equals(group)), listed.toString());
            Collection<GroupListing> groups = get(admin.listGroups().all());
            assertEquals(1, groups.stream().filter(l -> l.groupId().equals(group)).count(), groups.toString());

            // A group with a member: not deletable, its subscribed offsets neither.
            failure(GroupNotEmptyException.class, admin.deleteConsumerGroups(List.of(group)).all());
            failure(GroupSubscribedToTopicException.class,
                    admin.deleteConsumerGroupOffsets(group, Set.of(p0)).all());
        }
        ConsumerGroupDescription d = get(admin.describeConsumerGroups(List.of(group)).all()).get(group);
        assertEquals(GroupState.EMPTY, d.groupState());
        assertTrue(d.members().isEmpty());

        Map<TopicPartition, OffsetAndMetadata> offsets = get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
        assertEquals(10L, offsets.get(p0).offset());
        assertEquals(10L, offsets.get(p1).offset());

        get(admin.alterConsumerGroupOffsets(group, Map.of(p0, new OffsetAndMetadata(3, "rewound"))).all());
        offsets = get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
        assertEquals(3L, offsets.get(p0).offset());
        assertEquals("rewound", offsets.get(p0).metadata());
        // A consumer of the group starts at the offsets set by the admin.
        try (KafkaConsumer<String, String> c = Weir.groupConsumer(group, Map.of())) {
            c.assign(List.of(p0));
            assertEquals("v3", Weir.poll(c, 1, Duration.ofSeconds(30)).get(0).value());
        }

        get(admin.deleteConsumerGroupOffsets(group, Set.of(p1)).all());
        offsets = get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata());
        assertEquals(Set.of(p0), offsets.keySet());

        get(admin.deleteConsumerGroups(List.of(group)).all());
        assertFalse(get(admin.listConsumerGroups().all()).stream().anyMatch(l -> l.groupId().equals(group)));
        failure(GroupIdNotFoundException.class, admin.deleteConsumerGroups(List.of(group)).all());
    }

    @Test
    void clusterLogDirsAndFeatures() throws Exception {
        DescribeClusterResult c = admin.describeCluster();
        Collection<Node> nodes = get(c.nodes());
        assertFalse(nodes.isEmpty());
        String clusterId = get(c.clusterId());
        assertNotNull(clusterId);
        assertFalse(clusterId.isEmpty());
        Node controller = get(c.controller());
        assertNotNull(controller);
        Set<Integer> ids = nodes.stream().map(Node::id).collect(Collectors.toSet());
        for (Node n : nodes) {
            assertEquals("127.0.0.1", n.host());
        }

        String topic = Weir.createTopic(admin, "java-admin-logdirs", 1);
        produce(topic, 0, 5);
        Map<Integer, Map<String, LogDirDescription>> dirs = get(admin.describeLogDirs(ids).allDescriptions());
        assertEquals(ids, dirs.keySet());
        long size = dirs.values().stream().flatMap(m -> m.values().stream())
                .map(d -> d.replicaInfos().get(new TopicPartition(topic, 0)))
                .filter(ri -> ri != null).mapToLong(ri -> ri.size()).max().orElse(-1);
        assertTrue(size > 0, dirs.toString());

        FeatureMetadata f = get(admin.describeFeatures().featureMetadata());
        assertNotNull(f.finalizedFeatures());
        assertNotNull(f.supportedFeatures());
        System.out.println("describeFeatures: " + f);
    }

    @Test
    void transactionsAreListedAndDescribed() throws Exception {
        String topic = Weir.createTopic(admin, "java-admin-txn", 2);
        String txId = Weir.name("java-admin-tx");
        try (KafkaProducer<String, String> p = Weir.producer(Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txId))) {
            p.initTransactions();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 0, "k", "v")).get(30, TimeUnit.SECONDS);
            p.send(new ProducerRecord<>(topic, 1, "k", "v")).get(30, TimeUnit.SECONDS);

            Collection<TransactionListing> listed = get(admin.listTransactions().all());
            TransactionListing l = listed.stream().filter(t -> t.transactionalId().equals(txId)).findFirst()
                    .orElseThrow(() -> new AssertionError(txId + " not in " + listed));
            assertEquals(TransactionState.ONGOING, l.state());
            TransactionDescription d = get(admin.describeTransactions(List.of(txId)).all()).get(txId);
            assertEquals(TransactionState.ONGOING, d.state());
            assertEquals(Set.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1)), d.topicPartitions());
            assertEquals(l.producerId(), d.producerId());
            assertTrue(d.transactionStartTimeMs().isPresent());
            // The partition knows the open transaction's producer too.
            var states = get(admin.describeProducers(List.of(new TopicPartition(topic, 0))).all())
                    .get(new TopicPartition(topic, 0)).activeProducers();
            assertEquals(1, states.size(), states.toString());
            assertEquals(d.producerId(), states.get(0).producerId());

            p.commitTransaction();
            d = get(admin.describeTransactions(List.of(txId)).all()).get(txId);
            assertTrue(d.state() == TransactionState.COMPLETE_COMMIT || d.state() == TransactionState.EMPTY, d.toString());
            assertTrue(d.topicPartitions().isEmpty(), d.toString());
        }
        failure(org.apache.kafka.common.errors.TransactionalIdNotFoundException.class,
                admin.describeTransactions(List.of(Weir.name("java-no-such-tx"))).all());
    }

    @Test
    void electLeadersAndReassignmentsOnASingleNode() throws Exception {
        String topic = Weir.createTopic(admin, "java-admin-reassign", 2);
        TopicPartition p0 = new TopicPartition(topic, 0);
        Map<TopicPartition, Optional<Throwable>> elected = get(admin.electLeaders(ElectionType.PREFERRED, Set.of(p0)).partitions());
        assertInstanceOf(ElectionNotNeededException.class, elected.get(p0).orElseThrow(), elected.toString());

        Map<TopicPartition, PartitionReassignment> ongoing = get(admin.listPartitionReassignments().reassignments());
        assertTrue(ongoing.isEmpty(), ongoing.toString());

        TopicPartitionInfo info = get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic).partitions().get(0);
        int leader = info.leader().id();
        // To its current (and only) replica: accepted, nothing to move.
        get(admin.alterPartitionReassignments(Map.of(p0, Optional.of(new NewPartitionReassignment(List.of(leader))))).all());
        // To a broker that does not exist: refused.
        failure(InvalidReplicaAssignmentException.class, admin.alterPartitionReassignments(
                Map.of(p0, Optional.of(new NewPartitionReassignment(List.of(4242))))).all());
        // Cancelling when none is in progress.
        failure(NoReassignmentInProgressException.class,
                admin.alterPartitionReassignments(Map.of(p0, Optional.empty())).all());
        assertTrue(get(admin.listPartitionReassignments().reassignments()).isEmpty());
    }

    @Test
    void listOffsetsAndConfigResources() throws Exception {
        String topic = Weir.createTopic(admin, "java-admin-byid", 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        long t0 = 1_650_000_000_000L;
        try (KafkaProducer<String, String> p = Weir.producer(Map.of())) {
            for (int i = 0; i < 6; i++) {
                // Timestamps out of order: the max is at offset 2.
                long ts = i == 2 ? t0 + 100_000 : t0 + i * 1000L;
                p.send(new ProducerRecord<>(topic, 0, ts, "k", "v" + i));
            }
            p.flush();
        }
        // ListOffsets through AdminClient: earliest, latest, by time, max timestamp (KIP-734).
        Map<TopicPartition, org.apache.kafka.clients.admin.OffsetSpec> spec = Map.of(tp,
                org.apache.kafka.clients.admin.OffsetSpec.earliest());
        assertEquals(0L, get(admin.listOffsets(spec).partitionResult(tp)).offset());
        assertEquals(6L, get(admin.listOffsets(Map.of(tp, org.apache.kafka.clients.admin.OffsetSpec.latest()))
                .partitionResult(tp)).offset());
        // By time: the first offset whose timestamp is at or after it (offset 2's t0+100s counts).
        assertEquals(1L, get(admin.listOffsets(Map.of(tp, org.apache.kafka.clients.admin.OffsetSpec.forTimestamp(t0 + 500)))
                .partitionResult(tp)).offset());
        assertEquals(2L, get(admin.listOffsets(Map.of(tp, org.apache.kafka.clients.admin.OffsetSpec.forTimestamp(t0 + 3500)))
                .partitionResult(tp)).offset());
        var max = get(admin.listOffsets(Map.of(tp, org.apache.kafka.clients.admin.OffsetSpec.maxTimestamp()))
                .partitionResult(tp));
        assertEquals(2L, max.offset());
        assertEquals(t0 + 100_000, max.timestamp());

        // ListConfigResources (KIP-1142): the topic and the brokers have configs.
        Collection<ConfigResource> resources = get(admin.listConfigResources(
                Set.of(ConfigResource.Type.TOPIC, ConfigResource.Type.BROKER),
                new org.apache.kafka.clients.admin.ListConfigResourcesOptions()).all());
        assertTrue(resources.contains(new ConfigResource(ConfigResource.Type.TOPIC, topic)), resources.toString());
        assertTrue(resources.stream().anyMatch(r -> r.type() == ConfigResource.Type.BROKER), resources.toString());

    }

    @Test
    void describeTopicsById() throws Exception {
        // KIP-516: Metadata v12+ names topics by id (AdminClient sends the id with an empty name).
        String topic = Weir.createTopic(admin, "java-admin-describe-id", 2);
        org.apache.kafka.common.Uuid id = get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic).topicId();
        assertNotNull(id);
        assertFalse(id.equals(org.apache.kafka.common.Uuid.ZERO_UUID));
        TopicDescription byId = get(admin.describeTopics(org.apache.kafka.common.TopicCollection.ofTopicIds(List.of(id)))
                .allTopicIds()).get(id);
        assertEquals(topic, byId.name());
        assertEquals(2, byId.partitions().size());
        org.apache.kafka.common.Uuid unknown = org.apache.kafka.common.Uuid.randomUuid();
        failure(org.apache.kafka.common.errors.UnknownTopicIdException.class,
                admin.describeTopics(org.apache.kafka.common.TopicCollection.ofTopicIds(List.of(unknown))).allTopicIds());
    }

    @Test
    void deleteTopicsById() throws Exception {
        String topic = Weir.createTopic(admin, "java-admin-delete-id", 1);
        org.apache.kafka.common.Uuid id = get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic).topicId();
        get(admin.deleteTopics(org.apache.kafka.common.TopicCollection.ofTopicIds(List.of(id))).all());
        long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
        while (get(admin.listTopics().names()).contains(topic)) {
            assertTrue(System.nanoTime() < deadline, "topic deleted by id still listed");
            Thread.sleep(100);
        }
        failure(org.apache.kafka.common.errors.UnknownTopicIdException.class,
                admin.deleteTopics(org.apache.kafka.common.TopicCollection.ofTopicIds(List.of(id))).all());
    }

    @Test
    void replicaLogDirs() throws Exception {
        String topic = Weir.createTopic(admin, "java-admin-replicadirs", 1);
        produce(topic, 0, 3);
        int leader = get(admin.describeTopics(List.of(topic)).allTopicNames()).get(topic).partitions().get(0).leader().id();
        org.apache.kafka.common.TopicPartitionReplica replica = new org.apache.kafka.common.TopicPartitionReplica(topic, 0, leader);
        var info = get(admin.describeReplicaLogDirs(List.of(replica)).all()).get(replica);
        assertNotNull(info.getCurrentReplicaLogDir(), info.toString());
        // Moving it to the log dir it is in: done already. Another path: LOG_DIR_NOT_FOUND.
        get(admin.alterReplicaLogDirs(Map.of(replica, info.getCurrentReplicaLogDir())).all());
        failure(org.apache.kafka.common.errors.LogDirNotFoundException.class,
                admin.alterReplicaLogDirs(Map.of(replica, "/no/such/log/dir")).all());
    }

    @Test
    void fenceProducersEndsAnOpenTransaction() throws Exception {
        String topic = Weir.createTopic(admin, "java-admin-fence", 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        String txId = Weir.name("java-admin-fence-tx");
        try (KafkaProducer<String, String> p = Weir.producer(Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txId))) {
            p.initTransactions();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 0, "k", "fenced")).get(30, TimeUnit.SECONDS);
            get(admin.fenceProducers(List.of(txId)).all());
            assertThrows(org.apache.kafka.common.errors.ProducerFencedException.class, p::commitTransaction);
        }
        try (KafkaConsumer<String, String> c = Weir.consumer(Map.of("isolation.level", "read_committed"))) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            assertTrue(Weir.pollFor(c, Duration.ofSeconds(1)).isEmpty(), "the fenced transaction was aborted");
            assertEquals(c.endOffsets(List.of(tp)).get(tp), c.position(tp), "and its abort marker is stable");
        }
    }
}
