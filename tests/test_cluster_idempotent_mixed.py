"""An idempotent producer beside other producers' load on the same replicated partition
(docs/replication.md §3.8; issue 19).

What broke before: the leader checked an idempotent batch against the producers' state only
at a moment when nothing at all was queued or unwritten on the partition. Beside other
producers keeping the partition busy such a moment is rare or never comes, so an idempotent
request waited for it: Java's producer is idempotent by default, so a topic written by it and
by any non-idempotent client saw its latency go from milliseconds to seconds. Against the
build before the fix (release build) the idempotent median acknowledgement was 1,350 ms
beside the plain probe's 129 ms, one record waiting 17.9 s (in another run one timed out in
librdkafka after 20 s). The check now waits only for the idempotent batches it depends on:
137 ms beside 131 ms.

Eight plain producers (acks=all, five requests in flight, 64 KiB records, a bounded local
queue) keep a partition of replication factor 3 busy; retention keeps its disk use small.
Meanwhile one idempotent and one plain "probe" producer each send records one at a time, waiting for each acknowledgement, taking
turns. The idempotent median must stay within 3 times the plain probe's (the same load,
measured in the same run: not a latency target, which is the benchmarks' job), and each
idempotent record gets its own offset, in the order sent.
"""

from __future__ import annotations

import statistics
import threading
import time

import pytest

from clients import rd_producer
from test_cluster_metadata import NODE_ID_STRIDE, cluster, create  # noqa: F401
from test_cluster_replication import leader_of

TOPIC = "mixed"
IDEMPOTENT_RECORDS = 20
PLAIN_PRODUCERS = 8
PLAIN_SIZE = 64 << 10


@pytest.mark.timeout(180)
@pytest.mark.parametrize("cluster", [{"log.retention.check.interval.ms": "500"}], indirect=True)
def test_an_idempotent_producer_is_not_held_up_by_another_producers_load(cluster):
    everyone = ",".join(b.bootstrap for b in cluster)
    # The load writes over a gigabyte a replica: retention keeps each replica's disk use small.
    create(cluster[0].bootstrap, TOPIC, 1, replication_factor=3,
           config={"retention.bytes": str(64 << 20), "segment.bytes": str(16 << 20)})
    leader_of(cluster, TOPIC, 0)

    stop = threading.Event()
    plain_sent = [0]
    plain_errors: list = []
    lock = threading.Lock()

    def plain_load():
        value = b"p" * PLAIN_SIZE
        p = rd_producer(everyone, acks="all", **{"linger.ms": 0, "max.in.flight.requests.per.connection": 5,
                                                 "queue.buffering.max.messages": 100})

        def on_delivery(err, _msg):
            if err is not None:
                plain_errors.append(err)

        while not stop.is_set():
            try:
                p.produce(TOPIC, value=value, partition=0, on_delivery=on_delivery)
                with lock:
                    plain_sent[0] += 1
            except BufferError:
                pass
            p.poll(0.001)
        p.flush(30)

    loaders = [threading.Thread(target=plain_load, daemon=True) for _ in range(PLAIN_PRODUCERS)]
    for t in loaders:
        t.start()
    try:
        time.sleep(2.0)  # the plain load is steady
        idem = rd_producer(everyone, acks="all", **{"linger.ms": 0, "enable.idempotence": True})
        probe = rd_producer(everyone, acks="all", **{"linger.ms": 0})
        for p in (idem, probe):  # connected, and the idempotent one has its producer id
            p.produce(TOPIC, key=b"warm-up", value=b"", partition=0)
            assert p.flush(30) == 0
        latencies: dict[str, list[float]] = {"idempotent": [], "plain": []}
        idem_offsets = []
        for i in range(IDEMPOTENT_RECORDS):
            for kind, p in (("idempotent", idem), ("plain", probe)):
                acked: list = []
                started = time.monotonic()
                p.produce(TOPIC, key=kind.encode(), value=b"i%d" % i, partition=0,
                          on_delivery=lambda err, msg: acked.append((err, msg)))
                assert p.flush(30) == 0, f"{kind} record {i} not acknowledged"
                latencies[kind].append(time.monotonic() - started)
                [(err, msg)] = acked
                assert err is None, err
                if kind == "idempotent":
                    idem_offsets.append(msg.offset())
        plain_before_stop = plain_sent[0]
    finally:
        stop.set()
        for t in loaders:
            t.join(60)
    assert not plain_errors, plain_errors[:3]
    idem_median = statistics.median(latencies["idempotent"])
    plain_median = statistics.median(latencies["plain"])
    print(f"acks beside {plain_before_stop} plain records: idempotent median {idem_median * 1e3:.1f} ms "
          f"(max {max(latencies['idempotent']) * 1e3:.1f}), plain median {plain_median * 1e3:.1f} ms "
          f"(max {max(latencies['plain']) * 1e3:.1f})")
    assert plain_before_stop > 1000, "the plain load did not run"
    assert idem_median < 3 * plain_median + 0.01, "idempotent records wait for the partition to be idle"

    # Each idempotent record got its own offset, in the order sent (retention has deleted most
    # of what was written, so they are not read back here: test_idempotence.py does that).
    assert idem_offsets == sorted(set(idem_offsets)), idem_offsets
