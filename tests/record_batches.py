"""Record batches (format v2) built by hand, lies included, and a raw Produce v8 to send them.

A `Batch` encodes what a well-behaved producer would send; every field can be made to lie
(`records_count`, a record's offset delta or length, a key length, a header count, the codec
bits, the max timestamp, ...), and the CRC is computed over whatever the fields say, so that
only a broker that reads the records can tell. Produce v8 answers with the error code, the
record errors and the error message (KIP-467).
"""

from __future__ import annotations

import gzip
import struct
from dataclasses import dataclass, field

import crc32c
import lz4.frame
import snappy
import zstandard

import kafka_wire as kw

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def varint(v: int) -> bytes:
    z = (v << 1) ^ (v >> 63)
    z &= (1 << 64) - 1
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def xerial_snappy(data: bytes, block: int = 32 << 10) -> bytes:
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for i in range(0, len(data), block):
        z = snappy.compress(data[i:i + block])
        out += struct.pack(">i", len(z)) + z
    return bytes(out)


def compress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        return gzip.compress(data)
    if codec == 2:
        return xerial_snappy(data)
    if codec == 3:
        return lz4.frame.compress(data)
    if codec == 4:
        return zstandard.ZstdCompressor().compress(data)
    raise ValueError(codec)


@dataclass
class Rec:
    ts_delta: int = 0
    offset_delta: int = 0
    key: bytes | None = b"k"
    value: bytes | None = b"v"
    headers: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    key_len: int | None = None  # replaces the encoded key length
    header_count: int | None = None  # replaces the encoded header count
    length_lie: int = 0  # added to the length prefix

    def encode(self) -> bytes:
        body = bytearray(b"\x00")
        body += varint(self.ts_delta) + varint(self.offset_delta)
        if self.key is None:
            body += varint(-1 if self.key_len is None else self.key_len)
        else:
            body += varint(len(self.key) if self.key_len is None else self.key_len) + self.key
        body += varint(-1) if self.value is None else varint(len(self.value)) + self.value
        body += varint(len(self.headers) if self.header_count is None else self.header_count)
        for k, v in self.headers:
            body += varint(len(k)) + k
            body += varint(-1) if v is None else varint(len(v)) + v
        return varint(len(body) + self.length_lie) + bytes(body)


@dataclass
class Batch:
    records: list[Rec]
    codec: int = 0
    attributes: int = 0  # bits besides the codec
    base_timestamp: int = 1_700_000_000_000
    max_timestamp: int | None = None  # None: the records' true max
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    records_count: int | None = None
    codec_bits: int | None = None  # replaces the codec bits written in the header
    body: bytes | None = None  # replaces the (compressed) records section

    @staticmethod
    def of(n: int, ts: int = 1_700_000_000_000, value: bytes = b"v") -> "Batch":
        return Batch([Rec(ts_delta=i, offset_delta=i, key=b"k%d" % i, value=value) for i in range(n)],
                     base_timestamp=ts)

    def true_max(self) -> int:
        return max(self.base_timestamp + r.ts_delta for r in self.records)

    def encode(self) -> bytes:
        body = self.body
        if body is None:
            body = compress(self.codec, b"".join(r.encode() for r in self.records))
        count = len(self.records) if self.records_count is None else self.records_count
        codec = self.codec if self.codec_bits is None else self.codec_bits
        after_crc = struct.pack(">hiqqqhii", self.attributes | codec, count - 1, self.base_timestamp,
                                self.true_max() if self.max_timestamp is None else self.max_timestamp,
                                self.producer_id, self.producer_epoch, self.base_sequence, count) + body
        head = struct.pack(">qiib", 0, 4 + 1 + 4 + len(after_crc), -1, 2)
        return head + struct.pack(">I", crc32c.crc32c(after_crc)) + after_crc


@dataclass
class ProduceAnswer:
    error: int
    base_offset: int
    log_append_time: int
    log_start_offset: int
    record_errors: list[tuple[int, str | None]]
    message: str | None


def produce_v8_body(topic: str, parts: list[tuple[int, bytes]], acks: int = -1, timeout_ms: int = 10_000) -> bytes:
    """A Produce v8 request body for one topic: (partition, record set) each."""
    body = kw.string(None) + struct.pack(">hi", acks, timeout_ms)
    body += struct.pack(">i", 1) + kw.string(topic) + struct.pack(">i", len(parts))
    for partition, records in parts:
        body += struct.pack(">ii", partition, len(records)) + records
    return body


def parse_produce_v8(resp: bytes) -> dict[int, ProduceAnswer]:
    """Partition -> its answer, from a Produce v8 response for one topic."""
    pos = 0

    def take(fmt: str):
        nonlocal pos
        v = struct.unpack_from(fmt, resp, pos)
        pos += struct.calcsize(fmt)
        return v

    def nstring() -> str | None:
        nonlocal pos
        (n,) = take(">h")
        if n < 0:
            return None
        s = resp[pos:pos + n].decode()
        pos += n
        return s

    (n_topics,) = take(">i")
    assert n_topics == 1
    nstring()
    (n_parts,) = take(">i")
    out = {}
    for _ in range(n_parts):
        partition, error, base, append_time, log_start = take(">ihqqq")
        (n_errors,) = take(">i")
        errors = []
        for _ in range(n_errors):
            (i,) = take(">i")
            errors.append((i, nstring()))
        message = nstring()
        out[partition] = ProduceAnswer(error, base, append_time, log_start, errors, message)
    return out


