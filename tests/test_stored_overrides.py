"""Stored topic overrides that today's checks refuse are reported at start-up.

What broke: a topic override saved by an older weir (say segment.bytes=3000000000, accepted
before the bounds of Kafka's int settings were enforced) or edited into weir-metadata.json by
hand was skipped silently when the logs were opened: the topic ran on the broker setting and
nobody was told. Now start-up logs one warning per such override — topic, key, value, why,
and the value used instead — and the broker serves the topic.
"""

from __future__ import annotations

import json

from clients import Msg, rd_consume, rd_create_topic, rd_produce, rd_producer


def test_invalid_stored_override_is_reported_at_start(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 1, config={"retention.ms": "86400000"})
    broker.stop()
    path = broker.data_dir / "weir-metadata.json"
    meta = json.loads(path.read_text())
    meta["topics"][topic_name]["configs"]["segment.bytes"] = "3000000000"
    path.write_text(json.dumps(meta))
    broker.start()
    log = broker.log_tail()
    lines = [ln for ln in log.splitlines() if "stored topic config override is invalid" in ln]
    assert len(lines) == 1, log
    (line,) = lines
    for part in (topic_name, "segment.bytes", "3000000000", "between 4096 and 2147483647", "instead=1073741824"):
        assert part in line, line
    rd_produce(rd_producer(broker.bootstrap), topic_name, [Msg(key=None, value=b"ok")])
    assert [r.value for r in rd_consume(broker.bootstrap, topic_name, [0], 1)] == [b"ok"]
