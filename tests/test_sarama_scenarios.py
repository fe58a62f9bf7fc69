"""sarama (the Go client, github.com/IBM/sarama, newest release: v1.61.1) in the scenarios its users
rely on, against the real weir binary: exactly-once with the idempotent producer across kill -9,
transactions with read_committed consumers, and consumer groups.

tests/go/sarama_scenarios (a Go program; go.mod and go.sum pin sarama) runs each scenario with a
real sarama client and prints one JSON line of what it saw; the assertions are here.

- Idempotent producer: an AsyncProducer with `Producer.Idempotent` (acks=all, one request in
  flight, retries for up to a minute) writes "p:seq" 0..N-1 to each of 3 partitions while the
  broker is killed with SIGKILL twice (restarted on the same ports each time). sarama resends
  what it was not acknowledged; every record must be acknowledged, each partition must hold
  its sequence exactly once and in order, and the offset sarama reported for each record must
  be where it is.
- Transactions (`Producer.Transaction.ID`): a committed, an aborted and a still-open
  transaction. A read_committed consumer sees only the committed one while the third is open
  (the last stable offset holds it back) and then the third too; read_uncommitted sees all
  three. Offsets sent to a group in an aborted transaction are not committed, in a committed
  one they are (AddOffsetsToTxn, TxnOffsetCommit). A second producer with the same
  transactional id fences the first (PRODUCER_FENCED), whose records never become visible.
- Consumer groups (sarama's ConsumerGroup, classic protocol, range assignor): one member owns
  every partition; a second joins and they split them, the newcomer resuming from the first
  one's commits; the second leaves (LeaveGroup) and the first owns everything again long
  before the 30 s session timeout; the group empties, the broker is killed (SIGKILL) and
  restarted, and a new member resumes from the committed offsets. Every record is read exactly
  once, by the member that owned its partition at the time.

Needs the Go toolchain (`go`); the first build fetches sarama from the Go module proxy.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import free_port_run, go_build
from clients import rd_consume, rd_create_topic

GO_DIR = Path(__file__).resolve().parent / "go"
SCENARIOS_DIR = GO_DIR / "sarama_scenarios"
SARAMA_VERSION = "v1.61.1"  # go.mod pins it
GO_BUILD_TIMEOUT_S = 600  # the first build downloads sarama and its dependencies


@pytest.fixture(scope="session")
def sarama_scenarios() -> Path:
    """tests/go/.bin/sarama_scenarios, built from tests/go/sarama_scenarios."""
    return go_build(SCENARIOS_DIR, "sarama_scenarios", GO_BUILD_TIMEOUT_S)


def restartable_broker(broker_factory):
    """A 2-core broker on fixed ports (bootstrap and the per-core ones), so that a client keeps
    its addresses across kill -9 and restart, as with a real service."""
    port = free_port_run(4)
    return broker_factory(settings={"listeners": f"PLAINTEXT://127.0.0.1:{port}"}, cores=2)


class GoProcess:
    """The Go program in the background; its stdout lines in a queue."""

    def __init__(self, cmd: list[str], stdin: bool = False):
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     stdin=subprocess.PIPE if stdin else subprocess.DEVNULL)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.out: list[str] = []
        self.err: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.out.append(line)
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_line(self, pred, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no such line from {self.cmd[1]} within {timeout}s: {self.tail()}"
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            assert line is not None, f"{self.cmd[1]} ended early (exit {self.proc.wait()}): {self.tail()}"
            if pred(line):
                return line

    def result(self, timeout: float) -> dict:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"{self.cmd[1]} did not finish within {timeout}s: {self.tail()}")
        time.sleep(0.1)  # the reader threads drain
        last = "".join(self.out).strip().splitlines()[-1:] or ["{}"]
        res = json.loads(last[0])
        assert self.proc.returncode == 0 and "error" not in res, f"{self.cmd[1]} failed: {self.tail()}"
        return res

    def tail(self) -> str:
        return f"\nstdout: {''.join(self.out)[-3000:]}\nstderr: {''.join(self.err)[-6000:]}"

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()


def run(binary: Path, *args: str, timeout: float = 120) -> dict:
    g = GoProcess([str(binary), *args])
    try:
        res = g.result(timeout)
    finally:
        g.kill()
    assert res["sarama"] == SARAMA_VERSION, res["sarama"]
    return res


# ---- idempotent producer ----------------------------------------------------------------------

PARTITIONS = 3
PER_PARTITION = 1000


@pytest.mark.timeout(GO_BUILD_TIMEOUT_S + 240)
def test_idempotent_producer_is_exactly_once_across_kill9(sarama_scenarios, broker_factory, topic_name):
    b = restartable_broker(broker_factory)
    rd_create_topic(b.bootstrap, topic_name, PARTITIONS)
    total = PARTITIONS * PER_PARTITION
    g = GoProcess([str(sarama_scenarios), "idempotent", "-brokers", b.bootstrap, "-topic", topic_name,
                   "-partitions", str(PARTITIONS), "-count", str(PER_PARTITION), "-pause", "30ms"])
    try:
        # Two kills while records are in flight: at a quarter and at two thirds acknowledged.
        acked = lambda at_least: (lambda line: line.startswith("acked ") and int(line.split()[1]) >= at_least)
        for frac in (0.25, 0.66):
            line = g.wait_line(acked(int(total * frac)), timeout=90)
            b.kill9()
            print(f"killed at '{line}', broker back on {b.bootstrap}")
        res = g.result(timeout=150)
    finally:
        g.kill()
    assert res["sarama"] == SARAMA_VERSION
    assert res["errors"] == [], f"sarama reported errors: {res['errors'][:10]}"
    # The kills did cut requests in flight: sarama resent batches (it logs each retry).
    assert res["retries"] > 0, f"sarama never retried a batch: the kills hit nothing in flight ({res})"
    print(f"sarama retried {res['retries']} times: {res['retry_reasons']}")
    offsets = res["offsets"]
    missing = [(p, s) for p in range(PARTITIONS) for s in range(PER_PARTITION) if offsets[p][s] < 0]
    assert not missing, f"{len(missing)} records never acknowledged, e.g. {missing[:5]}"

    got = rd_consume(b.bootstrap, topic_name, range(PARTITIONS), total, extra_wait=1.0, timeout=60)
    for p in range(PARTITIONS):
        recs = sorted((r for r in got if r.partition == p), key=lambda r: r.offset)
        values = [r.value.decode() for r in recs]
        want = [f"{p}:{s}" for s in range(PER_PARTITION)]
        if values != want:
            dups = sorted({v for v in values if values.count(v) > 1})
            lost = sorted(set(want) - set(values))
            raise AssertionError(f"partition {p}: {len(values)} records, {len(dups)} duplicated (e.g. {dups[:5]}), "
                                 f"{len(lost)} lost (e.g. {lost[:5]}), in order: {values == sorted(values, key=lambda v: int(v.split(':')[1]))}")
        assert [r.offset for r in recs] == list(range(PER_PARTITION)), f"partition {p}: offsets not 0..{PER_PARTITION - 1}"
        wrong = [(s, offsets[p][s]) for s in range(PER_PARTITION) if offsets[p][s] != s]
        assert not wrong, (f"partition {p}: the offset sarama was given for record seq differs from where it is "
                           f"(seq, acked offset): {wrong[:10]}")


# ---- transactions -----------------------------------------------------------------------------


def values(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-{i}" for i in range(n)]


@pytest.mark.timeout(GO_BUILD_TIMEOUT_S + 180)
def test_transactions_commit_abort_and_read_committed(sarama_scenarios, broker, topic_name):
    rd_create_topic(broker.bootstrap, topic_name, 3)
    res = run(sarama_scenarios, "txn", "-brokers", broker.bootstrap, "-topic", topic_name,
              "-group", f"{topic_name}-g", timeout=150)
    committed, aborted, open_ = values("committed", 30), values("aborted", 30), values("open", 30)
    assert res["read_committed_while_open"] == sorted(committed), (
        "read_committed while a transaction is open: only the committed one "
        f"(not aborted, not open); got {summary(res['read_committed_while_open'])}")
    assert res["read_uncommitted_while_open"] == sorted(committed + aborted + open_), (
        f"read_uncommitted sees every transaction's records; got {summary(res['read_uncommitted_while_open'])}")
    assert res["read_committed_after_commit"] == sorted(committed + open_), (
        f"read_committed after the third commits; got {summary(res['read_committed_after_commit'])}")
    assert res["group_offset_after_abort"] == -1, "an offset sent in an aborted transaction was committed"
    assert res["group_offset_after_commit"] == 7, "the offset sent in a committed transaction"
    assert res["zombie_fenced"], (f"the first producer was not fenced by the second with the same "
                                  f"transactional id: send {res['zombie_send_error']}, commit {res['zombie_commit_error']}")
    assert res["read_committed_end"] == sorted(committed + open_ + values("with-offsets", 3) + values("second", 3)), (
        f"read_committed at the end (no fenced record); got {summary(res['read_committed_end'])}")


def summary(vals: list[str]) -> str:
    counts: dict[str, int] = {}
    for v in vals:
        k = v.rsplit("-", 1)[0]
        counts[k] = counts.get(k, 0) + 1
    return f"{len(vals)} records {counts}"


# ---- consumer groups --------------------------------------------------------------------------

GROUP_PARTITIONS = 4
PER_PHASE = 25  # per partition; the Go program's perPart
SESSION_TIMEOUT_S = 30  # the Go program's Consumer.Group.Session.Timeout


@pytest.mark.timeout(GO_BUILD_TIMEOUT_S + 240)
def test_consumer_group_rebalances_and_resumes_from_commits(sarama_scenarios, broker_factory, topic_name):
    b = restartable_broker(broker_factory)
    rd_create_topic(b.bootstrap, topic_name, GROUP_PARTITIONS)
    g = GoProcess([str(sarama_scenarios), "group", "-brokers", b.bootstrap, "-topic", topic_name,
                   "-group", f"{topic_name}-g", "-restart-handshake"], stdin=True)
    try:
        g.wait_line(lambda line: line == "RESTART", timeout=150)
        b.kill9()  # the group is empty, its commits acknowledged
        g.proc.stdin.write("go\n")
        g.proc.stdin.flush()
        res = g.result(timeout=150)
    finally:
        g.kill()
    assert res["sarama"] == SARAMA_VERSION
    a, bm, c = res["a"], res["b"], res["c"]
    for name, m in (("a", a), ("b", bm), ("c", c)):
        assert m["errors"] is None or m["errors"] == [], f"member {name}: {m['errors']}"
    everything = list(range(GROUP_PARTITIONS))

    # Assignments: a alone, then a and b split, then a alone again; c alone.
    gens_a = [g["partitions"] for g in a["generations"]]
    assert gens_a[0] == everything, f"a's first assignment {gens_a}"
    split_a, split_b = res["split_a"], res["split_b"]
    assert sorted(split_a + split_b) == everything and split_a and split_b, f"split {split_a} / {split_b}"
    assert [g["partitions"] for g in bm["generations"]] == [split_b], f"b's assignments {bm['generations']}"
    assert gens_a == [everything, split_a, everything], f"a's assignments {gens_a}"
    assert [g["partitions"] for g in c["generations"]] == [everything], f"c's assignments {c['generations']}"
    assert res["leave_rebalance_seconds"] < SESSION_TIMEOUT_S / 2, (
        f"a got b's partitions {res['leave_rebalance_seconds']:.1f} s after b left: the LeaveGroup did not "
        f"start a rebalance (the session timeout is {SESSION_TIMEOUT_S} s)")

    # Commits: everything read before the group emptied, before and after kill -9.
    want_committed = {str(p): 3 * PER_PHASE for p in everything}
    assert res["committed_when_empty"] == want_committed, res["committed_when_empty"]
    assert res["committed_after_restart"] == want_committed, (
        f"committed offsets after kill -9: {res['committed_after_restart']}")

    # Every record read exactly once, by its partition's owner of the time.
    owner = {"p1": {p: "a" for p in everything}, "p3": {p: "a" for p in everything},
             "p4": {p: "c" for p in everything},
             "p2": {**{p: "a" for p in split_a}, **{p: "b" for p in split_b}}}
    seen: dict[tuple[int, int], str] = {}
    problems = []
    for m in (a, bm, c):
        for r in m["records"]:
            key = (r["partition"], r["offset"])
            if key in seen:
                problems.append(f"{r['value']} (partition {key[0]} offset {key[1]}) read by {seen[key]} and {r['member']}")
                continue
            seen[key] = r["member"]
            phase, part, i = r["value"].split(":")
            if int(part) != r["partition"]:
                problems.append(f"{r['value']} read from partition {r['partition']}")
            elif owner[phase][r["partition"]] != r["member"]:
                problems.append(f"{r['value']} read by {r['member']}, its partition's owner was {owner[phase][r['partition']]}")
            phase_no = int(phase[1:])
            if r["offset"] != (phase_no - 1) * PER_PHASE + int(i):
                problems.append(f"{r['value']} at offset {r['offset']}")
    assert not problems, f"{len(problems)} problems: {problems[:10]}"
    assert len(seen) == 4 * PER_PHASE * GROUP_PARTITIONS, f"{len(seen)} distinct records read"
