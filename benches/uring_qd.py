#!/usr/bin/env python3
"""Queue depth of direct writes over time, from io_uring tracepoints.

Shows, for each run of the storage benchmark (raw or weir), how many writes were in flight
and for what share of the time, how long fallocates and fsyncs took, and the write latency:
where a run whose CPU is idle loses throughput.

    perf record -e io_uring:io_uring_submit_req -e io_uring:io_uring_complete \\
        -o /tmp/uring.data target/release/deps/log_throughput-<hash> --bench --quick \\
        --rounds 1 --only append_16k,append_1m
    perf script -i /tmp/uring.data -F time,event,trace > /tmp/uring.txt
    python3 benches/uring_qd.py /tmp/uring.txt

A run is the writes between two file opens (each raw run opens its file, each weir run
its segment), in the order the benchmark printed them.
"""
import re
import sys

SUB = re.compile(r"\s*([\d.]+):\s+io_uring:io_uring_submit_req: ring (\S+), req (\S+), "
                 r"user_data \S+, opcode (\S+),")
COM = re.compile(r"\s*([\d.]+):\s+io_uring:io_uring_complete: ring (\S+), req (\S+), "
                 r"user_data \S+, result (-?\d+)")


def main(path):
    pending, ops = {}, []
    for line in open(path):
        m = SUB.match(line)
        if m:
            pending[m[3]] = (float(m[1]), m[4])
            continue
        m = COM.match(line)
        if m and m[3] in pending:
            t0, op = pending.pop(m[3])
            ops.append((t0, float(m[1]), op, int(m[4])))
    # File writes of at least a block; glommio's long-lived internal writes are left out.
    writes = [o for o in ops if o[2] in ("WRITE", "WRITE_FIXED") and o[3] >= 4096
              and o[1] - o[0] < 0.5]
    opens = sorted(o[0] for o in ops if o[2] == "OPENAT") + [float("inf")]
    for a, b in zip(opens, opens[1:]):
        ws = [w for w in writes if a <= w[0] < b]
        if len(ws) < 20:
            continue
        start, end = min(w[0] for w in ws), max(w[1] for w in ws)
        span = end - start
        points = sorted([(w[0], 1) for w in ws] + [(w[1], -1) for w in ws])
        depth, last, area, hist = 0, start, 0.0, {}
        for t, step in points:
            hist[depth] = hist.get(depth, 0.0) + (t - last)
            area += depth * (t - last)
            last, depth = t, depth + step
        lat = sorted(w[1] - w[0] for w in ws)
        other = [o for o in ops if start <= o[0] <= end and o[2] in ("FALLOCATE", "FSYNC")]
        fall = [o for o in other if o[2] == "FALLOCATE"]
        syncs = [o for o in other if o[2] == "FSYNC"]
        shares = " ".join(f"{k}:{v / span * 100:.0f}%" for k, v in sorted(hist.items()))
        print(f"{span * 1000:7.1f} ms {sum(w[3] for w in ws) / span / 1e9:5.2f} GB/s "
              f"writes={len(ws)} avg_in_flight={area / span:4.2f} "
              f"lat_p50={lat[len(lat) // 2] * 1000:.2f}ms "
              f"fallocate x{len(fall)} {sum(o[1] - o[0] for o in fall) * 1000:.1f}ms "
              f"fsync x{len(syncs)} {sum(o[1] - o[0] for o in syncs) * 1000:.1f}ms "
              f"| time at each depth: {shares}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/uring.txt")
