"""kcat, the command-line client most people try first (it is the README's example)."""

from __future__ import annotations

import json
import re

import kafka_wire
from clients import Msg, kcat, rd_create_topic, rd_produce, rd_producer


def ok(proc, what):
    assert proc.returncode == 0, f"{what}: exit {proc.returncode}\nstdout: {proc.stdout!r}\nstderr: {proc.stderr!r}"
    return proc.stdout.decode()


def test_readme_example_produce_then_consume(broker, topic_name):
    """`kcat -P` a few lines to a topic that does not exist yet (auto-created), `kcat -C -e`
    reads them back and exits at the end of the partition."""
    lines = ["hello", "world", "", "a line with spaces", "ünïcödé"]
    ok(kcat(broker.bootstrap, "-P", "-t", topic_name, input=("\n".join(lines) + "\n").encode()), "kcat -P")
    out = ok(kcat(broker.bootstrap, "-C", "-t", topic_name, "-o", "beginning", "-e", "-q"), "kcat -C -e")
    # kcat skips empty input lines when producing.
    assert out.split("\n")[:-1] == [line for line in lines if line]

    # Consuming again from the end gives nothing and still exits.
    out = ok(kcat(broker.bootstrap, "-C", "-t", topic_name, "-o", "end", "-e", "-q"), "kcat -C -o end -e")
    assert out == ""


def test_keys_headers_partitions_and_format(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 2)
    ok(kcat(broker.bootstrap, "-P", "-t", topic_name, "-p", "1", "-K", ":", "-H", "source=kcat", "-H", "n=1",
            input=b"k1:v1\nk2:v2\nk1:v3\n"), "kcat -P -K: -H")
    out = ok(kcat(broker.bootstrap, "-C", "-t", topic_name, "-p", "1", "-o", "beginning", "-e", "-q",
                  "-f", "%p|%o|%k|%s|%h\n"), "kcat -C -f")
    assert out.splitlines() == ["1|0|k1|v1|source=kcat,n=1", "1|1|k2|v2|source=kcat,n=1", "1|2|k1|v3|source=kcat,n=1"]
    out = ok(kcat(broker.bootstrap, "-C", "-t", topic_name, "-p", "0", "-o", "beginning", "-e", "-q"), "kcat -C -p 0")
    assert out == ""


def test_compressed_produce(broker, topic_name):
    """`kcat -P -z CODEC` really compresses. kcat here runs on Debian's librdkafka 2.0, which
    decides whether the broker takes compressed batches by looking for Produce v0 in
    ApiVersions: while weir advertised Produce from v3 (as the codec does), kcat logged
    "Broker does not support compression type gzip: not compressing batch" and sent gzip,
    snappy and lz4 uncompressed. weir now advertises Produce v0 as Kafka 4.0 does
    (KAFKA-18659) and refuses v0-2 requests with UNSUPPORTED_VERSION."""
    lines = [f"line {i} " + "x" * (i % 50) for i in range(500)]
    payload = sum(len(ln) for ln in lines)
    for n, (codec, attr) in enumerate((("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4))):
        topic = f"{topic_name}-{codec}"
        rd_create_topic(broker.bootstrap, topic, 1)
        ok(kcat(broker.bootstrap, "-P", "-t", topic, "-z", codec, input=("\n".join(lines) + "\n").encode()),
           f"kcat -P -z {codec}")
        out = ok(kcat(broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q"), "kcat -C -e")
        assert out.split("\n")[:-1] == lines
        sock = kafka_wire.connect(broker.bootstrap)
        try:
            sock.sendall(kafka_wire.fetch(n + 1, topic, 0, 0, max_bytes=8 << 20))
            _, body = kafka_wire.read_response(sock)
        finally:
            sock.close()
        (part,) = kafka_wire.parse_fetch_v4(body)
        codecs = kafka_wire.batch_codecs(part["records"])
        assert codecs and set(codecs) == {attr}, f"kcat -z {codec}: stored batch codecs {codecs}"
        assert part["records_size"] < payload / 2, f"kcat -z {codec}: {part['records_size']} bytes stored"


def test_metadata_listing(broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 3)
    out = ok(kcat(broker.bootstrap, "-L"), "kcat -L")
    assert f"127.0.0.1:{broker.port}/bootstrap" in out, out
    # One broker per core (listeners.per.core, the default), each on its own port.
    assert re.search(r'broker 0 at 127\.0\.0\.1:\d+', out), out
    assert f'topic "{topic_name}" with 3 partitions:' in out, out

    md = json.loads(ok(kcat(broker.bootstrap, "-L", "-J", "-t", topic_name), "kcat -L -J"))
    ids = {b["id"] for b in md["brokers"]}
    assert all(b["name"].startswith("127.0.0.1:") for b in md["brokers"]), md["brokers"]
    [t] = md["topics"]
    assert t["topic"] == topic_name and "error" not in t
    assert sorted(p["partition"] for p in t["partitions"]) == [0, 1, 2]
    assert all(p["leader"] in ids for p in t["partitions"])


def test_query_offsets_by_time(broker, topic_name):
    """`kcat -Q -t topic:partition:timestamp` (ListOffsets by time)."""
    rd_create_topic(broker.bootstrap, topic_name, 1)
    t0 = 1_700_000_000_000
    # kcat -P cannot set timestamps; librdkafka can.
    rd_produce(rd_producer(broker.bootstrap), topic_name, [Msg(None, b"v", (), t0 + i * 1000, 0) for i in range(5)])
    out = ok(kcat(broker.bootstrap, "-Q", "-t", f"{topic_name}:0:{t0 + 2500}"), "kcat -Q")
    assert re.search(rf"{re.escape(topic_name)} \[0\] offset 3\b", out), out
