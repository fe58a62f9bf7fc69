#!/usr/bin/env python3
"""Writes the small seed corpora under fuzz/corpus/<target>/seed-*: valid v2 record batches,
index files and segment files in weir's formats (see storage/src/batch.rs and
storage/src/offset_index.rs for the byte layouts). Each seed starts with the target's mode
byte (see the targets' docs). Run from anywhere: python3 fuzz/gen_seeds.py"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def _table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


TABLE = _table()


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def varlong(v):
    z = ((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def record(ts_delta, offset_delta, key, value, headers=()):
    body = bytearray([0]) + varlong(ts_delta) + varlong(offset_delta)
    for f in (key, value):
        body += varlong(-1) if f is None else varlong(len(f)) + f
    body += varlong(len(headers))
    for k, v in headers:
        body += varlong(len(k)) + k + (varlong(-1) if v is None else varlong(len(v)) + v)
    return varlong(len(body)) + bytes(body)


def batch(base_offset, records, base_ts=1_700_000_000_000, attributes=0, max_ts=None,
          last_delta=None):
    recs = b"".join(record(*r) for r in records)
    count = len(records)
    if last_delta is None:
        last_delta = max(count - 1, 0)
    if max_ts is None:
        max_ts = base_ts + max([r[0] for r in records] or [0])
    after_crc = struct.pack(">hiqqqhii", attributes, last_delta, base_ts, max_ts, -1, -1, -1,
                            count) + recs
    crc = crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", base_offset, batch_length, -1, 2, crc) + after_crc


def index_file(magic, entry_bytes, base, seg_bytes, next_off, max_ts, entries):
    body = b"".join(entries)
    head = struct.pack(">4sHHQQQqI", magic, 1, entry_bytes, base, seg_bytes, next_off, max_ts,
                       len(entries))
    crc = crc32c(body, crc32c(head))
    return head + struct.pack(">I", crc) + body


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def main():
    one = batch(0, [(0, 0, b"key", b"value")])
    two = batch(5, [(0, 0, None, b"a"), (7, 1, b"k", b"b" * 40, [(b"h", b"x"), (b"n", None)])])
    big = batch(100, [(i, i, b"k%d" % i, bytes([i % 251]) * 300) for i in range(40)])
    compressed = batch(0, [(0, 0, None, b"\x00" * 30)], attributes=4)
    control = batch(0, [(0, 0, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")],
                    attributes=0x20 | 0x10)
    empty = batch(0, [])

    # batch_validate: mode 0 = as is; 1 = repair CRCs; 3 = repair lengths too; 5 = offsets.
    for name, data in [("one", one), ("two", two), ("big", big), ("compressed", compressed),
                       ("control", control), ("empty", empty)]:
        write("batch_validate", name, b"\x00" + data)
    write("batch_validate", "set", b"\x00" + one + two + compressed)
    write("batch_validate", "set-torn", b"\x00" + one + two[:-3])
    write("batch_validate", "bad-crc-repair", b"\x01" + one[:17] + b"\0\0\0\0" + one[21:])
    write("batch_validate", "bad-len-repair", b"\x03" + one[:8] + b"\x7f\xff\xff\xff" + one[12:])

    # index_decode
    oi = index_file(b"WIDX", 8, 100, 9000, 180, 77,
                    [struct.pack(">II", 0, 0), struct.pack(">II", 10, 4100),
                     struct.pack(">II", 25, 8300)])
    ti = index_file(b"WTIX", 12, 100, 9000, 180, 77,
                    [struct.pack(">qI", 5, 0), struct.pack(">qI", 9, 3)])
    write("index_decode", "offset", b"\x00" + oi)
    write("index_decode", "time", b"\x00" + ti)
    write("index_decode", "offset-empty", b"\x00" + index_file(b"WIDX", 8, 0, 0, 0, -1, []))
    write("index_decode", "time-repair", b"\x03" + ti[:40] + b"\0\0\0\0\0\0\0\0" + ti[48:])

    # segment_recovery: contiguous batches from offset 0, with various tails.
    seg = [batch(0, [(0, 0, b"a", b"1")]),
           batch(1, [(3, 0, b"b", b"2" * 100), (4, 1, None, b"3")]),
           batch(3, [(i, i, None, bytes([i]) * 200) for i in range(12)], base_ts=1_700_000_000_500),
           batch(15, [(0, 0, None, b"\x00" * 50)], attributes=2)]
    clean = b"".join(seg)
    write("segment_recovery", "clean", b"\x00" + clean)
    write("segment_recovery", "clean-small", b"\x04" + clean)
    write("segment_recovery", "clean-marker", b"\x08" + clean)
    write("segment_recovery", "torn-tail", b"\x00" + clean + seg[1][:30])
    write("segment_recovery", "zero-tail", b"\x00" + clean + b"\x00" * 5000)
    write("segment_recovery", "garbage-tail", b"\x04" + clean + bytes(range(256)) * 4)
    flipped = bytearray(clean)
    flipped[len(seg[0]) + 70] ^= 0x10
    write("segment_recovery", "flipped", b"\x00" + bytes(flipped))
    gap = seg[0] + batch(7, [(0, 0, None, b"x")])
    write("segment_recovery", "offset-gap", b"\x00" + gap)
    write("segment_recovery", "repair", b"\x05" + clean + b"\x00" * 61)
    write("segment_recovery", "empty", b"\x00")

    # leader_epochs: the target's log has epochs 2 (offsets 0-9), 5 (10-49) and 9 (50-69).
    def epochs_file(entries):
        body = b"WEIREPC1" + struct.pack(">I", len(entries))
        body += b"".join(struct.pack(">iQ", e, s) for e, s in entries)
        return body + struct.pack(">I", crc32c(body))
    valid = epochs_file([(2, 0), (5, 10), (9, 50)])
    write("leader_epochs", "valid", b"\x00" + valid)
    write("leader_epochs", "valid_crash", b"\x02" + valid)
    write("leader_epochs", "past_end", b"\x00" + epochs_file([(2, 0), (5, 10), (9, 50), (11, 500)]))
    write("leader_epochs", "behind", b"\x00" + epochs_file([(2, 0)]))
    write("leader_epochs", "unordered_repair", b"\x01" + epochs_file([(5, 10), (2, 0)]))
    write("leader_epochs", "damaged", b"\x00" + valid[:-1] + bytes([valid[-1] ^ 1]))
    write("leader_epochs", "empty", b"\x00")

    # record_validate: bit 0 repairs CRCs and lengths; bits 1-3 compress each body with that
    # codec (the target compresses, so seeds stay plain); bit 4 compacted; bit 5 LogAppendTime.
    lies = batch(0, [(0, 0, b"k", b"v"), (1, 5, b"k", b"v")])  # offset delta 5 after 0
    for name, mode, data in [("one", 0x00, one), ("two", 0x00, two), ("big", 0x01, big),
                             ("one-gzip", 0x03, one), ("two-snappy", 0x05, two),
                             ("big-lz4", 0x07, big), ("two-zstd", 0x09, two),
                             ("compacted", 0x11, two), ("log-append-time", 0x21, big),
                             ("internal-control", 0x41, control), ("set", 0x01, one + two),
                             ("offset-lie", 0x01, lies), ("bomb-limit", 0x89, big)]:
        write("record_validate", name, bytes([mode]) + data)

    # inflate: bits 0-1 codec (gzip, snappy, lz4, zstd), 2-4 the limit, bit 5 round trip.
    text = b"".join(b"record %d of a seed, %s\n" % (i, b"x" * (i % 17)) for i in range(200))
    for codec in range(4):
        write("inflate", "round-trip-%d" % (codec + 1), bytes([0x20 | 0x0C | codec]) + text)
        write("inflate", "garbage-%d" % (codec + 1), bytes([0x0C | codec]) + text[:300])

    # peer_frames: frames as they arrive on a peer port.
    import json

    def peer(kind, body):
        return struct.pack(">I", len(body) + 1) + bytes([kind]) + body
    ping = peer(7, struct.pack(">Q", 2))
    forward = peer(2, json.dumps({"from": 2, "req": 7, "records": [
        {"type": "AlterUser", "user": "mallory", "mechanism": "SCRAM-SHA-256",
         "credential": {"salt": "c2FsdA==", "iterations": 4096, "stored_key": "a2V5",
                        "server_key": "a2V5"}}]}).encode())
    reply = peer(3, json.dumps({"req": 7, "result": {"Ok": 12}}).encode())
    call = peer(5, json.dumps({"from": 2, "req": 9, "call": {"GroupTxnEnd": {
        "group": "g", "producer_id": 5, "commit": True}}}).encode())
    partition = peer(4, bytes(range(16)) + struct.pack(">I", 3) + b"\x08\x03\x10\x01\x18\x02")
    write("peer_frames", "ping", ping)
    write("peer_frames", "forward", forward)
    write("peer_frames", "stream", ping + reply + call + partition + forward)
    write("peer_frames", "huge-length", struct.pack(">I", 0xFFFFFFF0) + b"\x02")
    write("peer_frames", "raft", peer(1, b"\x08\x03\x10\x01\x18\x02\x20\x05"))


if __name__ == "__main__":
    main()
