"""The previous release of weir, built from source, for the rolling upgrade test
(test_cluster_rolling_restart.py with `WEIR_UPGRADE=1`; docs/operations.md, "Upgrade").

The previous release is the main commit named in scripts/previous-release (the last one that
landed: its CI passed), or `WEIR_UPGRADE_FROM` (any commit), or a binary given as
`WEIR_PREVIOUS_BIN`. It is checked out as a git worktree under target/previous/src and built
with `cargo build --release` into target/previous (default features: what a user's first
command builds); a later run reuses the binary while the commit is the same. The build takes
several minutes on a 2-core machine, which is why the upgrade test is a long mode.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PREVIOUS_FILE = REPO / "scripts" / "previous-release"
OUT = REPO / "target" / "previous"
BUILD_TIMEOUT_S = 3600


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


def previous_commit() -> str:
    """The full hash of the previous release's commit."""
    named = os.environ.get("WEIR_UPGRADE_FROM") or PREVIOUS_FILE.read_text().split()[0]
    return _git("rev-parse", f"{named}^{{commit}}")


def previous_binary() -> tuple[Path, str]:
    """(the previous release's weir binary, its commit), built if needed."""
    explicit = os.environ.get("WEIR_PREVIOUS_BIN")
    if explicit:
        path = Path(explicit)
        assert path.is_file(), f"WEIR_PREVIOUS_BIN={explicit} is not a file"
        return path, "(given as WEIR_PREVIOUS_BIN)"
    commit = previous_commit()
    binary = OUT / "release" / "weir"
    stamp = OUT / "built-from"
    if binary.is_file() and stamp.is_file() and stamp.read_text().strip() == commit:
        return binary, commit
    src = OUT / "src"
    if src.exists():
        subprocess.run(["git", "worktree", "remove", "--force", str(src)], cwd=REPO, capture_output=True)
        shutil.rmtree(src, ignore_errors=True)
        _git("worktree", "prune")
    OUT.mkdir(parents=True, exist_ok=True)
    _git("worktree", "add", "--detach", str(src), commit)
    proc = subprocess.run(["cargo", "build", "--release", "--target-dir", str(OUT)], cwd=src,
                          capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    assert proc.returncode == 0, f"building the previous release {commit}:\n{proc.stderr[-4000:]}"
    assert binary.is_file(), f"no {binary} after building {commit}"
    stamp.write_text(commit + "\n")
    return binary, commit
