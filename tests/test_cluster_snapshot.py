"""A follower behind its leader's log start catches up by installing a Raft snapshot
(docs/replication.md, "Installing a snapshot"; issue 19).

What broke before: a follower that was down while the leader's retention deleted the entries
it still needed could never catch up — the leader asked its storage for a snapshot forever,
the follower stayed out of the in-sync replicas.

Three `weir serve` processes; a topic at replication factor 3 with 64 KiB segments and
`retention.bytes` of 256 KiB. Phase 1 (the live install): a follower is killed -9 (its data dir
kept), the others take enough acks=all records that the leader's log start passes the dead
follower's log end; the follower restarts, installs the leader's snapshot (its log restarts
empty at the leader's log start) and catches up: back in the ISR on every broker, its log
starting where the leader's did, and holding the leader's batches byte for byte from there.
Phase 2 (a crash during the install): the follower is killed again, falls behind again, and
its partition directory is given the `snapshot_install` file the install writes first —
naming the leader's snapshot point, as the leader would send it — which is the state a kill -9
right after that first step leaves; restarted, it finishes the install before its Raft group
starts, and catches up the same way. Phase 3 (its leadership): the third broker is killed -9
while one more record is committed on the leader and the installed follower, the leader is
killed, the third broker restarted: only the installed follower has the newest entry, so
it is elected; ListOffsets EARLIEST on it answers its log start, and a consumer reads every
record from there to the end, none lost, at the offsets they were acknowledged with.
"""

from __future__ import annotations

import re
import struct
import time

import pytest

from clients import rd_consume, rd_producer
from test_cluster_metadata import NODE_ID_STRIDE, cluster, create, wait_until  # noqa: F401
from test_cluster_retention import batches_from, log_start
from test_cluster_replication import count_records, isr_everywhere, leader_of, produce, stored_batches, values

TOPIC = "behind"
SEGMENT = 64 << 10
RETAIN = 256 << 10
PAD = 4 << 10
PHASE = 400  # records per phase: ~1.6 MB, several times retention.bytes
# Idempotent: a produce retried after a request timeout on the busy 2-vCPU machine (seen right
# after the topic's creation) is deduplicated instead of written twice at other offsets.
SMALL_BATCHES = {"linger.ms": 5, "batch.size": 16 << 10, "enable.idempotence": True}


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def part_dir(b):
    return b.data_dir / f"{TOPIC}-0"


def first_segment(b) -> int:
    return min(int(p.stem) for p in part_dir(b).glob("*.log"))


def snapshot_point(b) -> tuple[int, int, int]:
    """(index, term, offset) of the replica's Raft snapshot point, from its `raft_state`
    (src/broker/replica/state.rs: a 9-byte head, then term, vote, commit, snapshot index,
    snapshot term, snapshot offset)."""
    data = (part_dir(b) / "raft_state").read_bytes()
    assert data[:4] == b"WRST", data[:4]
    _term, _vote, _commit, index, term, offset = struct.unpack_from("<6Q", data, 9)
    return index, term, offset


def install_record(index: int, term: int, offset: int) -> bytes:
    """The `snapshot_install` file (src/broker/replica/snapshot.rs)."""
    body = b"WSNI" + bytes([1]) + struct.pack("<3Q", index, term, offset)
    return body + struct.pack("<I", crc32c(body))


def settled_log_start(bootstrap: str) -> int:
    """The leader's log start once retention stopped moving it (two reads 1 s apart)."""
    def settled():
        first = log_start(bootstrap, TOPIC)
        time.sleep(1.0)
        return (first,) if first == log_start(bootstrap, TOPIC) else None
    return wait_until("the leader's log start settled", settled, timeout=30.0)[0]


def installed_at(b, occurrence: int) -> int:
    """The offset the follower's log restarted at in its `occurrence`-th install (logged)."""
    found = re.findall(r"installing a Raft snapshot.*?\boffset=(\d+)", b.log_tail(8 << 20))
    assert len(found) >= occurrence, found
    return int(found[occurrence - 1])


