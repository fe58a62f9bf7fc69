"""Java from the Python tests: Maven modules under tests/java/, their class paths, and `java`.

Each directory under tests/java/ is a small Maven project (its own pom.xml: the Kafka artifacts
it needs at pinned versions, and for the JUnit suites its test sources). `classpath("clients")`
compiles that project once (Maven resolves its dependencies from Maven Central into ~/.m2 the
first time, later runs are offline-fast) and returns the class path of its compiled classes and
every dependency; the tests then run `java -cp ...` themselves, against the broker their fixture
started. A project is rebuilt only when its pom.xml or a source file is newer than the last build.

    java_cmd()                     ["/path/to/java"], JAVA_HOME first, then PATH
    classpath(module)              "tests/java/<module>/target/test-classes:...:dep.jar:..."
    run_java(module, main, *args)  subprocess.run of `java -cp <classpath> main args...`
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

JAVA_ROOT = Path(__file__).resolve().parent / "java"
# Kafka's artifacts the Java tests run against: the newest 4.x that resolves from Maven Central.
KAFKA_VERSION = "4.4.0"

_lock = threading.Lock()


def java_cmd() -> list[str]:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return [str(Path(home) / "bin" / "java")]
    found = shutil.which("java")
    assert found, "java is not installed (scripts/test.sh installs a JDK)"
    return [found]


def _newest_input(project: Path) -> float:
    newest = (project / "pom.xml").stat().st_mtime
    src = project / "src"
    if src.is_dir():
        for path in src.rglob("*"):
            if path.is_file():
                newest = max(newest, path.stat().st_mtime)
    return newest


def classpath(module: str, timeout: float = 900.0) -> str:
    """Builds tests/java/<module> if its inputs changed, and returns its full class path."""
    project = JAVA_ROOT / module
    assert (project / "pom.xml").is_file(), f"no Maven project at {project}"
    target = project / "target"
    cp_file = target / "classpath.txt"
    stamp = target / ".built"
    with _lock:
        if not stamp.exists() or stamp.stat().st_mtime < _newest_input(project):
            mvn = shutil.which("mvn")
            assert mvn, "mvn is not installed (scripts/test.sh installs Maven)"
            proc = subprocess.run(
                [mvn, "-q", "-B", "-DskipTests", "test-compile", "dependency:build-classpath",
                 f"-Dmdep.outputFile={cp_file}", "-Dmdep.includeScope=test"],
                cwd=project, capture_output=True, text=True, timeout=timeout)
            assert proc.returncode == 0, (
                f"mvn build of {project} failed (exit {proc.returncode}):\n"
                f"{proc.stdout[-8000:]}\n{proc.stderr[-8000:]}")
            stamp.touch()
    parts = [str(target / "test-classes"), str(target / "classes")]
    parts += [p for p in cp_file.read_text().strip().split(os.pathsep) if p]
    return os.pathsep.join(parts)


def run_java(module: str, main: str, *args: str, timeout: float = 300.0, env: dict | None = None,
             jvm_args: tuple[str, ...] = ("-Xmx512m",), **kwargs) -> subprocess.CompletedProcess:
    """Runs `main` from tests/java/<module>'s class path; output captured as text."""
    cmd = java_cmd() + list(jvm_args) + ["-cp", classpath(module), main, *args]
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, **kwargs)
