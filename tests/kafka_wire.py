"""A few hand-encoded Kafka requests for tests that talk to weir over a raw socket.

Only what the tests need: framing (int32 size prefix, request header v1), ApiVersions v0,
Metadata v1, Fetch v4, ListOffsets v4, OffsetForLeaderEpoch v2, ListGroups v0 and response
framing. Encodings follow the Kafka protocol guide.
"""

from __future__ import annotations

import socket
import struct
import time

API_PRODUCE = 0
API_FETCH = 1
API_LIST_OFFSETS = 2
API_METADATA = 3
API_LIST_GROUPS = 16
API_API_VERSIONS = 18
API_OFFSET_FOR_LEADER_EPOCH = 23

ERROR_NONE = 0
ERROR_NOT_LEADER_OR_FOLLOWER = 6
ERROR_UNSUPPORTED_VERSION = 35
ERROR_FENCED_LEADER_EPOCH = 74
ERROR_UNKNOWN_LEADER_EPOCH = 75


class Closed(Exception):
    """The broker closed the connection."""


def string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def frame(api_key: int, api_version: int, correlation_id: int, body: bytes = b"", client_id: str = "weir-test") -> bytes:
    """A whole request: size prefix + request header v1 + body."""
    header = struct.pack(">hhi", api_key, api_version, correlation_id) + string(client_id)
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def api_versions(correlation_id: int, version: int = 0) -> bytes:
    return frame(API_API_VERSIONS, version, correlation_id)


def metadata(correlation_id: int, topics: list[str] | None = None) -> bytes:
    """Metadata v1; topics=None asks for all topics."""
    if topics is None:
        body = struct.pack(">i", -1)
    else:
        body = struct.pack(">i", len(topics)) + b"".join(string(t) for t in topics)
    return frame(API_METADATA, 1, correlation_id, body)


def fetch(correlation_id: int, topic: str, partition: int | list[tuple[int, int]], offset: int = 0,
          max_wait_ms: int = 500, min_bytes: int = 1, max_bytes: int = 1 << 20) -> bytes:
    """Fetch v4 of one partition at `offset`, or of several given as [(partition, offset)]."""
    parts = [(partition, offset)] if isinstance(partition, int) else partition
    body = struct.pack(">iiiib", -1, max_wait_ms, min_bytes, max_bytes, 0)
    body += struct.pack(">i", 1) + string(topic) + struct.pack(">i", len(parts))
    for p, off in parts:
        body += struct.pack(">iqi", p, off, max_bytes)
    return frame(API_FETCH, 4, correlation_id, body)


def list_offsets_v4(correlation_id: int, topic: str, partition: int, timestamp: int,
                    current_leader_epoch: int = -1) -> bytes:
    """ListOffsets v4 of one partition (-1 latest, -2 earliest), naming the leader epoch the
    client knows (KIP-320; -1: none)."""
    body = struct.pack(">ib", -1, 0) + struct.pack(">i", 1) + string(topic)
    body += struct.pack(">i", 1) + struct.pack(">iiq", partition, current_leader_epoch, timestamp)
    return frame(API_LIST_OFFSETS, 4, correlation_id, body)


def parse_list_offsets_v4(body: bytes) -> tuple[int, int, int]:
    """The one partition of a ListOffsets v4 answer: (error, offset, leader epoch)."""
    pos = 4 + 4  # throttle time, topic count
    (n,) = struct.unpack_from(">h", body, pos)
    pos += 2 + n + 4  # topic name, partition count
    _partition, error, _timestamp, offset, epoch = struct.unpack_from(">ihqqi", body, pos)
    return error, offset, epoch


def offset_for_leader_epoch_v2(correlation_id: int, topic: str, partition: int, leader_epoch: int,
                               current_leader_epoch: int = -1) -> bytes:
    """OffsetForLeaderEpoch v2 (KIP-320) of one partition: where `leader_epoch` ends."""
    body = struct.pack(">i", 1) + string(topic) + struct.pack(">i", 1)
    body += struct.pack(">iii", partition, current_leader_epoch, leader_epoch)
    return frame(API_OFFSET_FOR_LEADER_EPOCH, 2, correlation_id, body)


def parse_offset_for_leader_epoch_v2(body: bytes) -> tuple[int, int, int]:
    """The one partition of an OffsetForLeaderEpoch v2 answer: (error, epoch, end offset)."""
    pos = 4 + 4  # throttle time, topic count
    (n,) = struct.unpack_from(">h", body, pos)
    pos += 2 + n + 4  # topic name, partition count
    error, _partition, epoch, end = struct.unpack_from(">hiiq", body, pos)
    return error, epoch, end


