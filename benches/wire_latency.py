#!/usr/bin/env python3
"""Split `weir bench consume-tail` latency into the client's part and the broker's part, from a
packet capture of the run (issue 14). Every record the bench sends starts its value with an
8-byte send stamp, so each record can be found again on the wire: in the Produce request that
carries it and in the Fetch response that delivers it.

    weir serve --listen 127.0.0.1:19092 --data-dir D &        # per-core ports 19093, 19094
    tcpdump -i lo -w run.pcap -s 0 'tcp portrange 19092-19094' &
    weir bench consume-tail --bootstrap 127.0.0.1:19092 --client rdkafka --rate 2000 ...
    kill %2; benches/wire_latency.py run.pcap 19092 19093 19094

Prints, per record: created -> Produce on the wire (the client), Produce on the wire -> Fetch
response on the wire (the broker, the device write and the parked fetch's wake-up), and the
runs of records the broker held over 0.5 ms (stalls hit consecutive records). The stamps are
on the bench's own clock, so "created" is aligned to the capture by the smallest gap seen.
Needs tshark (apt-get install tshark).
"""
import re
import subprocess
import sys

STAMP = re.compile(rb"(.{8})a{16}", re.S)  # the bench's values: stamp, then b"a" * (size - 8)


def payloads(pcap):
    out = subprocess.run(
        ["tshark", "-r", pcap, "-Y", "tcp.len>0", "-T", "fields", "-E", "separator=|",
         "-e", "frame.time_epoch", "-e", "tcp.dstport", "-e", "tcp.payload"],
        check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        t, dport, hexdata = line.split("|")
        yield float(t), int(dport), bytes.fromhex(hexdata)


def quantiles(xs):
    xs = sorted(xs)
    q = lambda p: xs[min(len(xs) - 1, int(p * len(xs)))]
    return f"p50 {q(.5):.3f}  p99 {q(.99):.3f}  p999 {q(.999):.3f}  max {xs[-1]:.3f} ms"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    pcap, ports = sys.argv[1], {int(p) for p in sys.argv[2:]}
    produced, fetched = {}, {}
    for t, dport, data in payloads(pcap):
        seen = produced if dport in ports else fetched
        for m in STAMP.finditer(data):
            seen.setdefault(int.from_bytes(m.group(1), "little"), t)
    # A stamp is nanoseconds since the bench started: anything past a day is a false match.
    both = [s for s in produced if s in fetched and 0 < s < 86_400 * 10**9]
    if not both:
        sys.exit("no stamped record found both in a Produce request and a Fetch response")
    offset = min(produced[s] - s / 1e9 for s in both)
    client = [(produced[s] - s / 1e9 - offset) * 1e3 for s in both]
    broker = [(fetched[s] - produced[s]) * 1e3 for s in both]
    print(f"records matched: {len(both)} (in Produce {len(produced)}, in Fetch {len(fetched)})")
    print(f"client  created -> Produce on the wire:        {quantiles(client)}")
    print(f"broker  Produce -> Fetch response on the wire: {quantiles(broker)}")
    slow = sorted(produced[s] for s in both if (fetched[s] - produced[s]) * 1e3 > 0.5)
    runs = []
    for t in slow:
        if runs and t - runs[-1][-1] < 0.02:
            runs[-1].append(t)
        else:
            runs.append([t])
    sizes = sorted((len(r) for r in runs), reverse=True)
    print(f"records over 0.5 ms in the broker: {len(slow)} ({100 * len(slow) / len(both):.2f}%), "
          f"in {len(runs)} runs (records within 20 ms of each other); largest runs {sizes[:10]}")


if __name__ == "__main__":
    main()
