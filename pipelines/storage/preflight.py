"""The pre-flight probe of an object-store root: before a batch commits anything, one listing (and for a root the
batch writes, one tiny object written and deleted under its hidden `_staging/`) with short timeouts, so a wrong
endpoint, wrong keys, a missing bucket or a bucket the keys may not write fail in seconds with one line naming
the cause, never a secret, instead of minutes of a client's retries and a traceback from deep in a table library.

Local paths and URIs of other schemes pass unprobed (their own errors already name them).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow.fs as pafs

from cohort.pipelines.storage.s3 import S3Settings, is_s3

__all__ = ["CONNECT_TIMEOUT_S", "REQUEST_TIMEOUT_S", "ObjectStoreError", "Probe", "probe_root"]

CONNECT_TIMEOUT_S = 3.0
REQUEST_TIMEOUT_S = 5.0
_ATTEMPTS = 2  # one retry: a dropped connection is retried, a wrong setting is not worth more
_AWS_ERROR = re.compile(r"AWS Error ([A-Z_]+)(?: \(HTTP status (\d+)\))?")
_DETAIL = re.compile(r"Details?: ([^\n]*)|curlCode: \d+, ([^;\n]*)")


class ObjectStoreError(OSError):
    """An object-store root the batch cannot use: the message is one line naming the root and the cause."""


@dataclass(frozen=True)
class Probe:
    """A root the probe checked: its `uri`, whether it was `written` (write permission checked) and where the
    endpoint is (`where`, for messages)."""

    uri: str
    written: bool
    where: str


def _split(uri: str) -> tuple[str, str]:
    """(bucket, key prefix) of `s3://bucket/prefix`; ObjectStoreError when it names no bucket."""
    rest = uri.split("://", 1)[1]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ObjectStoreError(f"{uri}: an S3 root names a bucket, s3://BUCKET/PATH")
    return bucket, prefix.strip("/")


def _cause(error: OSError, settings: S3Settings, bucket: str, doing: str) -> str:
    """One line for the client's error: what it means for this configuration, naming the variable to check."""
    text = str(error)
    found = _AWS_ERROR.search(text)
    code = found.group(1) if found else ""
    detail = _DETAIL.search(text)
    said = next((g for g in detail.groups() if g), "").strip() if detail else ""
    if code == "NETWORK_CONNECTION" or "curlCode" in text:
        return f"cannot reach the S3 endpoint {settings.where} ({said or 'no connection'}): check AWS_ENDPOINT_URL"
    if code in ("INVALID_ACCESS_KEY_ID", "UNRECOGNIZED_CLIENT") or "InvalidAccessKeyId" in text:
        return f"the S3 endpoint {settings.where} does not know the access key: check AWS_ACCESS_KEY_ID"
    if code == "SIGNATURE_DOES_NOT_MATCH" or "SignatureDoesNotMatch" in text:
        return f"the S3 endpoint {settings.where} refused the signature: check AWS_SECRET_ACCESS_KEY"
    if code == "NO_SUCH_BUCKET" or "NoSuchBucket" in text:
        return f"bucket {bucket!r} does not exist at {settings.where}"
    if code == "ACCESS_DENIED" or "AccessDenied" in text or (found and found.group(2) == "403"):
        return f"access denied: the keys may not {doing} (check the bucket's policy and the keys' permissions)"
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    return f"{doing} failed at {settings.where}: {first[:200]}"


def probe_root(uri: str, *, write: bool, environ: Mapping[str, str] | None = None) -> Probe | None:
    """Check that `uri` can be listed (and, `write`, written and deleted under its `_staging/`) with the settings
    of the environment; None for a root that is not on S3. ObjectStoreError naming the cause otherwise, within
    about (CONNECT_TIMEOUT_S + REQUEST_TIMEOUT_S) x 2 attempts per request in the worst case (an endpoint that
    accepts connections and never answers)."""
    if not is_s3(uri):
        return None
    bucket, prefix = _split(uri)
    settings = S3Settings.from_environ(environ)
    kwargs = settings.arrow_kwargs(connect_timeout_s=CONNECT_TIMEOUT_S, request_timeout_s=REQUEST_TIMEOUT_S)
    doing = f"list {uri}"
    try:
        retries = pafs.AwsStandardS3RetryStrategy(max_attempts=_ATTEMPTS)
        fs = pafs.S3FileSystem(retry_strategy=retries, allow_delayed_open=True, **kwargs)  # type: ignore[arg-type,call-arg]
        fs.get_file_info(pafs.FileSelector(f"{bucket}/{prefix}".rstrip("/"), allow_not_found=True))
        if write:
            doing = f"write under {uri}"
            probe = f"{bucket}/{prefix}/_staging/.cohort-probe-{uuid.uuid4().hex}".replace("//", "/")
            with fs.open_output_stream(probe) as out:
                out.write(b"")
            doing = f"delete under {uri}"
            fs.delete_file(probe)
    except OSError as error:
        raise ObjectStoreError(f"{uri}: {_cause(error, settings, bucket, doing)}") from None
    return Probe(uri, write, settings.where)
