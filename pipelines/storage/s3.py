"""The S3 settings of a process, from the environment variables every S3 client reads (AWS's own names), in the
forms the sinks' clients take: pyiceberg's file IO properties, and a pyarrow `S3FileSystem` with bounded timeouts.

delta-rs and pyarrow's `FileSystem.from_uri` read these variables themselves; pyiceberg's file IO does not (it
takes `s3.*` catalog properties), so the Iceberg store hands it `iceberg_properties()`. The values are read when a
store opens and kept in no configuration Dagster stores: secrets never reach a message, a repr or metadata.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

__all__ = ["S3_SCHEMES", "S3Settings", "is_s3"]

S3_SCHEMES = ("s3://",)
_TRUE = ("1", "true", "yes")


def is_s3(uri: str) -> bool:
    """Whether `uri` names an S3 location (`s3://bucket/...`)."""
    return uri.startswith(S3_SCHEMES)


@dataclass(frozen=True)
class S3Settings:
    """What a client needs to reach S3 besides the bucket: the endpoint (None: AWS's, by region), the region, the
    keys (None: the client's default chain, such as an instance profile) and the session token."""

    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> S3Settings:
        """From `AWS_ENDPOINT_URL_S3` (else `AWS_ENDPOINT_URL`), `AWS_REGION` (else `AWS_DEFAULT_REGION`),
        `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`; unset or empty ones are None."""
        env = os.environ if environ is None else environ

        def get(*names: str) -> str | None:
            return next((value for n in names if (value := env.get(n, "").strip())), None)

        return cls(
            endpoint=get("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
            region=get("AWS_REGION", "AWS_DEFAULT_REGION"),
            access_key_id=get("AWS_ACCESS_KEY_ID"),
            secret_access_key=get("AWS_SECRET_ACCESS_KEY"),
            session_token=get("AWS_SESSION_TOKEN"),
        )

    @property
    def where(self) -> str:
        """The endpoint for messages: its URL, or `AWS S3 (<region>)`."""
        return self.endpoint or f"AWS S3 ({self.region or 'default region'})"

    def iceberg_properties(self) -> dict[str, str]:
        """pyiceberg's S3 file IO properties (`s3.endpoint`, `s3.region`, `s3.access-key-id`, ...) of those set."""
        pairs = {
            "s3.endpoint": self.endpoint,
            "s3.region": self.region,
            "s3.access-key-id": self.access_key_id,
            "s3.secret-access-key": self.secret_access_key,
            "s3.session-token": self.session_token,
        }
        return {key: value for key, value in pairs.items() if value}

    def arrow_kwargs(self, *, connect_timeout_s: float, request_timeout_s: float) -> dict[str, object]:
        """`pyarrow.fs.S3FileSystem` arguments: these settings, the timeouts, and the endpoint's scheme."""
        kwargs: dict[str, object] = {"connect_timeout": connect_timeout_s, "request_timeout": request_timeout_s}
        if self.endpoint:
            parts = urlsplit(self.endpoint if "://" in self.endpoint else f"https://{self.endpoint}")
            kwargs["endpoint_override"] = parts.netloc + parts.path.rstrip("/")
            kwargs["scheme"] = parts.scheme or "https"
        if self.region:
            kwargs["region"] = self.region
        if self.access_key_id and self.secret_access_key:
            kwargs["access_key"] = self.access_key_id
            kwargs["secret_key"] = self.secret_access_key
            if self.session_token:
                kwargs["session_token"] = self.session_token
        return kwargs
