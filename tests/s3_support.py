"""A real S3 server for the tiered-storage tests: versitygw (Versity S3 Gateway, Apache-2.0)
with its posix backend, built from the Go module proxy and run on 127.0.0.1.

    with S3Server(tmp_path / "s3") as s3:
        s3.create_bucket("b")
        s3.list_objects("b", "t-0/")      # [(key, size), ...]
        s3.stop(); s3.start()             # the store going away and coming back, same data

Why versitygw: a complete S3 server (SigV4 and streaming SigV4 uploads, multipart uploads,
ranged GETs, ListObjectsV2 with pagination) that is a single Go binary built from the module
proxy (tests/go/s3_server/go.mod pins v1.8.0 with a `tool` directive). MinIO is AGPL.

Things to know:
* Command line: `versitygw --port 127.0.0.1:P --access A --secret S --region R posix ROOT`.
  Each directory under ROOT is a bucket; an object `a/b/c` is the file `ROOT/bucket/a/b/c`.
  Object metadata (ETag, content type) goes to extended attributes, which ext4 has.
* It needs no IAM directory for the root user given by --access/--secret.
* This module's own client (create/list/get/put/delete) signs with SigV4 using only the
  standard library, path-style, so the checks here do not depend on weir's S3 client.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import http.client
import socket
import subprocess
import time
import urllib.parse
import xml.etree.ElementTree as ET
from pathlib import Path

from conftest import REPO, go_env

MODULE = REPO / "tests" / "go" / "s3_server"
BINARY = REPO / "tests" / "go" / ".bin" / "versitygw"
ACCESS_KEY = "weir-test-access"
SECRET_KEY = "weir-test-secret-key-0123456789"
REGION = "us-east-1"


def build() -> Path:
    """Builds versitygw into tests/go/.bin/ (once; Go caches the modules)."""
    if BINARY.exists() and BINARY.stat().st_mtime >= (MODULE / "go.mod").stat().st_mtime:
        return BINARY
    BINARY.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["go", "build", "-o", str(BINARY), "github.com/versity/versitygw/cmd/versitygw"],
                          cwd=MODULE, env=go_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"building versitygw: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return BINARY


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Error(Exception):
    def __init__(self, status: int, body: bytes):
        super().__init__(f"S3 answered {status}: {body[:500]!r}")
        self.status = status


class S3Server:
    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.root = self.workdir / "root"
        self.root.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / "versitygw.log"
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.access_key, self.secret_key, self.region = ACCESS_KEY, SECRET_KEY, REGION
        self.proc: subprocess.Popen | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> "S3Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.kill()

    def start(self) -> "S3Server":
        """Starts (again) on the same port and directory."""
        binary = build()
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(binary), "--port", f"127.0.0.1:{self.port}", "--access", self.access_key,
             "--secret", self.secret_key, "--region", self.region, "posix", str(self.root)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 30
        while True:
            try:
                self._request("GET", "/")
                return self
            except (OSError, http.client.HTTPException):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"versitygw did not start\n{self.log_tail()}")
                time.sleep(0.05)

    def stop(self) -> None:
        """The store goes away (SIGTERM)."""
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    # -- S3 calls, signed with SigV4 ----------------------------------------------------------------

    def _request(self, method: str, path: str, query: dict[str, str] | None = None, body: bytes = b"",
                 headers: dict[str, str] | None = None, secret: str | None = None) -> tuple[int, dict, bytes]:
        query = query or {}
        now = datetime.datetime.now(datetime.timezone.utc)
        amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        payload_hash = hashlib.sha256(body).hexdigest()
        hdrs = {"host": f"127.0.0.1:{self.port}", "x-amz-date": amz_date, "x-amz-content-sha256": payload_hash}
        hdrs.update({k.lower(): v for k, v in (headers or {}).items()})
        canonical_path = urllib.parse.quote(path, safe="/-_.~")
        canonical_query = "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
                                   for k, v in sorted(query.items()))
        signed = ";".join(sorted(hdrs))
        canonical = "\n".join([method, canonical_path, canonical_query,
                               "".join(f"{k}:{hdrs[k].strip()}\n" for k in sorted(hdrs)), signed, payload_hash])
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        key = ("AWS4" + (secret or self.secret_key)).encode()
        for part in (day, self.region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        hdrs["authorization"] = (f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, "
                                 f"SignedHeaders={signed}, Signature={signature}")
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            url = canonical_path + (f"?{canonical_query}" if canonical_query else "")
            conn.request(method, url, body=body, headers=hdrs)
            resp = conn.getresponse()
            return resp.status, dict(resp.getheaders()), resp.read()
        finally:
            conn.close()

    def _ok(self, *args, **kw) -> tuple[dict, bytes]:
        status, headers, body = self._request(*args, **kw)
        if status // 100 != 2:
            raise S3Error(status, body)
        return headers, body

    def create_bucket(self, bucket: str) -> None:
        self._ok("PUT", f"/{bucket}")

    def put_object(self, bucket: str, key: str, data: bytes) -> None:
        self._ok("PUT", f"/{bucket}/{key}", body=data)

    def get_object(self, bucket: str, key: str, byte_range: tuple[int, int] | None = None) -> bytes:
        headers = {"Range": f"bytes={byte_range[0]}-{byte_range[1]}"} if byte_range else None
        return self._ok("GET", f"/{bucket}/{key}", headers=headers)[1]

    def delete_object(self, bucket: str, key: str) -> None:
        self._ok("DELETE", f"/{bucket}/{key}")

    def list_objects(self, bucket: str, prefix: str = "") -> list[tuple[str, int]]:
        """Every object under `prefix` (ListObjectsV2, following continuation tokens)."""
        out, token = [], None
        while True:
            query = {"list-type": "2", "prefix": prefix, "max-keys": "1000"}
            if token:
                query["continuation-token"] = token
            _, body = self._ok("GET", f"/{bucket}", query=query)
            root = ET.fromstring(body)
            for c in root.iter():
                if c.tag.endswith("Contents"):
                    key = next(x.text for x in c if x.tag.endswith("Key"))
                    size = int(next(x.text for x in c if x.tag.endswith("Size")))
                    out.append((key, size))
            truncated = next((x.text for x in root if x.tag.endswith("IsTruncated")), "false")
            token = next((x.text for x in root if x.tag.endswith("NextContinuationToken")), None)
            if truncated != "true" or not token:
                return sorted(out)
