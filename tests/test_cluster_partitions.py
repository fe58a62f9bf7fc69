"""Network partitions between live brokers, under load, checked against the history
(docs/replication.md §6-7 and "Network partitions with iptables"; the cluster and the iptables cuts:
tests/cluster_net.py; the checker: tests/history.py).

Three brokers whose inter-broker traffic runs between 127.0.0.2-4, clients on 127.0.0.1; a
topic of one partition at replication factor 3; a librdkafka acks=all producer and a consumer
running throughout, every delivery report and every read recorded. Each of
`WEIR_PARTITION_CYCLES` rounds (1 in CI):

1. The leader's broker is cut off from the other two with iptables; clients still reach it.
   Right after the cut it takes an acks=1 write (it still believes it leads: it steps down
   only once check-quorum notices, an election timeout later) — a suffix that can never
   commit. Then, for as long as the cut lasts, every acks=all produce sent straight to it
   must fail (NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT or no answer): it acknowledges
   nothing, and no Fetch from it returns a record past what was committed before the cut.
   Meanwhile the other two elect a new leader, named in their Metadata, which takes
   acks=all writes.
2. Healed, the old leader rejoins as a follower: the suffix it wrote alone is cut (its log says
   so) and every replica ends byte-identical.
3. A follower is cut off for 4 s: the leader keeps acknowledging acks=all writes with the other
   follower; healed, the cut-off one catches up, byte-identical.

At the end the history checker finds nothing lost, moved, divergent or read uncommitted, and
none of the values the old leader took alone is in the final log.
"""

from __future__ import annotations

import os
import struct
import threading
import time

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

import kafka_wire as kw
from clients import rd_consume, rd_producer
from cluster_net import partition_cluster  # noqa: F401
from history import History
from test_cluster_faults import broker_of, consumer_loop
from test_cluster_metadata import NODE_ID_STRIDE, create, metadata_v1, wait_until
from test_cluster_replication import high_watermark, leader_of, same_batches_everywhere, stored_batches

CYCLES = int(os.environ.get("WEIR_PARTITION_CYCLES", "1"))
TOPIC = "parted"
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
CUT_S = 4.0


