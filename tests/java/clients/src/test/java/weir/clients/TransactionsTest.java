package weir.clients;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Transactional KafkaProducer and read_committed KafkaConsumer against weir. */
@Timeout(120)
class TransactionsTest {

    private static KafkaProducer<String, String> txProducer(String txId) {
        KafkaProducer<String, String> p = Weir.producer(Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txId,
                ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, 60000));
        p.initTransactions();
        return p;
    }

    private static KafkaConsumer<String, String> reader(String isolation) {
        return Weir.consumer(Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation));
    }

    private static List<String> values(List<ConsumerRecord<String, String>> rs) {
        return rs.stream().map(ConsumerRecord::value).toList();
    }

    @Test
    void commitAndAbortAsReadCommittedAndUncommittedSeeThem() throws Exception {
        String topic = Weir.createTopic("java-txn", 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaProducer<String, String> p = txProducer(Weir.name("tx"))) {
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 0, "k", "a1"));
            p.send(new ProducerRecord<>(topic, 0, "k", "a2"));
            p.commitTransaction();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 0, "k", "b1-aborted"));
            p.send(new ProducerRecord<>(topic, 0, "k", "b2-aborted"));
            p.flush();
            p.abortTransaction();
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 0, "k", "c1"));
            p.commitTransaction();
        }
        try (KafkaConsumer<String, String> c = reader("read_committed")) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            List<ConsumerRecord<String, String>> got = Weir.poll(c, 3, Duration.ofSeconds(30));
            got.addAll(Weir.pollFor(c, Duration.ofMillis(500)));
            assertEquals(List.of("a1", "a2", "c1"), values(got));
            // Each commit and abort wrote a control record (marker): 3 + 2 data + 3 markers.
            assertEquals(8L, c.endOffsets(List.of(tp)).get(tp));
            assertEquals(8L, c.position(tp));
        }
        try (KafkaConsumer<String, String> c = reader("read_uncommitted")) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            List<ConsumerRecord<String, String>> got = Weir.poll(c, 5, Duration.ofSeconds(30));
            assertEquals(List.of("a1", "a2", "b1-aborted", "b2-aborted", "c1"), values(got));
        }
    }

    @Test
    void readCommittedStopsAtTheLastStableOffset() throws Exception {
        String topic = Weir.createTopic("java-lso", 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        try (KafkaProducer<String, String> plain = Weir.producer(Map.of());
             KafkaProducer<String, String> p = txProducer(Weir.name("tx-lso"))) {
            plain.send(new ProducerRecord<>(topic, 0, null, "before")).get(30, TimeUnit.SECONDS);
            p.beginTransaction();
            p.send(new ProducerRecord<>(topic, 0, null, "open-1")).get(30, TimeUnit.SECONDS);
            plain.send(new ProducerRecord<>(topic, 0, null, "after-open")).get(30, TimeUnit.SECONDS);

            try (KafkaConsumer<String, String> committed = reader("read_committed");
                 KafkaConsumer<String, String> uncommitted = reader("read_uncommitted")) {
                committed.assign(List.of(tp));
                uncommitted.assign(List.of(tp));
                // endOffsets is the LSO for read_committed (the open transaction's first offset),
                // the high watermark otherwise.
                assertEquals(1L, committed.endOffsets(List.of(tp)).get(tp));
                assertEquals(3L, uncommitted.endOffsets(List.of(tp)).get(tp));
                committed.seekToBeginning(List.of(tp));
                uncommitted.seekToBeginning(List.of(tp));
                List<ConsumerRecord<String, String>> got = Weir.pollFor(committed, Duration.ofSeconds(2));
                assertEquals(List.of("before"), values(got), "nothing past the LSO");
                assertEquals(List.of("before", "open-1", "after-open"),
                        values(Weir.poll(uncommitted, 3, Duration.ofSeconds(30))));

                p.commitTransaction();
                List<ConsumerRecord<String, String>> rest = Weir.poll(committed, 2, Duration.ofSeconds(30));
                assertEquals(List.of("open-1", "after-open"), values(rest));
                assertEquals(4L, committed.endOffsets(List.of(tp)).get(tp));
            }
        }
    }

    @Test
    void sendOffsetsToTransactionCommitsTheGroupOffsetsWithTheOutput() throws Exception {
        String in = Weir.createTopic("java-eos-in", 1);
        String out = Weir.createTopic("java-eos-out", 1);
        String group = Weir.name("java-eos-group");
        TopicPartition inTp = new TopicPartition(in, 0);
        try (KafkaProducer<String, String> plain = Weir.producer(Map.of())) {
            for (int i = 0; i < 10; i++) {
                plain.send(new ProducerRecord<>(in, 0, "k" + i, "v" + i));
            }
            plain.flush();
        }
        try (KafkaProducer<String, String> p = txProducer(Weir.name("tx-eos"));
             KafkaConsumer<String, String> c = Weir.groupConsumer(group,
                     Map.of(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"))) {
            c.subscribe(List.of(in));
            List<ConsumerRecord<String, String>> got = Weir.poll(c, 10, Duration.ofSeconds(60));
            // An aborted transaction: neither output nor offsets.
            p.beginTransaction();
            for (ConsumerRecord<String, String> r : got.subList(0, 5)) {
                p.send(new ProducerRecord<>(out, 0, r.key(), "aborted-" + r.value()));
            }
            p.sendOffsetsToTransaction(Map.of(inTp, new OffsetAndMetadata(5)), c.groupMetadata());
            p.abortTransaction();
            assertNull(c.committed(java.util.Set.of(inTp)).get(inTp), "aborted offsets are not committed");

            p.beginTransaction();
            for (ConsumerRecord<String, String> r : got) {
                p.send(new ProducerRecord<>(out, 0, r.key(), r.value().toUpperCase()));
            }
            p.sendOffsetsToTransaction(Map.of(inTp, new OffsetAndMetadata(10, "eos")), c.groupMetadata());
            p.commitTransaction();
            OffsetAndMetadata om = c.committed(java.util.Set.of(inTp)).get(inTp);
            assertEquals(10L, om.offset());
            assertEquals("eos", om.metadata());
        }
        try (KafkaConsumer<String, String> c = reader("read_committed")) {
            TopicPartition outTp = new TopicPartition(out, 0);
            c.assign(List.of(outTp));
            c.seekToBeginning(List.of(outTp));
            List<ConsumerRecord<String, String>> got = Weir.poll(c, 10, Duration.ofSeconds(30));
            got.addAll(Weir.pollFor(c, Duration.ofMillis(500)));
            List<String> want = new ArrayList<>();
            for (int i = 0; i < 10; i++) {
                want.add("V" + i);
            }
            assertEquals(want, values(got));
        }
    }

    @Test
    void aSecondInstanceWithTheSameTransactionalIdFencesTheFirst() throws Exception {
        String topic = Weir.createTopic("java-fence", 1);
        TopicPartition tp = new TopicPartition(topic, 0);
        String txId = Weir.name("tx-fence");
        KafkaProducer<String, String> first = txProducer(txId);
        try {
            first.beginTransaction();
            first.send(new ProducerRecord<>(topic, 0, null, "zombie-1")).get(30, TimeUnit.SECONDS);
            try (KafkaProducer<String, String> second = txProducer(txId)) {
                // The zombie's commit (EndTxn with its old epoch) is refused: fenced, a fatal
                // error for that instance. (A Produce with the old epoch would be refused too,
                // as INVALID_PRODUCER_EPOCH, abortable, as Kafka answers since KIP-588.)
                assertThrows(ProducerFencedException.class, first::commitTransaction);
                assertThrows(Exception.class,
                        () -> first.send(new ProducerRecord<>(topic, 0, null, "zombie-2")).get(30, TimeUnit.SECONDS));
                second.beginTransaction();
                second.send(new ProducerRecord<>(topic, 0, null, "survivor"));
                second.commitTransaction();
            }
        } finally {
            first.close(Duration.ofSeconds(5));
        }
        try (KafkaConsumer<String, String> c = reader("read_committed")) {
            c.assign(List.of(tp));
            c.seekToBeginning(List.of(tp));
            List<ConsumerRecord<String, String>> got = Weir.poll(c, 1, Duration.ofSeconds(30));
            got.addAll(Weir.pollFor(c, Duration.ofMillis(500)));
            assertEquals(List.of("survivor"), values(got), "the fenced instance's open transaction was aborted");
        }
    }
}
