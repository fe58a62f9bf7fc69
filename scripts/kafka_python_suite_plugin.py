"""pytest plugin for scripts/kafka-python-suite.sh: applies scripts/kafka-python-suite.list to
kafka-python's test/integration and prints the counts.

Each list entry names a test node id (or a prefix of ids: a file, a class, a test without its
parameters). `na` entries are deselected, and shown with their reason; `fail` entries run as
strict xfail, so a known failure that starts passing fails the run (the list must then be
updated). A kind may be limited to one of weir's listener modes (`na@per-core`), the mode
of this run being $WEIR_KAFKA_PYTHON_MODE. An entry that matches no collected test is an
error: the list would be stale. The node ids of each outcome are written as JSON to
$WEIR_KAFKA_PYTHON_RESULT, for the script's rerun and counts.
"""

from __future__ import annotations

import json
import os

import pytest

_entries: list[tuple[str, str, str]] = []  # (kind, node id prefix, reason)
_used: set[str] = set()
_not_applicable: list[str] = []  # node ids deselected by an `na` entry


def _load(path: str) -> None:
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 2)
            kind, _, mode = parts[0].partition("@")
            if len(parts) != 3 or kind not in ("na", "fail") or mode not in ("", "per-core", "single"):
                raise pytest.UsageError(f"{path}:{n}: expected 'na|fail[@MODE] NODEID REASON'")
            if mode in ("", os.environ.get("WEIR_KAFKA_PYTHON_MODE", "per-core")):
                _entries.append((kind, parts[1], parts[2]))


def _entry(nodeid: str):
    for kind, prefix, reason in _entries:
        if nodeid == prefix or nodeid.startswith((prefix + "::", prefix + "[")):
            _used.add(prefix)
            return kind, reason
    return None


def pytest_configure(config):
    _load(os.environ["WEIR_KAFKA_PYTHON_LIST"])


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    keep, dropped = [], []
    for item in items:
        e = _entry(item.nodeid)
        if e is None:
            keep.append(item)
        elif e[0] == "na":
            dropped.append(item)
        else:
            item.add_marker(pytest.mark.xfail(reason=e[1], strict=True))
            keep.append(item)
    if dropped:
        _not_applicable.extend(i.nodeid for i in dropped)
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep
    # Only a whole-suite run can tell a stale entry (a run narrowed with -k or node ids
    # collects a part).
    if not config.getoption("keyword") and config.args == ["test/integration"]:
        stale = [p for _, p, _ in _entries if p not in _used]
        if stale:
            raise pytest.UsageError(f"kafka-python-suite.list entries match no test: {stale}")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    stats = terminalreporter.stats
    n = {k: len(stats.get(k, [])) for k in
         ("passed", "failed", "error", "xfailed", "xpassed", "skipped")}
    n["deselected"] = len(_not_applicable)
    tr = terminalreporter
    if n["deselected"]:
        tr.section("not applicable (deselected)")
        for kind, prefix, reason in _entries:
            if kind == "na" and prefix in _used:
                tr.line(f"{prefix}: {reason}")
    if n["xfailed"]:
        tr.section("known failures")
        for rep in stats.get("xfailed", []):
            tr.line(f"{rep.nodeid}: {rep.wasxfail}")
    outcome = {k: list(dict.fromkeys(r.nodeid for r in stats.get(k, [])))
               for k in ("passed", "failed", "error", "xfailed", "xpassed", "skipped")}
    outcome["deselected"] = _not_applicable
    if os.environ.get("WEIR_KAFKA_PYTHON_RESULT"):
        with open(os.environ["WEIR_KAFKA_PYTHON_RESULT"], "w", encoding="utf-8") as f:
            json.dump(outcome, f)
    tr.line(
        f"kafka-python suite: {n['passed']} passed, {n['failed'] + n['error'] + n['xpassed']} "
        f"failed, {n['xfailed']} known failures, {n['deselected']} not applicable, "
        f"{n['skipped']} skipped"
    )
