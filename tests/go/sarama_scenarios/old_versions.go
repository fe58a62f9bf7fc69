package main

// sarama_scenarios old -brokers B -topic T -group G
//
// The request versions Kafka 4 dropped (KIP-896) and Kafka 3.9 still served, sent by sarama
// the way its users get them: by setting Config.Version to an old Kafka, or by building the
// request with an explicit version. Each step records what sarama read back; the test
// asserts on it.
//   - ClusterAdmin at Kafka 0.10.1: CreateTopics v0 (a new topic with a config; the same
//     topic again) and DeleteTopics v0 (at the end); at Kafka 0.11: DescribeConfigs v0 (the
//     topic's own value and a default).
//   - ClusterAdmin at Kafka 0.10.2: CreateTopics v1 (validate_only creates nothing; a bad
//     partition count gets an error message).
//   - Client at Kafka 0.10.0: ListOffsets v0 (newest and oldest offsets after 5 records were
//     written by a current client).
//   - OffsetCommit v0 and v1, OffsetFetch v0 and v1, each to the group coordinator, and the
//     same offsets read back by a current OffsetFetch (ClusterAdmin at the default version).

import (
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

func configAt(v sarama.KafkaVersion) *sarama.Config {
	cfg := baseConfig()
	cfg.Version = v
	return cfg
}

func oldVersions() {
	out := map[string]any{}
	topic, group := *topicFlag, *groupFlag

	// CreateTopics v0, DescribeConfigs v0 (sarama picks v0 below Kafka 0.10.2 / 1.1).
	admin, err := sarama.NewClusterAdmin(brokers(), configAt(sarama.V0_10_1_0))
	if err != nil {
		fail(out, fmt.Errorf("admin at 0.10.1: %w", err))
	}
	defer admin.Close()
	detail := &sarama.TopicDetail{
		NumPartitions:     2,
		ReplicationFactor: 1,
		ConfigEntries:     map[string]*string{"retention.ms": ptr("3600000")},
	}
	out["create_v0"] = errText(admin.CreateTopic(topic, detail, false))
	out["create_v0_again"] = errText(admin.CreateTopic(topic, detail, false))
	// DescribeConfigs needs Kafka 0.11 in sarama's eyes, and is v0 below Kafka 1.1.
	admin11, err := sarama.NewClusterAdmin(brokers(), configAt(sarama.V0_11_0_0))
	if err != nil {
		fail(out, fmt.Errorf("admin at 0.11: %w", err))
	}
	defer admin11.Close()
	entries, err := admin11.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic})
	if err != nil {
		fail(out, fmt.Errorf("DescribeConfigs v0: %w", err))
	}
	configs := map[string]map[string]any{}
	for _, e := range entries {
		configs[e.Name] = map[string]any{"value": e.Value, "default": e.Default, "read_only": e.ReadOnly}
	}
	out["describe_v0"] = configs

	// CreateTopics v1: validate_only, and an error message.
	admin1, err := sarama.NewClusterAdmin(brokers(), configAt(sarama.V0_10_2_0))
	if err != nil {
		fail(out, fmt.Errorf("admin at 0.10.2: %w", err))
	}
	defer admin1.Close()
	out["create_v1_validate_only"] = errText(admin1.CreateTopic(topic+"-validated", detail, true))
	bad := &sarama.TopicDetail{NumPartitions: 0, ReplicationFactor: 1}
	out["create_v1_bad"] = errText(admin1.CreateTopic(topic+"-bad", bad, false))

	// Five records by a current client, then ListOffsets v0 (sarama below Kafka 0.10.1).
	pcfg := configAt(sarama.V2_8_0_0)
	pcfg.Producer.Return.Successes = true
	pcfg.Producer.Partitioner = sarama.NewManualPartitioner
	producer, err := sarama.NewSyncProducer(brokers(), pcfg)
	if err != nil {
		fail(out, fmt.Errorf("producer: %w", err))
	}
	for i := 0; i < 5; i++ {
		if _, _, err := producer.SendMessage(&sarama.ProducerMessage{
			Topic: topic, Partition: 1, Value: sarama.StringEncoder(fmt.Sprintf("r%d", i)),
		}); err != nil {
			fail(out, fmt.Errorf("produce: %w", err))
		}
	}
	producer.Close()
	client, err := sarama.NewClient(brokers(), configAt(sarama.V0_10_0_0))
	if err != nil {
		fail(out, fmt.Errorf("client at 0.10.0: %w", err))
	}
	defer client.Close()
	newest, err := client.GetOffset(topic, 1, sarama.OffsetNewest)
	out["list_v0_newest"] = newest
	out["list_v0_newest_error"] = errText(err)
	oldest, err := client.GetOffset(topic, 1, sarama.OffsetOldest)
	out["list_v0_oldest"] = oldest
	out["list_v0_oldest_error"] = errText(err)
	empty, err := client.GetOffset(topic, 0, sarama.OffsetNewest)
	out["list_v0_empty_partition"] = empty
	out["list_v0_empty_partition_error"] = errText(err)

	// OffsetCommit v0 / v1 and OffsetFetch v0 / v1 straight to the coordinator.
	coord, err := client.Coordinator(group)
	if err != nil {
		fail(out, fmt.Errorf("coordinator: %w", err))
	}
	commits := map[string]any{}
	for _, v := range []int16{0, 1} {
		req := &sarama.OffsetCommitRequest{Version: v, ConsumerGroup: group,
			ConsumerGroupGeneration: sarama.GroupGenerationUndefined}
		if v == 0 {
			req.ConsumerGroupGeneration = 0
		}
		// Partition 0 by v0, partition 1 by v1; v1 carries a commit timestamp.
		req.AddBlock(topic, int32(v), int64(2+v), time.Now().UnixMilli(), fmt.Sprintf("meta-v%d", v))
		resp, err := coord.CommitOffset(req)
		if err != nil {
			fail(out, fmt.Errorf("OffsetCommit v%d: %w", v, err))
		}
		commits[fmt.Sprintf("v%d", v)] = int16(resp.Errors[topic][int32(v)])
	}
	out["commit"] = commits
	fetches := map[string]any{}
	for _, v := range []int16{0, 1} {
		req := &sarama.OffsetFetchRequest{Version: v, ConsumerGroup: group}
		req.AddPartition(topic, 0)
		req.AddPartition(topic, 1)
		resp, err := coord.FetchOffset(req)
		if err != nil {
			fail(out, fmt.Errorf("OffsetFetch v%d: %w", v, err))
		}
		got := map[string]any{}
		for _, p := range []int32{0, 1} {
			b := resp.GetBlock(topic, p)
			if b == nil {
				got[fmt.Sprint(p)] = nil
				continue
			}
			got[fmt.Sprint(p)] = map[string]any{"offset": b.Offset, "metadata": b.Metadata, "error": int16(b.Err)}
		}
		fetches[fmt.Sprintf("v%d", v)] = got
	}
	out["fetch"] = fetches
	current, err := sarama.NewClusterAdmin(brokers(), configAt(sarama.V2_8_0_0))
	if err != nil {
		fail(out, fmt.Errorf("admin at 2.8: %w", err))
	}
	defer current.Close()
	resp, err := current.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1}})
	if err != nil {
		fail(out, fmt.Errorf("current OffsetFetch: %w", err))
	}
	now := map[string]any{}
	for _, p := range []int32{0, 1} {
		if b := resp.GetBlock(topic, p); b != nil {
			now[fmt.Sprint(p)] = b.Offset
		}
	}
	out["fetch_current"] = now

	// DeleteTopics v0, then the topic is gone for a current client.
	out["delete_v0"] = errText(admin.DeleteTopic(topic))
	deadline := time.Now().Add(10 * time.Second)
	for {
		topics, err := current.ListTopics()
		if err != nil {
			fail(out, fmt.Errorf("ListTopics: %w", err))
		}
		_, present := topics[topic]
		_, validated := topics[topic+"-validated"]
		out["validated_topic_exists"] = validated
		if !present || time.Now().After(deadline) {
			out["deleted"] = !present
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	emit(out)
}

func ptr(s string) *string { return &s }

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// sarama_scenarios list0 -brokers B -topic T [-user U -password P]
//
// One ListOffsets v0 (newest offset of partition 0) as sarama sends it below Kafka 0.10.1,
// over SASL/PLAIN when a user is given: prints the partition's error code and the offsets
// listed, so the test can check that a partition the user may not describe lists none.
func listV0() {
	out := map[string]any{}
	cfg := configAt(sarama.V0_10_0_0)
	if *userFlag != "" {
		cfg.Net.SASL.Enable = true
		cfg.Net.SASL.Mechanism = sarama.SASLTypePlaintext
		cfg.Net.SASL.User = *userFlag
		cfg.Net.SASL.Password = *passwordFlag
		cfg.Net.SASL.Handshake = true
		// What a client of Kafka 0.10 speaks: SaslHandshake v0, then the raw token, no ApiVersions.
		cfg.Net.SASL.Version = sarama.SASLHandshakeV0
		cfg.ApiVersionsRequest = false
	}
	b := sarama.NewBroker(brokers()[0])
	if err := b.Open(cfg); err != nil {
		fail(out, fmt.Errorf("connect: %w", err))
	}
	defer b.Close()
	req := &sarama.OffsetRequest{Version: 0}
	req.AddBlock(*topicFlag, 0, sarama.OffsetNewest, 10)
	resp, err := b.GetAvailableOffsets(req)
	if err != nil {
		fail(out, fmt.Errorf("ListOffsets v0: %w", err))
	}
	block := resp.GetBlock(*topicFlag, 0)
	if block == nil {
		fail(out, fmt.Errorf("ListOffsets v0: no answer for partition 0"))
	}
	out["code"] = int16(block.Err)
	out["offsets"] = block.Offsets
	emit(out)
}