def recv_exact(sock: socket.socket, n: int, deadline: float) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no complete response: got {len(buf)} of {n} bytes")
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(n - len(buf))
        except (ConnectionResetError, BrokenPipeError) as e:
            raise Closed(str(e)) from e
        except socket.timeout as e:
            raise TimeoutError(f"no complete response: got {len(buf)} of {n} bytes") from e
        if not chunk:
            raise Closed(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def read_response(sock: socket.socket, timeout: float = 10.0) -> tuple[int, bytes]:
    """One response: (correlation id, rest of the body after it)."""
    deadline = time.monotonic() + timeout
    (size,) = struct.unpack(">i", recv_exact(sock, 4, deadline))
    assert 4 <= size <= 256 << 20, f"implausible response size {size}"
    payload = recv_exact(sock, size, deadline)
    (corr,) = struct.unpack(">i", payload[:4])
    return corr, payload[4:]


def list_groups(correlation_id: int) -> bytes:
    """ListGroups v0 (an empty body)."""
    return frame(API_LIST_GROUPS, 0, correlation_id)


def parse_list_groups_v0(body: bytes) -> tuple[int, list[str]]:
    """(error code, group ids)."""
    (error, n) = struct.unpack(">hi", body[:6])
    groups, pos = [], 6
    for _ in range(max(n, 0)):
        for field in range(2):  # group_id, protocol_type
            (ln,) = struct.unpack(">h", body[pos:pos + 2])
            if field == 0:
                groups.append(body[pos + 2:pos + 2 + ln].decode())
            pos += 2 + max(ln, 0)
    return error, groups


def parse_api_versions_v0(body: bytes) -> tuple[int, dict[int, tuple[int, int]]]:
    (error,) = struct.unpack(">h", body[:2])
    (n,) = struct.unpack(">i", body[2:6])
    apis = {}
    pos = 6
    for _ in range(max(n, 0)):
        key, lo, hi = struct.unpack(">hhh", body[pos:pos + 6])
        apis[key] = (lo, hi)
        pos += 6
    return error, apis


def parse_fetch_v4(body: bytes) -> list[dict]:
    """Partitions of a Fetch v4 response: partition, error, high watermark, record-set size."""
    out = []
    pos = 4  # throttle_time_ms
    (ntopics,) = struct.unpack(">i", body[pos:pos + 4]); pos += 4
    for _ in range(ntopics):
        (tlen,) = struct.unpack(">h", body[pos:pos + 2]); pos += 2 + tlen
        (nparts,) = struct.unpack(">i", body[pos:pos + 4]); pos += 4
        for _ in range(nparts):
            partition, error, high_watermark, _last_stable = struct.unpack(">ihqq", body[pos:pos + 22]); pos += 22
            (naborted,) = struct.unpack(">i", body[pos:pos + 4]); pos += 4
            pos += max(naborted, 0) * 16
            (records_size,) = struct.unpack(">i", body[pos:pos + 4]); pos += 4
            records = body[pos:pos + max(records_size, 0)]
            pos += max(records_size, 0)
            out.append({"partition": partition, "error": error, "high_watermark": high_watermark,
                        "records_size": max(records_size, 0), "records": records})
    return out


def batch_codecs(records: bytes) -> list[int]:
    """The compression codec (attributes & 7: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd) of each
    whole record batch (magic 2) in a fetched record set; a partial batch at the end is
    skipped, as clients do."""
    codecs = []
    pos = 0
    while pos + 23 <= len(records):
        (batch_len,) = struct.unpack(">i", records[pos + 8:pos + 12])
        if pos + 12 + batch_len > len(records):
            break
        assert records[pos + 16] == 2, f"magic {records[pos + 16]} at {pos}"
        (attributes,) = struct.unpack(">h", records[pos + 21:pos + 23])
        codecs.append(attributes & 7)
        pos += 12 + batch_len
    return codecs


def connect(bootstrap: str, timeout: float = 5.0) -> socket.socket:
    host, port = bootstrap.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def ping(sock: socket.socket, correlation_id: int = 4242, timeout: float = 5.0) -> dict[int, tuple[int, int]]:
    """ApiVersions v0 on an open connection; returns the advertised versions."""
    sock.sendall(api_versions(correlation_id))
    corr, body = read_response(sock, timeout)
    assert corr == correlation_id, f"correlation id {corr}, want {correlation_id}"
    error, apis = parse_api_versions_v0(body)
    assert error == ERROR_NONE, f"ApiVersions error {error}"
    assert API_PRODUCE in apis and API_FETCH in apis, f"ApiVersions lists {sorted(apis)}"
    return apis


def outcome_after(sock: socket.socket, timeout: float = 5.0) -> str:
    """What the broker does with this connection next: 'closed', 'response' or 'nothing'."""
    deadline = time.monotonic() + timeout
    try:
        recv_exact(sock, 4, deadline)
        return "response"
    except Closed:
        return "closed"
    except TimeoutError:
        return "nothing"
