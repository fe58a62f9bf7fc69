"""KIP-951 leader hints (docs/protocol.md, Produce): a Produce v10+ sent to a broker that does
not lead the partition is answered NOT_LEADER_OR_FOLLOWER with the leader this broker knows
(`CurrentLeader`: node id and leader epoch, a tagged field of the partition's answer) and that
node's endpoint (`NodeEndpoints`, a tagged field of the response), so a client (librdkafka
2.4+, the Java client 3.7+) moves to the leader without asking for metadata first.

Three `weir serve` processes; a topic of one partition at replication factor 3. A Produce v10
to each follower broker, decoded here byte by byte: the hint names the node and epoch that
Metadata names, with that node's host and port; the same request to the leader is written.
A Fetch v16 to a follower is answered from its log (KIP-392); to a broker with no replica of
the partition (replication factor 2) it gets the hint; one to the leader with an older leader
epoch is answered FENCED_LEADER_EPOCH with the current one. After the leader's broker is stopped (controlled shutdown: a follower takes over), the
remaining follower's answer names the new leader at its new epoch, and the node it names
takes the next Produce.
"""

from __future__ import annotations

import struct
import uuid

import kafka_wire as kw
from record_batches import Batch
from test_cluster_metadata import NODE_ID_STRIDE, applied, cluster, create, metadata_v1  # noqa: F401
from test_cluster_replication import leader_of

TOPIC = "hinted"
TOPIC_RF2 = "hinted-rf2"
NOT_LEADER_OR_FOLLOWER = 6
FENCED_LEADER_EPOCH = 74


def uvarint(v: int) -> bytes:
    out = b""
    while v >= 0x80:
        out += bytes([(v & 0x7F) | 0x80])
        v >>= 7
    return out + bytes([v])


def compact_string(s: str | None) -> bytes:
    if s is None:
        return uvarint(0)
    b = s.encode()
    return uvarint(len(b) + 1) + b


class Reader:
    """A cursor over a flexible-version response body."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: str):
        v = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7

    def cstring(self) -> str | None:
        n = self.uvarint()
        if n == 0:
            return None
        s = self.data[self.pos:self.pos + n - 1].decode()
        self.pos += n - 1
        return s

    def cbytes(self) -> bytes | None:
        n = self.uvarint()
        if n == 0:
            return None
        b = self.data[self.pos:self.pos + n - 1]
        self.pos += n - 1
        return b

    def tags(self, on_tag=None) -> None:
        for _ in range(self.uvarint()):
            tag, size = self.uvarint(), self.uvarint()
            end = self.pos + size
            if on_tag is not None:
                on_tag(tag)
            self.pos = end

    def current_leader(self, into: dict) -> None:
        """A partition's tags, CurrentLeader (`tag`: 0 in Produce, 1 in Fetch) into `into`."""
        def on(tag):
            if tag == into["leader_tag"]:
                into["current_leader"] = self.take(">ii")
        self.tags(on)

    def node_endpoints(self, into: dict) -> None:
        """A response's tags: NodeEndpoints (tag 0) into `into["endpoints"]`."""
        def on(tag):
            if tag == 0:
                for _ in range(self.uvarint() - 1):
                    (node,) = self.take(">i")
                    host = self.cstring()
                    (port,) = self.take(">i")
                    self.cstring()  # rack
                    self.tags()
                    into["endpoints"][node] = (host, port)
        self.tags(on)


def send(bootstrap: str, api_key: int, version: int, body: bytes) -> Reader:
    """One flexible-version request (header v2) and its response, past the header's tags."""
    header = struct.pack(">hhi", api_key, version, 7) + kw.string("weir-test") + uvarint(0)
    s = kw.connect(bootstrap)
    try:
        s.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        corr, resp = kw.read_response(s)
    finally:
        s.close()
    assert corr == 7
    r = Reader(resp)
    r.tags()
    return r


def produce_v10(bootstrap: str, topic: str, records: bytes, partition: int = 0) -> dict:
    """One Produce v10 of `records` to one partition, acks=-1: the partition's answer and the
    response's node endpoints, decoded."""
    body = compact_string(None) + struct.pack(">hi", -1, 10_000)
    body += uvarint(2) + compact_string(topic)
    body += uvarint(2) + struct.pack(">i", partition) + uvarint(len(records) + 1) + records + uvarint(0)
    body += uvarint(0) + uvarint(0)  # the topic's and the request's tagged fields
    r = send(bootstrap, kw.API_PRODUCE, 10, body)
    answer: dict = {"current_leader": None, "endpoints": {}, "leader_tag": 0}
    assert r.uvarint() - 1 == 1  # topics
    r.cstring()
    assert r.uvarint() - 1 == 1  # partitions
    (answer["index"], answer["error"], answer["base_offset"], _, _) = r.take(">ihqqq")
    for _ in range(r.uvarint() - 1):  # record errors
        r.take(">i")
        r.cstring()
        r.tags()
    answer["message"] = r.cstring()
    r.current_leader(answer)
    r.tags()  # the topic's
    r.take(">i")  # throttle time
    r.node_endpoints(answer)
    assert r.pos == len(r.data), f"{len(r.data) - r.pos} bytes left over"
    return answer


