"""`weir bench` end to end, on small settings: the scenarios run from a fresh clone, against
their own broker or any broker given with --bootstrap, and report what they measured in
the JSON and SVG they promise. (Figures are not checked against targets here: performance
lives in the bench, not in tests.)"""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET

import confluent_kafka
from confluent_kafka.admin import NewTopic

from clients import rd_admin, rd_consume
from conftest import WEIR_BIN

# Small raw-device samples: the yardsticks are measured, just briefly.
SMALL = ["--raw-secs", "0.2", "--raw-file", "8MiB"]


def bench(tmp_path, *args: str, timeout: float = 180) -> dict:
    out = tmp_path / "bench.json"
    svg = tmp_path / "bench.svg"
    proc = subprocess.run(
        [str(WEIR_BIN), "bench", *args, *SMALL, "--work-dir", str(tmp_path / "work"),
         "--json", str(out), "--svg", str(svg)],
        capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"weir bench {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    root = ET.parse(svg).getroot()  # a well-formed SVG document
    assert root.tag.endswith("svg"), root.tag
    assert not (tmp_path / "work").exists() or not any((tmp_path / "work").iterdir()), \
        "the scratch dir is removed after the run"
    return json.loads(out.read_text())


def figure(report: dict, name: str, unit: str) -> float:
    found = [f["value"] for f in report["figures"] if f["name"] == name and f["unit"] == unit]
    assert found, f"no figure {name!r} in {unit}: {[(f['name'], f['unit']) for f in report['figures']]}"
    return found[0]


def test_idle_polls_parks_every_fetcher_and_times_every_wake_up(tmp_path):
    report = bench(tmp_path, "idle-polls", "--fetchers", "50", "--idle-secs", "1", "--wake-rounds", "5")
    extra = report["extra"]
    assert report["config"]["partitions"] == 5, "ten fetchers per partition by default"
    assert extra["parked"] == 50
    # Each round's record wakes the ten fetches parked on that partition, all within 5 s.
    assert extra["wakeups"] == 50 and extra["wakeup_timeouts"] == 0, extra
    assert extra["produce_ack_p50_us"] > 0
    assert extra["broker_rss_parked_bytes"] > 0 and extra["broker_cpu_core_fraction"] is not None
    [lat] = [lt for lt in report["latency"] if lt["name"].startswith("wake-up latency")]
    assert lat, report["latency"]


def test_produce_against_a_running_broker_writes_real_records(broker, tmp_path):
    report = bench(tmp_path, "produce", "--bootstrap", broker.bootstrap, "--duration", "2",
                   "--partitions", "2", "--record-size", "1KiB")
    assert report["config"]["own_broker"] is False
    assert figure(report, "produce errors", "records") == 0
    rate = figure(report, "weir produce", "records/s")
    assert rate > 0
    assert figure(report, "weir / loopback TCP", "x") > 0
    # The records are on the broker, readable by librdkafka, 1 KiB values.
    topics = [t for t in rd_admin(broker.bootstrap).list_topics(timeout=10).topics if t.startswith("bench-produce-")]
    assert len(topics) == 1, topics
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench-check"})
    try:
        total = sum(consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topics[0], p), timeout=10)[1]
                    for p in range(2))
    finally:
        consumer.close()
    assert total >= rate * 2 * 0.5, f"{total} records on the broker for {rate:.0f}/s over 2 s"
    recs = rd_consume(broker.bootstrap, topics[0], [0], 10, extra_wait=0)
    assert all(len(r.value) == 1024 for r in recs), [len(r.value) for r in recs]


# --client rdkafka: the same scenarios driven through librdkafka (the rdkafka crate), the
# client most users run. These check that each one runs end to end and reports sane
# figures: records moved, none lost, no errors.

def test_rdkafka_produce_reports_throughput_and_ack_latency(tmp_path):
    report = bench(tmp_path, "produce", "--client", "rdkafka", "--duration", "2",
                   "--producers", "2", "--acks", "-1")
    assert report["config"]["client"] == "rdkafka"
    assert figure(report, "produce errors", "records") == 0
    assert figure(report, "weir produce", "MB/s") > 0
    assert figure(report, "weir produce", "records/s") > 0
    [lat] = [lt for lt in report["latency"] if lt["name"].startswith("produce latency")]
    pct = lat["percentiles"]
    assert lat["count"] > 0 and 0 < pct["p50"] <= pct["p99"], lat


