"""Records seed frames for the `request_frames` fuzz target: starts weir, puts a TCP proxy in
front of it, drives librdkafka (confluent-kafka) and kafka-python through produce, fetch,
metadata, admin and consumer-group calls, and sarama (tests/go/sarama_scenarios, built with
Go) through the old request versions KIP-896 removed and weir serves (docs/protocol.md, "Older
clients"), and writes every client→broker frame (size prefix stripped) to
fuzz/corpus/request_frames/seed-<api>-v<version>-<sha1> (or to the directory given as the first
argument). Run from the repository root after `cargo build --release`:
python3 fuzz/record_request_frames.py [OUT_DIR]
"""

import hashlib
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT / "fuzz" / "corpus" / "request_frames"
sys.path.insert(0, str(ROOT / "tests"))


def pump(src, dst, record):
    buf = b""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
            if record:
                buf += data
                while len(buf) >= 4:
                    n = int.from_bytes(buf[:4], "big")
                    if len(buf) < 4 + n:
                        break
                    frame, buf = buf[4:4 + n], buf[4 + n:]
                    key, ver = int.from_bytes(frame[:2], "big"), int.from_bytes(frame[2:4], "big")
                    name = f"seed-api{key}-v{ver}-{hashlib.sha1(frame).hexdigest()[:12]}"
                    if len(frame) <= 65536:
                        (OUT / name).write_bytes(frame)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=ROOT / "target"))  # ext4 (O_DIRECT), not tmpfs
    log = open(work / "log", "wb")
    proc = subprocess.Popen([str(ROOT / "target/release/weir"), "serve", "--set", "metrics.listen=off", "--data-dir", str(work / "data"),
                             "--listen", "127.0.0.1:0"], stdout=log, stderr=subprocess.STDOUT)
    try:
        port = None
        for _ in range(300):
            m = re.search(rb"listening on 127\.0\.0\.1:(\d+)", (work / "log").read_bytes())
            if m:
                port = int(m.group(1))
                break
            time.sleep(0.05)
        assert port, "weir did not start"
        lsock = socket.socket()
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(100)
        pport = lsock.getsockname()[1]

        def accept():
            while True:
                c, _ = lsock.accept()
                b = socket.create_connection(("127.0.0.1", port))
                threading.Thread(target=pump, args=(c, b, True), daemon=True).start()
                threading.Thread(target=pump, args=(b, c, False), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
        # Metadata responses advertise the broker's own port: clients reconnect there, so
        # only bootstrap traffic would be seen. Advertise the proxy instead by restarting.
        proc.terminate()
        proc.wait(10)
        proc2 = subprocess.Popen([str(ROOT / "target/release/weir"), "serve", "--set", "metrics.listen=off", "--data-dir", str(work / "data"),
                                  "--listen", f"127.0.0.1:{port}", "--set",
                                  f"advertised.listeners=PLAINTEXT://127.0.0.1:{pport}",
                                  # One port: every client connection goes through the proxy.
                                  "--set", "listeners.per.core=false"],
                                 stdout=log, stderr=subprocess.STDOUT)
        time.sleep(1.0)
        try:
            drive(f"127.0.0.1:{pport}")
        finally:
            proc2.terminate()
            try:
                proc2.wait(10)
            except subprocess.TimeoutExpired:
                proc2.kill()
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"{len(list(OUT.iterdir()))} frames in {OUT}")


def drive(bootstrap):
    from confluent_kafka import Consumer, TopicPartition
    from clients import (Msg, kp_consume, kp_produce, kp_producer, rd_admin, rd_consume, rd_create_topic,
                         rd_produce, rd_producer, rd_topic_configs)
    rd_create_topic(bootstrap, "seeds", 2, config={"retention.ms": "3600000"})
    msgs = [Msg(b"k%d" % i, b"v" * i, (("h", b"x"),), None, i % 2) for i in range(20)]
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        rd_produce(rd_producer(bootstrap, acks="all", **{"compression.type": codec}), "seeds", msgs[:4])
    rd_produce(rd_producer(bootstrap, acks=1), "seeds", msgs)
    kp_produce(kp_producer(bootstrap), "seeds", msgs[:5])
    rd_consume(bootstrap, "seeds", [0, 1], 10, extra_wait=0)
    kp_consume(bootstrap, "seeds", [0], 5, extra_wait=0)
    rd_topic_configs(bootstrap, "seeds")
    admin = rd_admin(bootstrap)
    admin.delete_topics(["seeds-none"], operation_timeout=5, request_timeout=10)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "seed-group", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "broker.address.family": "v4"})
    c.subscribe(["seeds"])
    got = 0
    deadline = time.monotonic() + 20
    while got < 5 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got += 1
            c.commit(message=m, asynchronous=False)
    c.committed([TopicPartition("seeds", 0)], timeout=5)
    c.close()
    try:
        admin.list_consumer_groups(request_timeout=5).result(5)
        admin.describe_consumer_groups(["seed-group"], request_timeout=5)["seed-group"].result(5)
        admin.delete_consumer_groups(["seed-group"], request_timeout=5)["seed-group"].result(5)
    except Exception as e:  # noqa: BLE001 — seeds only; an error reply is fine
        print("admin group calls:", e)
    # sarama in its old modes: ListOffsets v0, CreateTopics v0-1, DeleteTopics v0,
    # DescribeConfigs v0, OffsetCommit v0-1, OffsetFetch v0.
    from conftest import go_build
    sarama = go_build(ROOT / "tests" / "go" / "sarama_scenarios", "sarama_scenarios")
    for args in (["old", "-topic", "seeds-old", "-group", "seeds-old-group"], ["list0", "-topic", "seeds"]):
        r = subprocess.run([str(sarama), *args, "-brokers", bootstrap], capture_output=True, text=True, timeout=120)
        print(f"sarama {args[0]}: exit {r.returncode}", r.stdout.strip()[-200:])


if __name__ == "__main__":
    main()
