"""The Prometheus endpoint (metrics.listen): text that prometheus_client's parser accepts,
counters that move with real traffic, a gauge of parked fetches, off when asked, and a
malformed HTTP request that only closes its own connection."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from urllib.parse import urlparse

import pytest
from confluent_kafka import TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from clients import CLIENT_TIMEOUT_S, rd_consume, rd_consumer, rd_create_topic, rd_produce, rd_producer, sample_messages


def scrape(broker) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of one scrape, parsed by prometheus_client."""
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        assert fam.name.startswith("weir_"), fam.name
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(samples, name: str, **labels) -> float:
    return sum(v for (n, ls), v in samples.items()
               if n == name and all(dict(ls).get(k) == str(w) for k, w in labels.items()))


def test_counters_move_with_traffic(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 2)
    before = scrape(broker)
    msgs = sample_messages(200, 2)
    rd_produce(rd_producer(broker.bootstrap), topic_name, msgs)
    got = rd_consume(broker.bootstrap, topic_name, [0, 1], len(msgs))
    assert len(got) == len(msgs)
    after = scrape(broker)

    sent_bytes = sum(len(m.value or b"") + len(m.key or b"") for m in msgs)
    records_in = total(after, "weir_partition_records_in_total", topic=topic_name)
    assert records_in == len(msgs), records_in
    assert total(after, "weir_partition_bytes_in_total", topic=topic_name) >= sent_bytes
    assert total(after, "weir_partition_bytes_out_total", topic=topic_name) >= sent_bytes
    assert total(after, "weir_partition_log_end_offset", topic=topic_name) == len(msgs)
    assert total(after, "weir_partition_segments", topic=topic_name) >= 2  # one per partition
    assert total(after, "weir_requests_total", api="CreateTopics") >= 1
    for api in ("Produce", "Fetch", "Metadata"):
        assert total(after, "weir_requests_total", api=api) > total(before, "weir_requests_total", api=api), api
        assert total(after, "weir_request_duration_seconds_count", api=api) == total(
            after, "weir_requests_total", api=api), api
    assert total(after, "weir_connections_accepted_total") > total(before, "weir_connections_accepted_total")
    # Every core reports, labelled by its number.
    cores = {dict(ls)["core"] for (n, ls) in after if n == "weir_parked_fetches"}
    assert cores == {"0", "1"}, cores


def test_acks_all_counts_flushes(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 1)
    rd_produce(rd_producer(broker.bootstrap, acks="all"), topic_name, sample_messages(20, 1))
    s = scrape(broker)
    assert total(s, "weir_flush_duration_seconds_count", topic=topic_name) >= 1
    assert total(s, "weir_flush_duration_seconds_sum", topic=topic_name) > 0


def test_parked_fetch_gauge_and_wheel_counters(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 1)
    c = rd_consumer(broker.bootstrap, **{"fetch.wait.max.ms": 5000})
    c.assign([TopicPartition(topic_name, 0, 0)])
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            c.poll(0.1)

    t = threading.Thread(target=poll)
    t.start()
    try:
        deadline = time.monotonic() + 10
        parked = 0.0
        while time.monotonic() < deadline and parked < 1:
            parked = total(scrape(broker), "weir_parked_fetches")
            time.sleep(0.05)
        assert parked >= 1, "a consumer long-polling an empty partition shows as a parked fetch"
        rd_produce(rd_producer(broker.bootstrap), topic_name, sample_messages(1, 1))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and total(scrape(broker), "weir_wheel_woken_total") < 1:
            time.sleep(0.05)
        assert total(scrape(broker), "weir_wheel_woken_total") >= 1
    finally:
        stop.set()
        t.join()
        c.close()


def test_bad_http_and_other_paths(broker):
    u = urlparse(broker.metrics_url)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://{u.netloc}/nope", timeout=10)
    assert e.value.code == 404
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall(b"\x00\x01garbage that is not http\r\n\r\n")
        # Read to end of stream: the reply may arrive in several segments, and recv returns
        # b"" only when the broker has closed the connection (else the 10 s timeout raises).
        reply = b""
        while chunk := s.recv(1024):
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 400"), reply
        assert reply.endswith(b"\r\n\r\nbad request\n"), "one whole reply, then the connection is closed"
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 20000 + b"\r\n\r\n")
        assert s.recv(1024).startswith(b"HTTP/1.1 431")
    # The endpoint and the broker still work.
    assert ("weir_connections", (("core", "0"),)) in scrape(broker)
    broker.check_alive()


def test_metrics_off(broker_factory):
    b = broker_factory(settings={"metrics.listen": "off"})
    assert b.metrics_url is None
    assert b"metrics on" not in b.log_path.read_bytes()


def test_transaction_counters(broker, topic_name):
    """weir_transactions_{committed,aborted}_total count the transactions the coordinators
    ended (one commit, one abort here)."""
    from clients import Msg

    rd_create_topic(broker.bootstrap, topic_name, 1)
    before = scrape(broker)
    p = rd_producer(broker.bootstrap, **{"transactional.id": f"{topic_name}-tx", "enable.idempotence": True})
    p.init_transactions(10)
    for commit in (True, False):
        p.begin_transaction()
        rd_produce(p, topic_name, [Msg(None, b"v", partition=0)])
        (p.commit_transaction if commit else p.abort_transaction)(10)
    after = scrape(broker)
    for name in ("weir_transactions_committed_total", "weir_transactions_aborted_total"):
        assert total(after, name) - total(before, name) == 1, name
    assert total(after, "weir_transactions_timed_out_total") == 0