def fetch_v16(bootstrap: str, topic_id: uuid.UUID, partition: int = 0, leader_epoch: int = -1) -> dict:
    """One Fetch v16 (topics by id) of one partition from offset 0, not waiting: the
    partition's answer and the response's node endpoints, decoded."""
    body = struct.pack(">iiibii", 0, 1, 1 << 20, 0, 0, -1)  # max wait, min/max bytes, isolation, session
    body += uvarint(2) + topic_id.bytes
    body += uvarint(2) + struct.pack(">iiqiqi", partition, leader_epoch, 0, -1, -1, 1 << 20) + uvarint(0)
    body += uvarint(0)  # the topic's tags
    body += uvarint(1) + compact_string("") + uvarint(0)  # no forgotten topics, rack, tags
    r = send(bootstrap, 1, 16, body)
    answer: dict = {"current_leader": None, "endpoints": {}, "leader_tag": 1}
    r.take(">ihi")  # throttle time, error, session id
    assert r.uvarint() - 1 == 1  # topics
    r.take(">16s")
    assert r.uvarint() - 1 == 1  # partitions
    (answer["index"], answer["error"], _, _, _) = r.take(">ihqqq")
    for _ in range(max(r.uvarint() - 1, 0)):  # aborted transactions
        r.take(">qq")
        r.tags()
    r.take(">i")  # preferred read replica
    answer["records"] = r.cbytes()
    r.current_leader(answer)
    r.tags()  # the topic's
    r.node_endpoints(answer)
    assert r.pos == len(r.data), f"{len(r.data) - r.pos} bytes left over"
    return answer


def test_produce_to_a_follower_names_the_leader_and_its_endpoint(cluster):
    create(cluster[0].bootstrap, TOPIC, 1, replication_factor=3)
    leader, epoch = leader_of(cluster, TOPIC, 0)
    broker_of_leader = leader // NODE_ID_STRIDE
    records = Batch.of(3).encode()

    for i, b in enumerate(cluster):
        got = produce_v10(b.bootstrap, TOPIC, records)
        if i + 1 == broker_of_leader:
            assert got["error"] == 0 and got["current_leader"] is None and not got["endpoints"], got
            continue
        assert got["error"] == NOT_LEADER_OR_FOLLOWER, got
        assert got["current_leader"] == (leader, epoch), (got, leader, epoch)
        # The endpoint is the one this broker's Metadata gives for that node.
        nodes, _ = metadata_v1(b.bootstrap, [TOPIC])
        assert set(got["endpoints"]) == {leader}, got
        host, port = got["endpoints"][leader]
        assert (host, port) == ("127.0.0.1", nodes[leader]), (got, nodes)
        # A consumer's Fetch v16 is answered there from the follower's own log (KIP-392:
        # followers serve consumers' Fetch v11+), with no hint.
        topic_id = uuid.UUID(applied(b)["topics"][TOPIC]["id"])
        got = fetch_v16(b.bootstrap, topic_id)
        assert got["error"] == 0 and got["current_leader"] is None and not got["endpoints"], got
    # On a broker holding no replica of a partition, a consumer's Fetch v16 gets the hint.
    create(cluster[0].bootstrap, TOPIC_RF2, 1, replication_factor=2)
    leader2, epoch2 = leader_of(cluster, TOPIC_RF2, 0)
    _, topics = metadata_v1(cluster[0].bootstrap, [TOPIC_RF2], full=True)
    replicas = {r // NODE_ID_STRIDE for r in topics[TOPIC_RF2][1][0][1]}
    outsider = next(b for i, b in enumerate(cluster) if i + 1 not in replicas)
    nodes, _ = metadata_v1(outsider.bootstrap, [TOPIC_RF2])
    got = fetch_v16(outsider.bootstrap, uuid.UUID(applied(outsider)["topics"][TOPIC_RF2]["id"]))
    assert got["error"] == NOT_LEADER_OR_FOLLOWER and got["current_leader"] == (leader2, epoch2), got
    assert got["endpoints"] == {leader2: ("127.0.0.1", nodes[leader2])}, got

    # On the leader itself: a fetch with an older epoch than the leader's is fenced, and told
    # the epoch; one with the current epoch reads the records.
    topic_id = uuid.UUID(applied(cluster[0])["topics"][TOPIC]["id"])
    at_leader = cluster[broker_of_leader - 1].bootstrap
    assert epoch >= 1
    got = fetch_v16(at_leader, topic_id, leader_epoch=epoch - 1)
    assert got["error"] == FENCED_LEADER_EPOCH and got["current_leader"] == (leader, epoch), got
    got = fetch_v16(at_leader, topic_id, leader_epoch=epoch)
    assert got["error"] == 0 and got["current_leader"] is None and got["records"], got

    # The leader's broker stops (handing the partition to a follower); the answer of a
    # broker that does not lead names the new leader, at a newer epoch, and it takes the
    # records the client sends there next.
    cluster[broker_of_leader - 1].stop()
    survivors = [b for b in cluster if b is not cluster[broker_of_leader - 1]]
    new_leader, new_epoch = leader_of(survivors, TOPIC, 0, epoch + 1)
    follower = next(b for b in survivors if (cluster.index(b) + 1) != new_leader // NODE_ID_STRIDE)
    got = produce_v10(follower.bootstrap, TOPIC, records)
    assert got["error"] == NOT_LEADER_OR_FOLLOWER and got["current_leader"] == (new_leader, new_epoch), got
    host, port = got["endpoints"][new_leader]
    written = produce_v10(f"{host}:{port}", TOPIC, records)
    assert written["error"] == 0 and written["base_offset"] == 3, written
