"""An S3-compatible HTTP server for tests and benchmarks: moto's S3 in a process of its own, on a loopback port.

The tests land tables on object storage through the real clients (delta-rs's Rust object store, pyarrow's AWS SDK,
pyiceberg's file IO over it), so they need S3 served over real HTTP with the semantics Cohort relies on: a listing
shows every completed write, `If-None-Match: *` refuses an existing key (HTTP 412: delta-rs's commit of a log
entry), `If-Match` refuses a moved one, multipart uploads, server-side copy and delete (docs/object-storage.md).

The server checks every request's SigV4 signature against IAM users it creates before it serves: `credentials`
may do anything on every bucket except write into a bucket created with `writable=False` (a bucket without write
permission), so wrong keys, a wrong secret and a denied write fail as they do on AWS (HTTP 403). It serves the
conditional writes of all clients one at a time (moto checks a condition and writes without a lock, so two racing
`If-None-Match: *` could both win); reads run concurrently. What moto does not keep: durability (objects live in
the server's memory until `stop`), versioning and object lock are not exercised, and the listing order is its own.

`python -m harness.s3_server` serves in the foreground until Ctrl-C and prints its endpoint and keys.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

__all__ = ["READ_ONLY_SUFFIX", "S3Credentials", "S3Server"]

READ_ONLY_SUFFIX = "-readonly"
"""Buckets whose name ends so are readable, not writable, with the server's credentials."""
REGION = "us-east-1"
_START_TIMEOUT_S = 60.0

_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
        {
            "Effect": "Deny",
            "Action": ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
            "Resource": f"arn:aws:s3:::*{READ_ONLY_SUFFIX}/*",
        },
    ],
}


@dataclass(frozen=True)
class S3Credentials:
    """An access key pair (the secret never shown in a repr)."""

    access_key_id: str
    secret_access_key: str = field(repr=False)


class S3Server:
    """moto's S3 in a child process on 127.0.0.1 (a free port): `start`, `create_bucket`, the settings each client
    takes (`storage_options` for delta-rs, `arrow_kwargs` for pyarrow, `iceberg_properties` for pyiceberg, `environ`
    for the AWS variables), `stop`."""

    def __init__(self, region: str = REGION) -> None:
        self.region = region
        self._process: subprocess.Popen[str] | None = None
        self._endpoint = ""
        self._credentials: S3Credentials | None = None

    # -- life cycle -----------------------------------------------------------------------------------------------

    def start(self) -> S3Server:
        """Start the server process and wait until it answers (its first line says where and with which keys)."""
        command = [sys.executable, "-m", "harness.s3_server", "--child"]
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self._process = subprocess.Popen(
            command, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True
        )
        line = _first_line(self._process, _START_TIMEOUT_S)
        if not line:
            self.stop()
            raise RuntimeError(f"the S3 server did not start within {_START_TIMEOUT_S:.0f} s")
        ready = json.loads(line)
        self._endpoint = f"http://127.0.0.1:{ready['port']}"
        self._credentials = S3Credentials(ready["access_key_id"], ready["secret_access_key"])
        return self

    def stop(self) -> None:
        """End the server process (its objects go with it)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # -- what clients need ----------------------------------------------------------------------------------------

    @property
    def endpoint_url(self) -> str:
        """`http://127.0.0.1:<port>`."""
        if not self._endpoint:
            raise RuntimeError("the S3 server is not started")
        return self._endpoint

    @property
    def credentials(self) -> S3Credentials:
        """The keys that may read and write every bucket except the read-only ones."""
        if self._credentials is None:
            raise RuntimeError("the S3 server is not started")
        return self._credentials

    def environ(self, credentials: S3Credentials | None = None) -> dict[str, str]:
        """The AWS environment variables every client reads: keys, endpoint, region."""
        return {**self.storage_options(credentials), "AWS_DEFAULT_REGION": self.region}

    def storage_options(self, credentials: S3Credentials | None = None) -> dict[str, str]:
        """delta-rs's storage options (object_store's AWS keys): path-style requests over plain HTTP."""
        keys = credentials or self.credentials
        return {
            "AWS_ACCESS_KEY_ID": keys.access_key_id,
            "AWS_SECRET_ACCESS_KEY": keys.secret_access_key,
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_REGION": self.region,
            "AWS_ALLOW_HTTP": "true",
        }

    def arrow_kwargs(self, credentials: S3Credentials | None = None) -> dict[str, Any]:
        """`pyarrow.fs.S3FileSystem(**kwargs)`."""
        keys = credentials or self.credentials
        return {
            "access_key": keys.access_key_id,
            "secret_key": keys.secret_access_key,
            "endpoint_override": self.endpoint_url,
            "region": self.region,
            "scheme": "http",
        }

    def iceberg_properties(self, credentials: S3Credentials | None = None) -> dict[str, str]:
        """pyiceberg's S3 file IO properties."""
        keys = credentials or self.credentials
        return {
            "s3.endpoint": self.endpoint_url,
            "s3.access-key-id": keys.access_key_id,
            "s3.secret-access-key": keys.secret_access_key,
            "s3.region": self.region,
        }

    def client(self, credentials: S3Credentials | None = None) -> Any:
        """A boto3 S3 client on the server."""
        import boto3

        keys = credentials or self.credentials
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            aws_access_key_id=keys.access_key_id,
            aws_secret_access_key=keys.secret_access_key,
        )

    def create_bucket(self, name: str, *, writable: bool = True) -> str:
        """Create bucket `name` (`writable=False`: the credentials may read it, not write into it; its name gets
        READ_ONLY_SUFFIX) and return its name."""
        if not writable and not name.endswith(READ_ONLY_SUFFIX):
            name = f"{name}{READ_ONLY_SUFFIX}"
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """The keys under `prefix` in `bucket`, sorted."""
        found: list[str] = []
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for page in pages:
            found.extend(item["Key"] for item in page.get("Contents", ()))
        return sorted(found)


