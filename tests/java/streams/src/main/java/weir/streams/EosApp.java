package weir.streams;

import java.time.Duration;
import java.util.Arrays;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.WindowStore;

/**
 * One Kafka Streams application (processing.guarantee=exactly_once_v2) with two sub-topologies,
 * run by tests/test_kafka_streams.py against weir:
 *
 * <ul>
 *   <li>word count: lines from {@code <prefix>-lines} are split into words, re-keyed by word
 *       (groupBy: repartition topic), counted in the state store "word-counts" (compacted
 *       changelog) and every update is written to {@code <prefix>-word-counts} as
 *       key=word, value=the count in decimal;</li>
 *   <li>windowed aggregation: records of {@code <prefix>-readings} (key=sensor, value
 *       "category:amount", event time = the record's timestamp) are re-keyed by category
 *       (repartition topic) and aggregated per 10 s tumbling window in the window store
 *       "window-sums" (compact,delete changelog); every update goes to {@code <prefix>-window-sums}
 *       as key "category@windowStartMs", value "count:sum".</li>
 * </ul>
 *
 * Record caches are off (statestore.cache.max.bytes=0), so every update of every key is sent
 * downstream: the committed output per key must then be the sequence 1, 2, ..., n exactly.
 *
 * <p>Arguments: bootstrap applicationId prefix stateDir. Prints "STATE &lt;new&gt;" on every
 * state change; SIGTERM closes it cleanly (then "CLOSED").
 */
public final class EosApp {
    public static void main(String[] args) throws Exception {
        if (args.length != 4) {
            System.err.println("usage: EosApp bootstrap applicationId topicPrefix stateDir");
            System.exit(2);
        }
        String bootstrap = args[0];
        String appId = args[1];
        String prefix = args[2];
        String stateDir = args[3];

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        // exactly_once_v2; WEIR_STREAMS_GUARANTEE=at_least_once is for checking by hand that the
        // tests see the duplicates a non-transactional pipeline leaves after a kill.
        String guarantee = System.getenv("WEIR_STREAMS_GUARANTEE");
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG,
                guarantee == null || guarantee.isEmpty() ? StreamsConfig.EXACTLY_ONCE_V2 : guarantee);
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, intEnv("WEIR_STREAMS_COMMIT_MS", 200));
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        // Purge (DeleteRecords) the repartition topics up to the committed offsets every second.
        props.put(StreamsConfig.REPARTITION_PURGE_INTERVAL_MS_CONFIG, 1000);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, intEnv("WEIR_STREAMS_THREADS", 1));
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        // A killed instance's member must leave the group quickly for its successor.
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), 6000);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), 1000);
        props.put(StreamsConfig.producerPrefix(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG), 120000);
        props.put(StreamsConfig.producerPrefix(ProducerConfig.MAX_BLOCK_MS_CONFIG), 120000);
        props.put(StreamsConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, 1000);
        props.put(StreamsConfig.RETRY_BACKOFF_MS_CONFIG, 200);

        StreamsBuilder builder = new StreamsBuilder();

        KStream<String, String> lines = builder.stream(prefix + "-lines", Consumed.with(Serdes.String(), Serdes.String()));
        lines.flatMapValues(line -> Arrays.asList(line.trim().split("\\s+")))
                .filter((k, w) -> !w.isEmpty())
                .groupBy((k, w) -> w, Grouped.with("by-word", Serdes.String(), Serdes.String()))
                .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("word-counts")
                        .withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                .toStream()
                .mapValues(n -> Long.toString(n))
                .to(prefix + "-word-counts", Produced.with(Serdes.String(), Serdes.String()));

        KStream<String, String> readings = builder.stream(prefix + "-readings", Consumed.with(Serdes.String(), Serdes.String()));
        readings.groupBy((sensor, v) -> v.substring(0, v.indexOf(':')),
                        Grouped.with("by-category", Serdes.String(), Serdes.String()))
                // A day of grace: records re-keyed from several input partitions arrive out of
                // event-time order, and none may be dropped as late.
                .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), Duration.ofDays(1)))
                .aggregate(() -> "0:0", (category, v, agg) -> {
                            long amount = Long.parseLong(v.substring(v.indexOf(':') + 1));
                            String[] a = agg.split(":");
                            return (Long.parseLong(a[0]) + 1) + ":" + (Long.parseLong(a[1]) + amount);
                        },
                        Materialized.<String, String, WindowStore<Bytes, byte[]>>as("window-sums")
                                .withKeySerde(Serdes.String()).withValueSerde(Serdes.String()))
                .toStream()
                .map((wk, v) -> KeyValue.pair(wk.key() + "@" + wk.window().start(), v))
                .to(prefix + "-window-sums", Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch done = new CountDownLatch(1);
        streams.setStateListener((newState, oldState) -> {
            System.out.println("STATE " + newState);
            System.out.flush();
            if (newState == KafkaStreams.State.ERROR || newState == KafkaStreams.State.NOT_RUNNING) {
                done.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.out.println("UNCAUGHT " + e);
            System.out.flush();
            e.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            System.out.println("CLOSED");
            System.out.flush();
            done.countDown();
        }));
        streams.start();
        done.await();
    }

    private static int intEnv(String name, int dflt) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? dflt : Integer.parseInt(v);
    }
}