def test_rdkafka_consume_disk_reads_the_whole_dataset(tmp_path):
    report = bench(tmp_path, "consume-disk", "--client", "rdkafka", "--dataset", "32MiB",
                   "--rd-set", "fetch.max.bytes=67108864",
                   "--rd-set", "max.partition.fetch.bytes=67108864")
    assert report["config"]["rd_set"] == ["fetch.max.bytes=67108864", "max.partition.fetch.bytes=67108864"]
    written = figure(report, "dataset written", "MB")
    assert written >= 32 * 1024 * 1024 / 1e6 * 0.99
    # librdkafka counts record values, the write phase acked values: the same bytes.
    assert figure(report, "dataset read", "MB") == written
    assert figure(report, "weir catch-up read", "MB/s") > 0


def test_rdkafka_consume_tail_times_every_record_end_to_end(tmp_path):
    report = bench(tmp_path, "consume-tail", "--client", "rdkafka", "--duration", "2",
                   "--rate", "500")
    produced = figure(report, "[librdkafka] produced", "records")
    assert produced > 0
    # Every acked record reached the tailing consumer (librdkafka may resend on a retry,
    # so at least as many).
    assert figure(report, "[librdkafka] consumed", "records") >= produced
    # Every record is timed but those sent before the consumer had its first one in hand
    # (librdkafka's start-up): at 500/s, about 500 x that first record's latency.
    first_ms = figure(report, "[librdkafka] first record's latency (consumer start-up, not timed)", "ms")
    assert 0 < first_ms < 5000, first_ms
    [lat] = [lt for lt in report["latency"] if lt["name"] == "end-to-end latency (librdkafka)"]
    untimed = 500 * first_ms / 1000 + 5
    assert lat["count"] >= produced - untimed and lat["percentiles"]["p50"] > 0, (lat, first_ms)


def test_rdkafka_refuses_idle_polls_and_bad_properties(tmp_path):
    for args, want in ((["idle-polls", "--client", "rdkafka"], "native client only"),
                       (["produce", "--client", "rdkafka", "--rd-set", "novalue"], "key=value")):
        proc = subprocess.run([str(WEIR_BIN), "bench", *args, "--work-dir", str(tmp_path / "w")],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode != 0 and want in proc.stderr, proc.stderr


# What benches/replication.py builds on: the yardsticks alone, and produce into a topic made
# beforehand at a capped rate, without yardsticks, reporting what was acknowledged.

def test_raw_scenario_measures_the_yardsticks_without_a_broker(tmp_path):
    report = bench(tmp_path, "raw")
    [sample] = report["raw_samples"]
    s = sample["sample"]
    assert s["disk_write_bps"] > 0 and s["disk_read_bps"] > 0 and s["tcp_bps"] > 0, s


def test_produce_into_a_given_topic_at_a_capped_rate(broker, tmp_path):
    topic = "made-before"
    admin = rd_admin(broker.bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=3)])[topic].result(30)
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [str(WEIR_BIN), "bench", "produce", "--bootstrap", broker.bootstrap, "--topic", topic,
         "--partitions", "3", "--client", "rdkafka", "--acks", "-1", "--rate", "500",
         "--duration", "2", "--raw-secs", "0", "--work-dir", str(tmp_path / "work"),
         "--json", str(out), "--svg", str(tmp_path / "bench.svg")],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-3000:]}"
    report = json.loads(out.read_text())
    assert report["raw_samples"] == [], "--raw-secs 0 measures no yardstick"
    assert figure(report, "produce errors", "records") == 0
    assert figure(report, "offered rate", "records/s") == 500
    acked = figure(report, "records acknowledged", "records")
    # The rate is a cap: 2 s at 500/s cannot send more than ~1,000 (1,500 allows for the
    # producer's start), and the records went to the given topic, not a new one.
    assert 0 < acked <= 1500, acked
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench-check"})
    try:
        total = sum(consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=10)[1]
                    for p in range(3))
    finally:
        consumer.close()
    assert total == acked, f"{total} records on the broker, {acked} acknowledged"
    assert not [t for t in admin.list_topics(timeout=10).topics if t.startswith("bench-produce-")]