def _first_line(process: subprocess.Popen[str], timeout_s: float) -> str:
    """The child's first line of output, "" when it exits or says nothing within `timeout_s`."""
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(process.stdout.readline() if process.stdout else ""))
    reader.daemon = True
    reader.start()
    reader.join(timeout_s)
    return got[0].strip() if got else ""


# -- the child process ----------------------------------------------------------------------------------------------


class _SerialConditionalWrites:
    """A WSGI wrapper serving conditional writes (`If-None-Match`, `If-Match`) and deletes one at a time, so moto's
    check and write of a condition are one step as on S3; other requests run concurrently."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        conditional = "HTTP_IF_NONE_MATCH" in environ or "HTTP_IF_MATCH" in environ
        if environ.get("REQUEST_METHOD") in ("PUT", "POST", "DELETE") and conditional:
            with self._lock:
                return list(self._app(environ, start_response))
        return self._app(environ, start_response)


def _s3_dispatcher() -> Any:
    """moto's dispatcher, with requests signed for S3 sent straight to its S3 app: moto's own lookup scans its
    modules' directories on disk for every request, under one lock, which cost the server about a third of its CPU
    (what the batch on the same cores lost to it); anything else (the IAM set-up, presigned URLs) goes its way."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    class S3First(DomainDispatcherApplication):
        def get_application(self, environ: dict[str, Any]) -> Any:
            auth, path = environ.get("HTTP_AUTHORIZATION", ""), environ.get("PATH_INFO", "")
            if "/s3/aws4_request" in auth and not path.startswith(("/v20180820/", "/moto-api")):
                with self.lock:
                    app = self.app_instances.get("s3")
                    if app is None:
                        app = self.app_instances["s3"] = self.create_app("s3")
                return app
            return super().get_application(environ)

    return S3First(create_backend_app)


def _create_user() -> tuple[str, str]:
    """The IAM user the clients sign as, with `_POLICY`; (access key id, secret)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.iam.models import iam_backends

    iam = iam_backends[DEFAULT_ACCOUNT_ID]["aws"]
    iam.create_user(REGION, "cohort")
    iam.put_user_policy("cohort", "lake", json.dumps(_POLICY))
    key = iam.create_access_key("cohort")
    return key.access_key_id, key.secret_access_key


def _serve(announce: Callable[[dict[str, Any]], None]) -> None:
    """Serve S3 on 127.0.0.1 (a port the OS picks), signatures checked from the first request."""
    from moto import settings
    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.serving import make_server

    class QuietHandler(MotoRequestHandler):  # type: ignore[misc]
        def log_request(self, *args: Any, **kwargs: Any) -> None:
            """No line per request: nobody reads them (the child's stderr is discarded), formatting costs CPU."""

    access_key_id, secret = _create_user()
    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0  # authenticate and authorize every request
    app = _SerialConditionalWrites(_s3_dispatcher())
    server = make_server("127.0.0.1", 0, app, threaded=True, request_handler=QuietHandler)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    announce({"port": server.server_address[1], "access_key_id": access_key_id, "secret_access_key": secret})
    server.serve_forever()


def _child() -> None:
    def announce(ready: dict[str, Any]) -> None:
        print(json.dumps(ready), flush=True)

    _serve(announce)


def main() -> None:
    """`python -m harness.s3_server`: serve until Ctrl-C, printing the endpoint and the AWS variables."""
    if "--child" in sys.argv[1:]:
        _child()
        return
    with S3Server() as server:
        for name, value in server.environ().items():
            print(f"export {name}={value}")
        print(f"# serving at {server.endpoint_url}; Ctrl-C stops it", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
