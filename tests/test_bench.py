"""`weir bench` end to end, on small settings: the scenarios run from a fresh clone, against
their own broker or any broker given with --bootstrap, and report what they measured in
the JSON and SVG they promise. (Figures are not checked against targets here: performance
lives in the bench, not in tests.)"""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET

import confluent_kafka

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