def caught_up(cluster, leader, follower, total: int) -> int:
    """Waits until the follower holds the leader's batches byte for byte from the higher of
    their first segments, with every record up to `total`; returns that offset."""
    def same():
        above = max(first_segment(leader), first_segment(follower))
        mine = batches_from(stored_batches(leader.data_dir, TOPIC, 0), above)
        theirs = batches_from(stored_batches(follower.data_dir, TOPIC, 0), above)
        if mine == theirs and mine and count_records(mine) == total - above:
            return (above,)  # a tuple: offset 0 is an answer too
        return None
    (above,) = wait_until("the follower holds the leader's batches", same, timeout=60.0)
    isr_everywhere(cluster, TOPIC, 0, {1, 2, 3})
    return above


def fall_behind(cluster, leader, follower, lo: int, hi: int) -> None:
    """With the follower dead, writes records lo..hi and waits until the leader's log start
    (and first segment) passed the follower's log end (lo)."""
    live = ",".join(b.bootstrap for b in cluster if b is not follower)
    produce(rd_producer(live, acks="all", **SMALL_BATCHES), TOPIC, 0, lo, hi, pad=PAD)
    wait_until("the leader's log start past the stopped follower's end",
               lambda: log_start(live, TOPIC) > lo and first_segment(leader) > lo, timeout=30.0)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("cluster", [{"log.retention.check.interval.ms": "200"}], indirect=True)
def test_a_follower_behind_the_leaders_log_start_installs_a_snapshot(cluster):
    everyone = ",".join(b.bootstrap for b in cluster)
    create(cluster[0].bootstrap, TOPIC, 1, replication_factor=3,
           config={"segment.bytes": str(SEGMENT), "retention.bytes": str(RETAIN)})
    leader_node, epoch = leader_of(cluster, TOPIC, 0)
    leader = cluster[leader_node // NODE_ID_STRIDE - 1]
    follower, third = [b for b in cluster if b is not leader]
    produce(rd_producer(everyone, acks="all", **SMALL_BATCHES), TOPIC, 0, 0, 20, pad=PAD)
    caught_up(cluster, leader, follower, 20)

    # Phase 1: the live install.
    follower._kill()
    fall_behind(cluster, leader, follower, 20, 20 + PHASE)
    leader_start = settled_log_start(leader.bootstrap)
    follower.start()
    above = caught_up(cluster, leader, follower, 20 + PHASE)
    at = installed_at(follower, 1)
    assert at == leader_start, (at, leader_start)
    assert first_segment(follower) >= at
    assert "sent a Raft snapshot to a follower behind the log start" in leader.log_tail(8 << 20)
    assert leader_of(cluster, TOPIC, 0) == (leader_node, epoch), "no election happened"
    print(f"phase 1: leader's log start {leader_start}, installed at {at}, identical from {above}")

    # Phase 2: a kill -9 right after the install's first step, then a restart.
    follower._kill()
    total = 20 + 2 * PHASE
    fall_behind(cluster, leader, follower, 20 + PHASE, total)
    index, term, offset = snapshot_point(leader)
    assert offset > 20 + PHASE, "the point is past the follower's log end"
    (part_dir(follower) / "snapshot_install").write_bytes(install_record(index, term, offset))
    follower.start()
    above = caught_up(cluster, leader, follower, total)
    assert "finishing a snapshot install a crash interrupted" in follower.log_tail(8 << 20)
    assert not (part_dir(follower) / "snapshot_install").exists()
    assert first_segment(follower) >= offset
    print(f"phase 2: redone at {offset}, identical from {above}")

    # Phase 3: the installed follower leads; its log starts where the install put it.
    # (The third is killed, not SIGSTOPped: a stopped process would find the leader's last
    # entry in its socket buffer when resumed, and could then win the election.)
    third._kill()
    pair = ",".join(b.bootstrap for b in (leader, follower))
    produce(rd_producer(pair, acks="all", **SMALL_BATCHES), TOPIC, 0, total, total + 1, pad=PAD)
    leader._kill()
    third.start()
    survivors = [follower, third]
    new_leader, _ = leader_of(survivors, TOPIC, 0, epoch + 1)
    assert new_leader // NODE_ID_STRIDE == cluster.index(follower) + 1, "the only up-to-date replica leads"
    total += 1
    live = ",".join(b.bootstrap for b in survivors)
    start = log_start(live, TOPIC)
    assert start == first_segment(follower) and start >= offset, (start, first_segment(follower), offset)
    got = rd_consume(live, TOPIC, [0], total - start)
    assert [r.offset for r in got] == list(range(start, total))
    assert [r.value for r in got] == values(0, start, total, PAD)
    print(f"phase 3: the installed replica leads, log start {start}, {total - start} records read")
