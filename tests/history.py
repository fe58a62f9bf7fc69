"""A Jepsen-style history of a cluster run, and its checks (docs/replication.md §7, step 4).

Producers record every attempt: its unique value, whether its producer is idempotent, and its
outcome — acknowledged at an offset, failed, or unknown (no report before the end). Consumers
record every (partition, offset, value) they read, in order. After the faults stop and the
cluster heals, `check` compares all of it with each partition's final log (every record from
offset 0, read from the healed cluster) and counts the anomalies Jepsen reported for
Kafka-protocol queues:

- lost: an acknowledged value missing from the final log, or not at its acknowledged offset;
- duplicate: a value at two offsets of the final log (expected only from a non-idempotent
  producer's retries; counted apart as `duplicate_idempotent` for idempotent ones);
- divergence: two reads of one offset that saw different values;
- read_uncommitted: a value a consumer read at an offset the final log holds something else
  at (or does not hold): a read of data that was later cut;
- non_monotonic: a consumer's offsets in one partition that went backwards (it never seeks);
- unknown_value: a value in the final log that no producer sent.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class Attempt:
    partition: int
    value: bytes
    idempotent: bool
    offset: int | None = None  # acknowledged at
    error: str | None = None


@dataclass
class History:
    attempts: dict[bytes, Attempt] = field(default_factory=dict)
    reads: dict[str, list[tuple[int, int, bytes]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    unflushed: dict[str, int] = field(default_factory=dict)

    def attempt(self, partition: int, value: bytes, idempotent: bool) -> None:
        with self.lock:
            assert value not in self.attempts, f"value sent twice by the test: {value!r}"
            self.attempts[value] = Attempt(partition, value, idempotent)

    def acknowledged(self, value: bytes, offset: int) -> None:
        with self.lock:
            self.attempts[value].offset = offset

    def failed(self, value: bytes, error: str) -> None:
        with self.lock:
            self.attempts[value].error = error

    def failed_to_flush(self, producer: str, left: int) -> None:
        with self.lock:
            self.unflushed[producer] = left

    def read(self, consumer: str, partition: int, offset: int, value: bytes) -> None:
        with self.lock:
            self.reads.setdefault(consumer, []).append((partition, offset, value))

    def acked(self) -> list[Attempt]:
        return [a for a in self.attempts.values() if a.offset is not None]

    def check(self, final: dict[int, list[bytes]]) -> dict[str, list]:
        """`final[p]` is partition p's whole log, the value at each offset from 0. Returns
        every anomaly found, by kind (empty lists when the history is clean)."""
        found: dict[str, list] = {k: [] for k in (
            "lost", "duplicate", "duplicate_idempotent", "divergence", "read_uncommitted",
            "non_monotonic", "unknown_value")}
        where: dict[bytes, list[tuple[int, int]]] = {}
        for p, log in final.items():
            for off, v in enumerate(log):
                where.setdefault(v, []).append((p, off))
        for a in self.acked():
            at = where.get(a.value, [])
            if (a.partition, a.offset) not in at:
                found["lost"].append((a.partition, a.offset, a.value, at))
        for v, at in where.items():
            a = self.attempts.get(v)
            if a is None:
                found["unknown_value"].append((v, at))
            elif len(at) > 1:
                found["duplicate_idempotent" if a.idempotent else "duplicate"].append((v, at))
        seen: dict[tuple[int, int], bytes] = {}
        for consumer, reads in self.reads.items():
            last: dict[int, int] = {}
            for p, off, v in reads:
                if off <= last.get(p, -1):
                    found["non_monotonic"].append((consumer, p, last[p], off))
                last[p] = off
                prev = seen.setdefault((p, off), v)
                if prev != v:
                    found["divergence"].append((p, off, prev, v))
                log = final.get(p, [])
                if off >= len(log) or log[off] != v:
                    found["read_uncommitted"].append((consumer, p, off, v))
        return found