def produce_raw(bootstrap: str, partition: int, value: bytes, acks: int,
                timeout_ms: int = 3000) -> tuple[int | None, int]:
    """One record sent straight to this broker (Produce v3): the partition's error code (None
    when no answer came within the request timeout and 3 s more) and base offset."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    b.append(0, timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
    records = bytes(b.build())
    body = struct.pack(">hhi", -1, acks, timeout_ms) + struct.pack(">i", 1) + kw.string(TOPIC)
    body += struct.pack(">i", 1) + struct.pack(">ii", partition, len(records)) + records
    try:
        with kw.connect(bootstrap) as s:
            s.sendall(kw.frame(kw.API_PRODUCE, 3, 11, body))
            _, resp = kw.read_response(s, timeout=timeout_ms / 1000 + 3)
    except (OSError, TimeoutError, AssertionError):
        return None, -1
    pos = 4
    (tlen,) = struct.unpack_from(">h", resp, pos)
    pos += 2 + tlen + 4
    _p, err, base = struct.unpack_from(">ihq", resp, pos)
    return err, base


def fetch_raw(bootstrap: str, partition: int, offset: int) -> tuple[int, int, list[tuple[int, bytes]]]:
    """One Fetch v4 to this broker: (error, high watermark, [(offset, value)])."""
    with kw.connect(bootstrap) as s:
        s.sendall(kw.fetch(12, TOPIC, partition, offset, max_wait_ms=100))
        _, body = kw.read_response(s)
    (p,) = kw.parse_fetch_v4(body)
    got = []
    records = MemoryRecords(p["records"])
    while (batch := records.next_batch()) is not None:
        for r in batch:
            if r.offset >= offset:
                got.append((r.offset, r.value))
    return p["error"], p["high_watermark"], got


def producer_loop(hist: History, bootstrap: str, stop: threading.Event, acks_at: list):
    """A plain (non-idempotent) acks=all producer: unique values until `stop`; the time of
    every acknowledgement is kept in `acks_at`."""
    def report(err, msg):
        if err is None:
            hist.acknowledged(msg.value(), msg.offset())
            acks_at.append(time.monotonic())
        else:
            hist.failed(msg.value(), str(err))

    p = rd_producer(bootstrap, acks="all", **{"message.timeout.ms": 20000, "linger.ms": 2})
    i = 0
    while not stop.is_set():
        value = f"load-{i}".encode()
        hist.attempt(0, value, False)
        while True:
            try:
                p.produce(TOPIC, value=value, partition=0, on_delivery=report)
                break
            except BufferError:
                p.poll(0.05)
        i += 1
        p.poll(0)
        time.sleep(0.003)
    left = p.flush(40)
    if left:
        hist.failed_to_flush("load", left)


def caught_up(cluster, leader: int, what: str) -> None:
    """Waits until every replica holds, byte for byte, what the leader held when called (the
    load goes on, so replicas are rarely equal at one instant: each must start with it)."""
    held = stored_batches(broker_of(cluster, leader).data_dir, TOPIC, 0)
    wait_until(what, lambda: all(stored_batches(b.data_dir, TOPIC, 0).startswith(held) for b in cluster),
               timeout=60.0)


def isolate_the_leader(cluster, net, hist: History, cycle: int, leader: int, epoch: int, figures: dict):
    """Phase 1 and 2 of a cycle (module docstring); returns the new (leader, epoch)."""
    # The leader now (leadership may have moved since the last cycle's end).
    leader, epoch = leader_of(cluster, TOPIC, 0, epoch)
    old = broker_of(cluster, leader)
    others = [b for b in cluster if b is not old]
    net.isolate(old)
    t_cut = time.monotonic()

    def new_leader():
        """The majority side elects a new leader, named in its Metadata (watched from now on;
        a change of leader just before the cut can name `old` at a newer epoch first)."""
        named, at = leader_of(others, TOPIC, 0, epoch + 1)
        while broker_of(cluster, named) is old:
            named, at = leader_of(others, TOPIC, 0, at + 1)
        elected.append(((named, at), time.monotonic() - t_cut))

    elected: list = []
    watcher = threading.Thread(target=new_leader)
    watcher.start()
    # Still leading for now, it writes an acks=1 batch alone: never committed.
    alone = f"alone-{cycle}".encode()
    hist.attempt(0, alone, False)
    err, alone_at = produce_raw(old.bootstrap, 0, alone, acks=1)
    assert err == 0, f"the isolated leader refused an acks=1 write at once (error {err})"
    hist.failed(alone, "acks=1 to the isolated leader (not acks=all)")
    assert alone in stored_batches(old.data_dir, TOPIC, 0), "the isolated leader wrote it"

    # Clients still reach it; it acknowledges no acks=all write while cut off, and no read
    # from it goes past what was committed.
    refused: list[int | None] = []
    n = 0
    while time.monotonic() - t_cut < CUT_S or n < 2:
        assert metadata_v1(old.bootstrap, [TOPIC])[1][TOPIC][0] == 0, "clients still reach it"
        value = f"isolated-{cycle}-{n}".encode()
        hist.attempt(0, value, False)
        err, _ = produce_raw(old.bootstrap, 0, value, acks=-1, timeout_ms=1500)
        assert err != 0, f"the isolated old leader acknowledged an acks=all write ({value!r})"
        refused.append(err)
        hist.failed(value, f"error {err}")
        # Reads: never at or past its lone write (which cannot be committed); the history
        # checks each record read against the final log.
        fetch_err, hw, got = fetch_raw(old.bootstrap, 0, max(0, alone_at - 200))
        if fetch_err == 0:
            for off, v in got:
                hist.read(f"isolated-old-leader-{cycle}-{n}", 0, off, v)  # one reader per fetch
            assert hw <= alone_at, f"its high watermark {hw} passed its uncommitted write at {alone_at}"
            assert all(off < alone_at for off, _ in got), "a read returned an uncommitted write"
        figures["isolated_reads"] += len(got) if fetch_err == 0 else 0
        n += 1
    assert all(e in (NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT, None) for e in refused), refused
    figures["refused"] += len(refused)

    # The majority side has elected a new leader, named in its Metadata; it takes acks=all.
    watcher.join()
    assert elected, "no new leader named by the majority side (see the error above)"
    (new_leader, new_epoch), elected_after = elected[0]
    assert broker_of(cluster, new_leader) is not old
    figures["elections"].append(elected_after)
    value = f"majority-{cycle}".encode()
    hist.attempt(0, value, False)
    err, at = produce_raw(broker_of(cluster, new_leader).bootstrap, 0, value, acks=-1)
    assert err == 0, f"the new leader refused an acks=all write (error {err})"
    hist.acknowledged(value, at)
    t_heal = time.monotonic()
    net.heal()
    # Rejoined as a follower: its lone suffix is cut and every replica is the same again.
    wait_until("the old leader replaced its lone suffix", lambda: alone not in stored_batches(
        old.data_dir, TOPIC, 0), timeout=60.0)
    caught_up(cluster, new_leader, "the old leader holds the new leader's log")
    figures["rejoins"].append(time.monotonic() - t_heal)
    assert "replacing a suffix of the Raft log" in old.log_tail(1 << 22)
    return new_leader, new_epoch


def isolate_a_follower(cluster, net, leader: int, acks_at: list, figures: dict):
    """Phase 3 of a cycle (module docstring)."""
    follower = next(b for b in cluster if b is not broker_of(cluster, leader))
    net.isolate(follower)
    t_cut = time.monotonic()
    time.sleep(CUT_S)
    acked_during = sum(1 for t in list(acks_at) if t > t_cut + 0.5)
    assert acked_during > 0, "the leader and one follower acknowledged nothing while the other was cut off"
    figures["acked_with_a_follower_cut"] += acked_during
    t_heal = time.monotonic()
    net.heal()
    caught_up(cluster, leader, "the cut-off follower caught up")
    figures["catch_ups"].append(time.monotonic() - t_heal)


@pytest.mark.timeout(120 + 60 * CYCLES)
def test_partitioned_leader_acknowledges_nothing_and_its_suffix_is_cut(partition_cluster):
    cluster, net = partition_cluster
    everyone = ",".join(b.bootstrap for b in cluster)
    create(cluster[0].bootstrap, TOPIC, 1, replication_factor=3)
    leader, epoch = leader_of(cluster, TOPIC, 0)
    hist = History()
    stop_producer, stop_consumer = threading.Event(), threading.Event()
    acks_at: list[float] = []
    consumer_errors: list[str] = []
    threads = [threading.Thread(target=producer_loop, args=(hist, everyone, stop_producer, acks_at), daemon=True),
               threading.Thread(target=consumer_loop, args=(hist, everyone, stop_consumer, consumer_errors, TOPIC, 1),
                                daemon=True)]
    for t in threads:
        t.start()
    figures = {"refused": 0, "isolated_reads": 0, "elections": [], "rejoins": [], "catch_ups": [], "acked_with_a_follower_cut": 0}
    try:
        wait_until("acknowledgements flowing", lambda: len(acks_at) > 50, timeout=30.0)
        for cycle in range(CYCLES):
            leader, epoch = isolate_the_leader(cluster, net, hist, cycle, leader, epoch, figures)
            isolate_a_follower(cluster, net, leader, acks_at, figures)
    except BaseException:
        stop_consumer.set()
        raise
    finally:
        net.heal()
        stop_producer.set()
        threads[0].join(60)

    # Healed: the consumer reads to the end; the final log is read whole.
    end = max((a.offset for a in hist.acked()), default=-1) + 1
    wait_until("the consumer read every acknowledged record", lambda: max(
        (off for _, off, _ in list(hist.reads.get("consumer", []))), default=-1) + 1 >= end, timeout=60.0)
    stop_consumer.set()
    threads[1].join(30)
    hw = high_watermark(everyone, TOPIC, 0)
    got = rd_consume(everyone, TOPIC, [0], hw)
    assert [r.offset for r in got] == list(range(hw)), "offsets not dense"
    final = {0: [r.value for r in got]}
    same_batches_everywhere(cluster, TOPIC, 0, hw)

    found = hist.check(final)
    acked = hist.acked()
    print(f"\n{CYCLES} cycles: {len(hist.attempts)} records sent, {len(acked)} acknowledged, "
          f"final log {hw} records; {figures['refused']} acks=all produces to an isolated leader, "
          f"all refused; {figures['isolated_reads']} records read from it, all committed; new leader named {', '.join(f'{s:.1f}' for s in figures['elections'])} s after "
          f"the cut; rejoined and identical {', '.join(f'{s:.1f}' for s in figures['rejoins'])} s after "
          f"healing; {figures['acked_with_a_follower_cut']} acknowledged while a follower was cut off, "
          f"caught up {', '.join(f'{s:.1f}' for s in figures['catch_ups'])} s after healing; "
          f"duplicates from retries: {len(found['duplicate'])}; consumer errors {consumer_errors[:3]}")
    for kind in ("lost", "divergence", "read_uncommitted", "non_monotonic", "unknown_value",
                 "duplicate_idempotent"):
        assert not found[kind], f"{kind}: {len(found[kind])}, e.g. {found[kind][:5]}"
    survived = [v for v in final[0] if v.startswith((b"alone-", b"isolated-"))]
    assert not survived, f"writes the isolated leader took alone survived: {survived[:5]}"
    assert len(acked) > 100, "the producer got almost nothing through"
