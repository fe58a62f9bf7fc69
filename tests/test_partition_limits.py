"""Creating partitions costs little until they are written, and is bounded (issue 35, item 3).

Before: each new partition reserved ~1 MB of real disk (its first write chunk, fallocated at
open) and a file descriptor: one CreateTopics of 2,000 partitions took +2 GB and 2,000 fds in
8 s, and the accepted maximum of 100,000 partitions would have been ~98 GB. Now a partition
reserves disk at its first append, and `max.partitions` (20,000 by default) refuses a request
that would pass it with POLICY_VIOLATION, creating nothing. Figures printed with `-s`.
"""

from __future__ import annotations

import os
import subprocess

from confluent_kafka.admin import NewPartitions, NewTopic

from clients import CLIENT_TIMEOUT_S, Msg, rd_admin, rd_consume, rd_create_topic, rd_produce, rd_producer

MiB = 1 << 20


def disk_bytes(path) -> int:
    out = subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def fd_targets(pid: int) -> list[str]:
    """What each open descriptor of `pid` points to. The broker closes segment files as its
    descriptor budget turns over, so one listed may be gone by the time it is read: skipped."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except FileNotFoundError:
            pass
    return out


def test_new_partitions_reserve_no_disk_and_a_limit_refuses_too_many(broker_factory, topic_name):
    b = broker_factory(settings={"max.partitions": "5000"}, cores=2)
    disk0, fds0 = disk_bytes(b.data_dir), fds(b.pid)
    rd_create_topic(b.bootstrap, topic_name, 2000)
    disk, opened = disk_bytes(b.data_dir) - disk0, fds(b.pid) - fds0
    print(f"\n2,000 new partitions: disk +{disk / MiB:.1f} MiB, {opened} more file descriptors")
    assert disk < 64 * MiB, f"2,000 empty partitions took {disk / MiB:.0f} MiB of disk"
    # Written partitions reserve as they grow, and work as before.
    p = rd_producer(b.bootstrap)
    rd_produce(p, topic_name, [Msg(b"k", b"v%d" % i, (), None, i % 4) for i in range(4)])
    assert len(rd_consume(b.bootstrap, topic_name, range(4), 4)) == 4

    admin = rd_admin(b.bootstrap)
    # 2,000 + 4,000 > 5,000: refused, nothing created.
    f = admin.create_topics([NewTopic(topic_name + "-big", num_partitions=4000, replication_factor=1)],
                            request_timeout=CLIENT_TIMEOUT_S)[topic_name + "-big"]
    try:
        f.result(CLIENT_TIMEOUT_S)
        raise AssertionError("4,000 more partitions past max.partitions=5000 were created")
    except Exception as e:  # noqa: BLE001 - KafkaException carries the code
        assert "POLICY_VIOLATION" in str(e) and "max.partitions" in str(e), e
    f = admin.create_partitions([NewPartitions(topic_name, 6000)], request_timeout=CLIENT_TIMEOUT_S)[topic_name]
    try:
        f.result(CLIENT_TIMEOUT_S)
        raise AssertionError("growing past max.partitions was accepted")
    except Exception as e:  # noqa: BLE001
        assert "POLICY_VIOLATION" in str(e), e
    md = admin.list_topics(timeout=10)
    assert topic_name + "-big" not in md.topics
    assert len(md.topics[topic_name].partitions) == 2000
    b.check_alive()


def test_the_limit_counts_every_topic_of_a_request_and_of_racing_requests(broker_factory, topic_name):
    """`max.partitions` holds across the topics of one CreateTopics (each checked beside the
    ones before it) and across requests in flight at once (checked again as each is applied),
    so many topics at once — an auto-creating client naming many — cannot pass it."""
    from concurrent.futures import ThreadPoolExecutor
    b = broker_factory(settings={"max.partitions": "100"}, cores=2)
    admin = rd_admin(b.bootstrap)
    fs = admin.create_topics([NewTopic(f"{topic_name}-{i}", num_partitions=60, replication_factor=1)
                              for i in range(2)], request_timeout=CLIENT_TIMEOUT_S)
    outcomes = []
    for name, f in sorted(fs.items()):
        try:
            f.result(CLIENT_TIMEOUT_S)
            outcomes.append("ok")
        except Exception as e:  # noqa: BLE001 - KafkaException carries the code
            outcomes.append("POLICY_VIOLATION" if "POLICY_VIOLATION" in str(e) else str(e))
    assert outcomes == ["ok", "POLICY_VIOLATION"], outcomes

    def create(i: int) -> str:
        name = f"{topic_name}-race-{i}"
        client = rd_admin(b.bootstrap)  # kept: the future dies with its client
        [f] = client.create_topics(
            [NewTopic(name, num_partitions=15, replication_factor=1)],
            request_timeout=CLIENT_TIMEOUT_S).values()
        try:
            f.result(CLIENT_TIMEOUT_S)
            return "ok"
        except Exception as e:  # noqa: BLE001
            return "POLICY_VIOLATION" if "POLICY_VIOLATION" in str(e) else str(e)

    with ThreadPoolExecutor(8) as pool:
        raced = list(pool.map(create, range(8)))
    # 60 held: room for two more topics of 15, whichever requests win.
    assert sorted(raced) == ["POLICY_VIOLATION"] * 6 + ["ok"] * 2, raced
    md = admin.list_topics(timeout=10)
    held = sum(len(t.partitions) for n, t in md.topics.items() if n.startswith(topic_name))
    assert held == 90, held
    b.check_alive()


def test_segment_files_share_a_bounded_number_of_descriptors(broker_factory, topic_name):
    """1,000 partitions written twice and read back with `log.open.segment.files.max=200`: the
    broker holds at most ~200 segment-file descriptors (before: one per partition, 1,000), and
    every record comes back — the active segments the limit closed were reopened for the
    second round of appends and for the reads."""
    b = broker_factory(settings={"log.open.segment.files.max": "200"}, cores=2)
    fds0 = fds(b.pid)
    n = 1000
    rd_create_topic(b.bootstrap, topic_name, n)
    p = rd_producer(b.bootstrap, **{"linger.ms": 20})
    for rnd in range(2):
        rd_produce(p, topic_name, [Msg(b"k%d" % i, b"round %d partition %d" % (rnd, i), (), None, i)
                                   for i in range(n)])
    got = rd_consume(b.bootstrap, topic_name, range(n), 2 * n, timeout=60)
    by_partition: dict[int, list[bytes]] = {}
    for r in got:
        by_partition.setdefault(r.partition, []).append(r.value)
    assert len(by_partition) == n
    for i, values in by_partition.items():
        assert values == [b"round 0 partition %d" % i, b"round 1 partition %d" % i], (i, values)
    data = str(b.data_dir.resolve())
    segment_fds = sum(1 for target in fd_targets(b.pid) if target.startswith(data) and target.endswith(".log"))
    opened = fds(b.pid) - fds0
    print(f"\n1,000 written partitions, limit 200: {segment_fds} segment files open, {opened} more descriptors")
    assert segment_fds <= 200, f"{segment_fds} segment files open with log.open.segment.files.max=200"
    b.check_alive()
