"""Running weir as a service: without io_uring (here: a seccomp filter that makes
io_uring_setup fail with EPERM, as Docker's default profile does) weir exits with a message
saying what to change, not a panic; the systemd unit example is well-formed."""

from __future__ import annotations

import configparser
import ctypes
import os
import struct
import subprocess
from pathlib import Path

from conftest import REPO, WEIR_BIN

SYS_IO_URING_SETUP = 425  # the same number on every architecture (the generic syscall table)
EPERM = 1


def deny_io_uring():
    """preexec_fn: install a seccomp filter failing io_uring_setup with EPERM (this process only)."""
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
    BPF_LD_W_ABS, BPF_JEQ_K, BPF_RET_K = 0x20, 0x15, 0x06
    SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
    insns = [
        (BPF_LD_W_ABS, 0, 0, 0),                     # A = seccomp_data.nr
        (BPF_JEQ_K, 0, 1, SYS_IO_URING_SETUP),       # if A == io_uring_setup: next, else skip 1
        (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
    code = b"".join(struct.pack("HBBI", *i) for i in insns)
    buf = ctypes.create_string_buffer(code, len(code))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = SockFprog(len(insns), ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")


def test_without_io_uring_weir_says_why_and_exits(tmp_path):
    p = subprocess.run([str(WEIR_BIN), "serve", "--listen", "127.0.0.1:0"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=30, preexec_fn=deny_io_uring)
    assert p.returncode == 1, p.stderr[-3000:]
    assert "io_uring is unavailable" in p.stderr and "seccomp" in p.stderr, p.stderr[-3000:]
    assert "panicked" not in p.stderr, p.stderr[-3000:]
    assert not (tmp_path / "data").exists(), "nothing is created before the check"


def test_the_same_binary_starts_without_the_filter(broker):
    """The filter above is what fails the start: without it the broker runs."""
    assert broker.port


def test_systemd_unit_example():
    unit = REPO / "deploy" / "weir.service"
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str
    cp.read(unit)
    service = cp["Service"]
    assert service["ExecStart"].split()[0].endswith("weir") and " serve" in service["ExecStart"]
    assert service["LimitMEMLOCK"] in ("infinity",) or int(service["LimitMEMLOCK"]) > 0
    assert int(service["LimitNOFILE"]) >= 65536
    # Hardening must not block io_uring (SystemCallFilter=@system-service denies it on some
    # systemd versions; MemoryDenyWriteExecute is harmless).
    assert "SystemCallFilter" not in service or "io_uring" in service["SystemCallFilter"]
    assert cp["Install"]["WantedBy"] == "multi-user.target"
    # Every setting the unit sets through the environment is a real one.
    envs = [v for k, v in service.items() if k == "Environment"]
    for line in " ".join(envs).split():
        name = line.strip('"').split("=", 1)[0]
        assert name.startswith("WEIR_"), name
        src = (REPO / "src" / "config" / "mod.rs").read_text()
        setting = name[len("WEIR_"):].lower().replace("_", ".")
        assert f'"{setting}"' in src, f"{name}: no setting {setting}"
