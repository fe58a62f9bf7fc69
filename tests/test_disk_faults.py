"""Disk faults on real block devices: a full filesystem (ENOSPC) and a failing one (EIO).

Each test builds a small ext4 filesystem on a loop device (`truncate` an image file, `losetup`,
`mkfs.ext4`, `mount`) and puts weir's data on it. Needs root (the CI machines run as root) and
installs e2fsprogs / util-linux / mount with apt-get when missing; a machine without loop devices
fails these tests loudly rather than skipping them. Every mount and loop device is undone in a
`finally`, whatever happened.

How the faults are made:
- ENOSPC: the data dir is a tiny filesystem that a producer fills. Space is then freed by
  deleting a topic through the broker, or by deleting someone else's file on the same disk
  (online `resize2fs` of the loop device is refused with EPERM in this VM).
- EIO: one partition's directory is its own filesystem (a loop mount on `data/<topic>-<p>`);
  `FS_IOC_SHUTDOWN` (the ioctl behind `xfs_io -c shutdown`, which ext4 implements) makes every
  later read and write on that filesystem fail with EIO, exactly as a dead disk would, while the
  other partitions' files, on the main disk, keep working. (device-mapper's `error` and `flakey`
  targets would be the other way, but this kernel has no device-mapper driver:
  /dev/mapper/control is missing and there is no modprobe.)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, TopicPartition

from clients import Msg, rd_admin, rd_consumer, rd_create_topic, rd_produce, rd_producer
from conftest import TMP_ROOT, Broker

FS_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_NOLOGFLUSH = 2


def run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=60)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def ensure_tools() -> None:
    missing = [t for t in ("losetup", "mkfs.ext4", "resize2fs", "mount", "umount") if shutil.which(t) is None]
    if missing:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=True, timeout=300)
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "e2fsprogs", "mount",
                        "util-linux"], env=env, check=True, timeout=300)
    assert os.geteuid() == 0, "disk fault tests need root (losetup, mount)"


class LoopFs:
    """An ext4 filesystem on a loop device, mounted at `mountpoint`."""

    def __init__(self, image: Path, mountpoint: Path, size_mb: int):
        self.image, self.mountpoint, self.dev = image, mountpoint, None
        with open(image, "wb") as f:
            f.truncate(size_mb << 20)
        self.dev = run("losetup", "-f", "--show", str(image)).stdout.strip()
        # No reserved blocks (-m 0) and no lazy init: the free space is what df says, at once.
        run("mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard", self.dev)
        mountpoint.mkdir(parents=True, exist_ok=True)
        run("mount", "-t", "ext4", self.dev, str(mountpoint))

    def free_bytes(self) -> int:
        st = os.statvfs(self.mountpoint)
        return st.f_bavail * st.f_frsize

    def grow(self, size_mb: int) -> None:
        with open(self.image, "r+b") as f:
            f.truncate(size_mb << 20)
        run("losetup", "-c", self.dev)
        run("resize2fs", self.dev)

    def shutdown(self) -> None:
        """Every later I/O on this filesystem fails with EIO (ext4's FS_IOC_SHUTDOWN)."""
        fd = os.open(self.mountpoint, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.ioctl(fd, FS_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
        finally:
            os.close(fd)

    def close(self) -> None:
        if self.dev is None:
            return
        if run("umount", str(self.mountpoint), check=False).returncode != 0:
            run("umount", "-l", str(self.mountpoint), check=False)
        run("losetup", "-d", self.dev, check=False)
        self.dev = None


@pytest.fixture
def loopfs(request):
    """loopfs(mountpoint, size_mb) -> LoopFs; all unmounted and detached at teardown."""
    ensure_tools()
    made: list[LoopFs] = []
    images = Path(tempfile.mkdtemp(prefix="loopimg-", dir=TMP_ROOT))

    def make(mountpoint: Path, size_mb: int) -> LoopFs:
        fs = LoopFs(images / f"fs{len(made)}.img", mountpoint, size_mb)
        made.append(fs)
        return fs

    try:
        yield make
    finally:
        # Brokers first (they hold files open), then filesystems, then images.
        for b in getattr(request.node, "_weir_brokers", []):
            b._kill()
        for fs in reversed(made):
            fs.close()
        shutil.rmtree(images, ignore_errors=True)


@pytest.fixture
def manual_broker(request):
    """A Broker whose data dir the test prepares before starting it."""
    brokers: list[Broker] = []
    request.node._weir_brokers = brokers

    def make(settings: dict | None = None) -> Broker:
        TMP_ROOT.mkdir(parents=True, exist_ok=True)
        b = Broker(Path(tempfile.mkdtemp(prefix=f"{request.node.name[:40]}-", dir=TMP_ROOT)),
                   {k: str(v) for k, v in (settings or {}).items()})
        brokers.append(b)
        return b

    yield make
    errors = []
    for b in brokers:
        if b.proc is not None and b.proc.poll() is not None and not b._stopped:
            errors.append(f"weir died during the test with code {b.proc.returncode}\n{b.log_tail()}")
        b.close()
        if not errors and not getattr(request.node, "_weir_failed", False):
            shutil.rmtree(b.workdir, ignore_errors=True)
    if errors:
        pytest.fail("\n".join(errors), pytrace=False)


def produce_codes(bootstrap: str, topic: str, partition: int, n: int, size: int, acks: str = "all") -> list:
    """Produces n records one batch at a time, without retries; returns each delivery's error code
    (KafkaError.NO_ERROR when it was acknowledged)."""
    p = rd_producer(bootstrap, acks=acks, retries=0, **{"linger.ms": 0, "message.timeout.ms": 15000,
                                                        "batch.num.messages": 1})
    codes = []
    for i in range(n):
        p.produce(topic, value=os.urandom(size // 2).hex().encode(), partition=partition,
                  on_delivery=lambda err, msg: codes.append(KafkaError.NO_ERROR if err is None else err.code()))
        p.flush(15)
    assert len(codes) == n, f"{n - len(codes)} deliveries never reported"
    return codes


def read_back(bootstrap: str, topic: str, partition: int, n: int) -> list:
    c = rd_consumer(bootstrap)
    out = []
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + 20
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                out.append(m.error().code())
                break
            out.append(m.offset())
    finally:
        c.close()
    return out


def read_all(bootstrap: str, topic: str, partition: int) -> list:
    c = rd_consumer(bootstrap)
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
    finally:
        c.close()
    return read_back(bootstrap, topic, partition, high)


def log_count(broker: Broker, needle: str) -> int:
    return broker.log_path.read_text(errors="replace").count(needle)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("free_by", ["delete_topic", "remove_other_file"])
def test_full_disk_refuses_produce_then_recovers(manual_broker, loopfs, free_by):
    broker = manual_broker({"log.segment.bytes": 4 << 20})
    fs = loopfs(broker.data_dir, 128)
    ballast = broker.data_dir / "operator-ballast"  # someone else's file on the same disk
    ballast.write_bytes(b"\0" * (24 << 20))
    broker.start()
    rd_create_topic(broker.bootstrap, "keep", 1)
    rd_create_topic(broker.bootstrap, "filler", 1)
    assert produce_codes(broker.bootstrap, "keep", 0, 5, 1000) == [KafkaError.NO_ERROR] * 5

    # Fill the filesystem through the broker until a produce is refused.
    codes: list = []
    deadline = time.monotonic() + 120
    while KafkaError.NO_ERROR in codes[-1:] or not codes:
        assert time.monotonic() < deadline, f"the disk never filled: {fs.free_bytes()} bytes free"
        codes += produce_codes(broker.bootstrap, "filler", 0, 20, 256 << 10)
    errors = {c for c in codes if c != KafkaError.NO_ERROR}
    assert errors == {KafkaError.KAFKA_STORAGE_ERROR}, f"a full disk answered {errors}, want KAFKA_STORAGE_ERROR"
    broker.check_alive()
    # Another partition may still have preallocated room; either way a clear answer, no crash,
    # and its data is still served.
    assert set(produce_codes(broker.bootstrap, "keep", 0, 3, 256 << 10)) <= {KafkaError.NO_ERROR,
                                                                           KafkaError.KAFKA_STORAGE_ERROR}
    broker.check_alive()
    assert read_back(broker.bootstrap, "keep", 0, 5) == [0, 1, 2, 3, 4]
    md = rd_admin(broker.bootstrap).list_topics(timeout=10)
    assert {"keep", "filler"} <= set(md.topics)

    if free_by == "delete_topic":
        admin = rd_admin(broker.bootstrap)
        admin.delete_topics(["filler"], operation_timeout=10, request_timeout=30)["filler"].result(30)
    else:
        # (Growing the filesystem with resize2fs would be the other way, but online resize is
        # refused here with EPERM, so the operator deletes a file instead.)
        ballast.unlink()
    deadline = time.monotonic() + 30
    while fs.free_bytes() < (16 << 20):
        assert time.monotonic() < deadline, f"space not freed: {fs.free_bytes()} bytes free"
        time.sleep(0.2)

    # Produce works again, at the next offset: the refused batches left no trace.
    codes = produce_codes(broker.bootstrap, "keep", 0, 5, 1000)
    assert codes == [KafkaError.NO_ERROR] * 5, f"produce after space was freed: {codes}"
    keep_end = read_all(broker.bootstrap, "keep", 0)
    assert keep_end == list(range(len(keep_end))) and len(keep_end) >= 10, keep_end
    broker.check_alive()
    broker.stop()
    # And the log written around the full disk reopens cleanly.
    broker.start()
    assert read_all(broker.bootstrap, "keep", 0) == keep_end


@pytest.mark.timeout(180)
def test_eio_on_one_partition(manual_broker, loopfs):
    topic = "eio"
    broker = manual_broker({"num.partitions": 2})
    broker.start()
    rd_create_topic(broker.bootstrap, topic, 2)
    for p in (0, 1):
        assert produce_codes(broker.bootstrap, topic, p, 3, 1000) == [KafkaError.NO_ERROR] * 3
    broker.stop()

    # Partition 1's directory becomes its own filesystem, with the same files in it.
    pdir = broker.data_dir / f"{topic}-1"
    saved = broker.workdir / "saved-p1"
    shutil.move(pdir, saved)
    fs = loopfs(pdir, 160)
    for f in saved.iterdir():
        shutil.copy2(f, pdir / f.name)
    os.sync()
    broker.start()
    assert read_back(broker.bootstrap, topic, 1, 3) == [0, 1, 2]
    assert produce_codes(broker.bootstrap, topic, 1, 2, 1000) == [KafkaError.NO_ERROR] * 2

    fs.shutdown()  # the "disk" under partition 1 dies
    before_warnings = log_count(broker, " WARN ")

    codes = produce_codes(broker.bootstrap, topic, 1, 10, 1000)
    assert set(codes) == {KafkaError.KAFKA_STORAGE_ERROR}, f"produce to the failed partition: {codes}"
    # Partition 0 is on the healthy disk: produce and fetch keep working.
    assert produce_codes(broker.bootstrap, topic, 0, 5, 1000) == [KafkaError.NO_ERROR] * 5
    assert read_back(broker.bootstrap, topic, 0, 8) == list(range(8))
    broker.check_alive()
    # Fetching the failed partition gives an error, not garbage and not a hang.
    got = read_back(broker.bootstrap, topic, 1, 6)
    assert all(isinstance(x, int) for x in got)
    broker.check_alive()

    warnings = log_count(broker, " WARN ") - before_warnings
    print(f"warnings logged for 10 failed produces and one fetch: {warnings}")
    assert warnings >= 1, "the I/O error was not logged"
    # Logged once for the partition, not once per failed request.
    assert log_count(broker, "disk error on this partition") == 1, broker.log_tail()
    assert broker.alive()


def fill_disk(path: Path) -> None:
    """Writes `path` until the filesystem refuses with ENOSPC."""
    with open(path, "wb") as f:
        chunk = b"\0" * (1 << 20)
        while True:
            try:
                f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
            except OSError as e:
                assert e.errno == 28, e
                break
    # Whatever is left (less than a chunk) goes too.
    with open(path, "ab") as f:
        for size in (64 << 10, 4096):
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * size)
                    f.flush()
                    os.fsync(f.fileno())


@pytest.mark.timeout(240)
def test_restart_on_a_full_disk_keeps_data_and_group_offsets(manual_broker, loopfs):
    """The disk filled while the broker was down: it still starts, serves every record and every
    committed group offset, refuses produces with KAFKA_STORAGE_ERROR, and takes them again once
    space is freed."""
    broker = manual_broker({"log.segment.bytes": 4 << 20})
    fs = loopfs(broker.data_dir, 96)
    broker.start()
    rd_create_topic(broker.bootstrap, "t", 1)
    assert produce_codes(broker.bootstrap, "t", 0, 10, 1000) == [KafkaError.NO_ERROR] * 10
    c = rd_consumer(broker.bootstrap, **{"group.id": "g-full", "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition("t", 0, 7)], asynchronous=False)
    finally:
        c.close()
    broker.stop()

    ballast = broker.data_dir / "operator-ballast"
    fill_disk(ballast)
    assert fs.free_bytes() < (1 << 20), fs.free_bytes()
    broker.start()
    broker.check_alive()
    assert read_all(broker.bootstrap, "t", 0) == list(range(10))
    c = rd_consumer(broker.bootstrap, **{"group.id": "g-full", "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition("t", 0)], timeout=20)
    finally:
        c.close()
    assert [(tp.offset, tp.error) for tp in got] == [(7, None)], "the committed offset survives a full disk"
    codes = produce_codes(broker.bootstrap, "t", 0, 20, 64 << 10)
    assert KafkaError.KAFKA_STORAGE_ERROR in codes and set(codes) <= {KafkaError.NO_ERROR,
                                                                    KafkaError.KAFKA_STORAGE_ERROR}, codes
    broker.check_alive()

    ballast.unlink()
    codes = produce_codes(broker.bootstrap, "t", 0, 3, 1000)
    assert codes == [KafkaError.NO_ERROR] * 3, f"produce after space was freed: {codes}"
    end = read_all(broker.bootstrap, "t", 0)
    assert end == list(range(len(end))) and len(end) >= 13, end
