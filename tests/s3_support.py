"""A real S3 server for the tiered-storage tests: versitygw (the Versity S3 Gateway, Apache-2.0)
with its posix backend, built from the Go module proxy and run on 127.0.0.1.

    with S3Server(tmp_path / "s3") as s3:     # builds once, starts, waits until it answers
        s3.create_bucket("weir-tier")
        s3.endpoint, s3.access_key, s3.secret_key, s3.region   # for the client under test
        s3.list_objects("weir-tier", "t-0/")  # [(key, size), ...], every page
        s3.stop(); s3.start()                 # the store going away (SIGTERM) and coming back
        s3.kill(); s3.start()                 # ... or dying (SIGKILL): same port, same data

What it runs: `versitygw --port 127.0.0.1:PORT --access A --secret S --region us-east-1
posix ROOT`, ROOT = workdir/root; its stdout and stderr (a startup banner, then one line per
request: time, status, latency, method, path, query) go to workdir/versitygw.log, whose tail
`log_tail()` gives for a failure report.

Building: tests/go/s3_server/go.mod pins github.com/versity/versitygw v1.8.0 (a `tool`
directive; go.sum is complete, `go mod tidy` is clean) and `build()` runs
`go build -o tests/go/.bin/versitygw-<hash> -ldflags=-X=main.Version=v1.8.0
github.com/versity/versitygw/cmd/versitygw` in that module with conftest's go_env()
(-mod=readonly, no VCS stamping, no cgo): upstream's own main package, nothing of ours. The
binary's name carries a hash of go.mod, go.sum and those arguments, so it is built when missing
or when the pin changed, never otherwise. It is built when this module is imported,
i.e. while pytest collects, outside every test's deadline: the first build compiles about 370
packages (~3 minutes on 2 cores, ~150 MB of module zips from the proxy into Go's module cache);
with Go's caches warm it takes ~5 s, and with the binary there nothing at all.

Things to know about versitygw (found by running it):
* No IAM setup is needed: --access/--secret define the root account, which may do everything;
  without an --iam-dir (or another IAM backend) it runs in single-account mode.
* The posix backend: each directory under ROOT is a bucket, and an object `a/b/c` is the file
  ROOT/bucket/a/b/c (parent directories are made on PUT and removed when they empty). So, unlike
  S3, keys `a` and `a/b` cannot both exist (409 ObjectParentIsFile / ExistingObjectIsDirectory).
  Object metadata (ETag, content type, checksums) lives in user.* extended attributes (ext4 has
  them; versitygw refuses to start on a filesystem without). Multipart uploads in progress live
  in ROOT/bucket/.sgwtmp/ (and lock files in ROOT/.vgwlocks/): never listed as objects.
* Bucket names are checked as S3 does: 3-63 characters, lower case (so "b" is refused, 400).
* Signatures: SigV4 in the Authorization header (path-style; virtual-host style only with
  --virtual-domain), presigned URLs, UNSIGNED-PAYLOAD, and aws-chunked bodies
  (STREAMING-AWS4-HMAC-SHA256-PAYLOAD, every chunk signature checked). A wrong secret is 403
  SignatureDoesNotMatch; a body that does not match x-amz-content-sha256 is 400
  XAmzContentSHA256Mismatch; a request dated more than 15 minutes off is 403
  RequestTimeTooSkewed.
* ETag: the quoted hex MD5 of the body; after CompleteMultipartUpload "<md5 of the parts'
  MD5s>-N", as S3. Content-MD5 is checked (400 BadDigest), so is x-amz-checksum-* (it stores a
  CRC64NVME checksum of every object by default).
* Multipart uploads (5 MiB minimum for every part but the last, 400 EntityTooSmall at Complete,
  10,000 parts), ranged GETs (206 with Content-Range; `bytes=-N` suffixes; a range past the end is
  cut, one starting past it is 416 InvalidRange), conditional PUT (If-None-Match: * -> 412),
  DeleteObjects (POST ?delete, with Content-MD5), ListObjectsV2 (sorted; max-keys, continuation
  tokens, delimiter), ListMultipartUploads, AbortMultipartUpload. DELETE of a missing key is 204.
* Largest single PUT: 5 GiB (400 EntityTooLarge above), as S3.
* SIGTERM: it logs "shutting down" and exits 0 at once.

This module's own client signs with SigV4 using only the standard library, path-style, so these
checks never depend on weir's S3 client (object_store).
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import http.client
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from conftest import REPO, go_env

MODULE = REPO / "tests" / "go" / "s3_server"
BIN_DIR = REPO / "tests" / "go" / ".bin"
PACKAGE = "github.com/versity/versitygw/cmd/versitygw"
BUILD_TIMEOUT_S = 900.0  # the first build: ~3 minutes of compiling on 2 cores, more under load

ACCESS_KEY = "weir-test-access"
SECRET_KEY = "weir-test-secret-key-0123456789"
REGION = "us-east-1"

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 30.0
LOG_TAIL_BYTES = 16 * 1024


class S3ServerError(AssertionError):
    pass


# -- the binary ------------------------------------------------------------------------------------


def _build_args() -> list[str]:
    """`go build` less its -o: upstream's main package, with the version go.mod pins stamped in
    for the banner versitygw prints at start (as upstream's Makefile does)."""
    version = re.search(r"github\.com/versity/versitygw (v\S+)", (MODULE / "go.mod").read_text()).group(1)
    return ["build", f"-ldflags=-X=main.Version={version}", PACKAGE]


def binary_path() -> Path:
    """tests/go/.bin/versitygw-<hash of go.mod, go.sum and the build arguments>: a new pin or a
    new recipe is a new name."""
    digest = hashlib.sha256((MODULE / "go.mod").read_bytes() + (MODULE / "go.sum").read_bytes()
                            + " ".join(_build_args()).encode())
    return BIN_DIR / f"versitygw-{digest.hexdigest()[:12]}"


def build() -> Path:
    """The versitygw binary, built first if missing (into a temporary name, then renamed: a
    build cut short leaves nothing that looks done). Older builds are removed."""
    out = binary_path()
    if out.is_file():
        return out
    go = shutil.which("go")
    assert go, f"the Go toolchain (`go`) is needed to build versitygw from {MODULE}"
    BIN_DIR.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")
    args = _build_args()
    try:
        proc = subprocess.run([go, args[0], "-o", str(tmp), *args[1:]], cwd=MODULE, env=go_env(),
                              capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        if proc.returncode != 0:
            raise S3ServerError(f"go {' '.join(args)} in {MODULE}: exit {proc.returncode}\n"
                                f"{proc.stdout}\n{proc.stderr}")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    for old in BIN_DIR.glob("versitygw*"):
        if old != out and ".tmp" not in old.name:
            old.unlink(missing_ok=True)
    return out


# Built while pytest collects the tests that import this module, not inside the first test's
# deadline (conftest gives every test 180 s; a first build takes about that long).
build()


# -- the server ------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Error(Exception):
    """A non-2xx answer: `status` and the S3 error `code` ("NoSuchKey", ...) of its XML body."""

    def __init__(self, status: int, body: bytes):
        try:
            code = ET.fromstring(body).findtext("Code") or ""
        except ET.ParseError:
            code = ""
        super().__init__(f"S3 answered {status} {code}: {body[:500]!r}")
        self.status = status
        self.code = code
        self.body = body


@dataclass
class Response:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes


class S3Server:
    """One versitygw process at a time on one port and one directory; restarts keep both."""

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.root = self.workdir / "root"  # the posix backend's top directory: one dir per bucket
        self.root.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / "versitygw.log"
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.access_key, self.secret_key, self.region = ACCESS_KEY, SECRET_KEY, REGION
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self._stopped = False  # True once we stopped or killed it on purpose

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> "S3Server":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        died = self.proc is not None and self.proc.poll() is not None and not self._stopped
        self.kill()
        if died and exc_type is None:
            raise S3ServerError(f"versitygw died during the test with code {self.proc.returncode}\n"
                                f"{self.log_tail()}")

    def command(self) -> list[str]:
        return [str(build()), "--port", f"127.0.0.1:{self.port}", "--access", self.access_key,
                "--secret", self.secret_key, "--region", self.region, "posix", str(self.root)]

    def start(self) -> "S3Server":
        """Starts versitygw (again: same port, same directory) and waits until it answers a
        signed ListBuckets."""
        assert not self.alive(), "versitygw already running"
        self.starts += 1
        self._stopped = False
        cmd = self.command()
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts}: {' '.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.workdir)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if self.request("GET", "/").status == 200:
                    return self
            except (OSError, http.client.HTTPException):
                pass
            if self.proc.poll() is not None:
                self._stopped = True  # reported here, not again on exit
                raise S3ServerError(f"versitygw exited with code {self.proc.returncode} at start\n"
                                    f"{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise S3ServerError(f"versitygw did not answer within {START_TIMEOUT_S}s\n{self.log_tail()}")
            time.sleep(0.05)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """The store goes away cleanly: SIGTERM, and it must exit 0 within `timeout`."""
        if not self.alive():
            return
        self._stopped = True
        self.proc.terminate()
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise S3ServerError(f"versitygw did not exit within {timeout}s of SIGTERM (killed it)\n"
                                f"{self.log_tail()}")
        self._note(f"exited with code {code} after SIGTERM")
        if code != 0:
            raise S3ServerError(f"versitygw exited with code {code} after SIGTERM\n{self.log_tail()}")

    def kill(self) -> None:
        """The store dies: SIGKILL, no chance to finish anything."""
        self._stopped = True
        if self.alive():
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT_S)
            self._note("killed with SIGKILL")

    close = kill

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _note(self, what: str) -> None:
        with open(self.log_path, "ab") as log:
            log.write(f"===== {what}\n".encode())

    def log_tail(self, limit: int = LOG_TAIL_BYTES) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - limit))
                text = f.read().decode("utf-8", "replace")
        except OSError as e:
            return f"(no versitygw log: {e})"
        cut = "(...)\n" if size > limit else ""
        return f"--- versitygw log {self.log_path} ---\n{cut}{text}--- end of versitygw log ---"

    # -- S3 calls, signed with SigV4, path-style ---------------------------------------------------

    def request(self, method: str, path: str, query: dict[str, str] | None = None, body: bytes = b"",
                headers: dict[str, str] | None = None, secret: str | None = None) -> Response:
        """One signed request; `path` is "/bucket/key" unencoded, `secret` overrides the secret
        key the signature is made with. Returns whatever the server answered."""
        now = datetime.datetime.now(datetime.timezone.utc)
        amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        payload_hash = hashlib.sha256(body).hexdigest()
        hdrs = {"host": f"127.0.0.1:{self.port}", "x-amz-date": amz_date, "x-amz-content-sha256": payload_hash}
        hdrs.update({k.lower(): str(v).strip() for k, v in (headers or {}).items()})
        canonical_path = urllib.parse.quote(path, safe="/-_.~")
        canonical_query = "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
                                   for k, v in sorted((query or {}).items()))
        signed = ";".join(sorted(hdrs))
        canonical = "\n".join([method, canonical_path, canonical_query,
                               "".join(f"{k}:{hdrs[k]}\n" for k in sorted(hdrs)), signed, payload_hash])
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        key = ("AWS4" + (secret or self.secret_key)).encode()
        for part in (day, self.region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        hdrs["authorization"] = (f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, "
                                 f"SignedHeaders={signed}, Signature={signature}")
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_TIMEOUT_S)
        try:
            url = canonical_path + (f"?{canonical_query}" if canonical_query else "")
            conn.request(method, url, body=body, headers=hdrs)
            resp = conn.getresponse()
            return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
        finally:
            conn.close()

    def request_ok(self, *args, **kwargs) -> Response:
        """request(), raising S3Error unless the answer is 2xx."""
        resp = self.request(*args, **kwargs)
        if resp.status // 100 != 2:
            raise S3Error(resp.status, resp.body)
        return resp

    def create_bucket(self, bucket: str) -> None:
        self.request_ok("PUT", f"/{bucket}")

    def put_object(self, bucket: str, key: str, data: bytes, headers: dict[str, str] | None = None) -> str:
        """PUT (one request); returns the ETag."""
        return self.request_ok("PUT", f"/{bucket}/{key}", body=data, headers=headers).headers.get("etag", "")

    def get_object(self, bucket: str, key: str, byte_range: tuple[int, int] | None = None) -> bytes:
        """The object, or bytes first..last (inclusive, as HTTP's `Range: bytes=first-last`)."""
        headers = {"Range": f"bytes={byte_range[0]}-{byte_range[1]}"} if byte_range else None
        return self.request_ok("GET", f"/{bucket}/{key}", headers=headers).body

    def delete_object(self, bucket: str, key: str) -> None:
        self.request_ok("DELETE", f"/{bucket}/{key}")

    def multipart_upload(self, bucket: str, key: str, parts: list[bytes]) -> str:
        """Create, UploadPart for each of `parts` (all but the last >= 5 MiB), Complete; returns
        the object's ETag ("...-N")."""
        resp = self.request_ok("POST", f"/{bucket}/{key}", query={"uploads": ""})
        upload_id = ET.fromstring(resp.body).findtext("{*}UploadId")
        etags = [self.request_ok("PUT", f"/{bucket}/{key}", query={"partNumber": str(n), "uploadId": upload_id},
                                 body=part).headers["etag"]
                 for n, part in enumerate(parts, 1)]
        xml = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag></Part>"
                      for n, etag in enumerate(etags, 1))
        resp = self.request_ok("POST", f"/{bucket}/{key}", query={"uploadId": upload_id},
                               body=f"<CompleteMultipartUpload>{xml}</CompleteMultipartUpload>".encode())
        return ET.fromstring(resp.body).findtext("{*}ETag") or ""

    def list_objects(self, bucket: str, prefix: str = "", page_size: int = 1000) -> list[tuple[str, int]]:
        """Every (key, size) under `prefix`, sorted: ListObjectsV2, following continuation tokens."""
        out, token = [], None
        while True:
            query = {"list-type": "2", "prefix": prefix, "max-keys": str(page_size)}
            if token:
                query["continuation-token"] = token
            root = ET.fromstring(self.request_ok("GET", f"/{bucket}", query=query).body)
            out += [(c.findtext("{*}Key"), int(c.findtext("{*}Size"))) for c in root.findall("{*}Contents")]
            token = root.findtext("{*}NextContinuationToken")
            if root.findtext("{*}IsTruncated") != "true" or not token:
                return sorted(out)
