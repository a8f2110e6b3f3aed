"""A real S3-compatible server on 127.0.0.1 for a test: moto's server mode (the `test` extra), one
bucket, and the environment pyarrow and boto read (AWS_ENDPOINT_URL, credentials, region)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

BUCKET = "opbyop-test"


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    env: dict[str, str]
    log: Path  # the server's request log: one line per request, written before its response

    def url(self, prefix: str) -> str:
        return f"s3://{BUCKET}/{prefix}"

    def requests(self, method: str, url: str) -> int:
        """How many `method` requests (GET, HEAD, ...) the server has answered for the object at `url`."""
        key = url.removeprefix("s3://")
        return sum(1 for line in self.log.read_text().splitlines() if f'"{method} /{key} HTTP/' in line)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"moto's server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"moto's server did not listen on 127.0.0.1:{port} within {timeout:g} s")


@contextmanager
def moto_server(log: Path) -> Iterator[S3Server]:
    """moto's S3 server on a free port of 127.0.0.1 with the test bucket made; stopped on leaving."""
    import boto3

    port = _free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_for(port, proc)
        endpoint = f"http://127.0.0.1:{port}"
        env = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_REGION": "us-east-1"}
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                     aws_secret_access_key="testing").create_bucket(Bucket=BUCKET)
        yield S3Server(endpoint, env, log)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """moto's S3 server for the session."""
    pytest.importorskip("moto.server", reason="moto[server] (the `test` extra) is not installed")
    with moto_server(tmp_path_factory.mktemp("moto") / "server.log") as server:
        yield server


@pytest.fixture
def s3_url(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """A fresh prefix of the test bucket, with this process's environment pointing at the server."""
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OPBYOP_HOME", str(tmp_path / "home"))  # the writer's lock files
    return s3_server.url(f"store-{uuid.uuid4().hex[:8]}")