def produce_v8(bootstrap: str, topic: str, records: bytes, acks: int = -1, partition: int = 0,
               timeout: float = 30.0) -> ProduceAnswer:
    s = kw.connect(bootstrap, timeout=timeout)
    try:
        s.sendall(kw.frame(kw.API_PRODUCE, 8, 1, produce_v8_body(topic, [(partition, records)], acks)))
        _, resp = kw.read_response(s, timeout=timeout)
    finally:
        s.close()
    answers = parse_produce_v8(resp)
    assert len(answers) == 1
    return next(iter(answers.values()))


def gzip_of_zeros(n: int, chunk: int = 64 << 20) -> bytes:
    """`n` zero bytes gzipped, as gzip members of `chunk` zeros each (one member compressed
    once and repeated: a 4 GiB bomb in a second)."""
    member = gzip.compress(b"\0" * chunk, compresslevel=9)
    full, rest = divmod(n, chunk)
    out = member * full
    if rest:
        out += gzip.compress(b"\0" * rest, compresslevel=9)
    return out



# ---- compression bombs ----------------------------------------------------------------------

_ZEROS_CHUNK = 64 << 20
_cache: dict[tuple[str, int], bytes] = {}


def _uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _record_prefix(i: int, value_len: int, key: bytes = b"k") -> bytes:
    """Record `i` of a bomb up to its value: `value_len` zeros and a header count of 0 (one more
    zero byte) follow."""
    fields = b"\0" + varint(0) + varint(i) + varint(len(key)) + key + varint(value_len)
    return varint(len(fields) + value_len + 1) + fields


def _zero_members(n: int, compress_chunk) -> bytes:
    """`n` zero bytes as concatenated gzip members / zstd frames: one 64 MiB member compressed
    once and repeated."""
    key = (compress_chunk.__name__, _ZEROS_CHUNK)
    if key not in _cache:
        _cache[key] = compress_chunk(b"\0" * _ZEROS_CHUNK)
    full, rest = divmod(n, _ZEROS_CHUNK)
    return _cache[key] * full + (compress_chunk(b"\0" * rest) if rest else b"")


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9)


def _zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(data)


def bomb(kind: str, inflated: int) -> tuple[Batch, int]:
    """A batch whose records — valid ones, keyed, values of zeros, at most 1 GiB each — inflate
    to about `inflated` bytes. `kind`: gzip, zstd, lz4 (one stream each), snappy-raw (what
    librdkafka sends: one raw buffer whose header announces the size), snappy-xerial (Java's
    framing: snappy compresses at most ~21:1, so `inflated` must fit the broker's message.max.bytes). Returns the
    batch and its records count."""
    key = (kind, inflated)
    per_record = min(inflated, (1 << 30) - 64)
    sizes = []
    left = inflated
    while left > 0:
        sizes.append(min(left, per_record))
        left -= sizes[-1]
    if key not in _cache:
        if kind in ("gzip", "zstd"):
            comp = _gzip if kind == "gzip" else _zstd
            parts = []
            for i, v in enumerate(sizes):
                parts.append(comp(_record_prefix(i, v)))
                parts.append(_zero_members(v + 1, comp))
            _cache[key] = b"".join(parts)
        elif kind == "lz4":
            c = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX4MB)
            parts = [c.begin()]
            chunk = b"\0" * (16 << 20)
            for i, v in enumerate(sizes):
                parts.append(c.compress(_record_prefix(i, v)))
                full, rest = divmod(v + 1, len(chunk))
                for _ in range(full):
                    parts.append(c.compress(chunk))
                parts.append(c.compress(b"\0" * rest))
            parts.append(c.flush())
            _cache[key] = b"".join(parts)
        elif kind == "snappy-raw":
            # The preamble announces the whole size (a u32); one literal holds the first
            # record's start. A decoder that trusts the preamble allocates it all up front.
            assert inflated < 1 << 32
            prefix = _record_prefix(0, sizes[0])
            literal = bytes([(len(prefix) - 1) << 2]) if len(prefix) <= 60 else None
            assert literal is not None
            _cache[key] = _uvarint(inflated) + literal + prefix
        elif kind == "snappy-xerial":
            block = snappy.compress(b"\0" * (32 << 10))
            n_blocks = (inflated - 64) // (32 << 10)
            prefix = _record_prefix(0, n_blocks * (32 << 10) - 1)
            head = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
            first = snappy.compress(prefix)
            _cache[key] = (head + struct.pack(">i", len(first)) + first
                           + (struct.pack(">i", len(block)) + block) * n_blocks)
        else:
            raise ValueError(kind)
    b = Batch([], codec=CODECS[kind.split("-")[0]], body=_cache[key], records_count=len(sizes),
              max_timestamp=1_700_000_000_000)
    return b, len(sizes)
