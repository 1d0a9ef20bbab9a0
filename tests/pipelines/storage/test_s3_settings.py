"""The S3 settings read from the AWS variables, the forms each client takes, and the probe's one-line causes for
the errors pyarrow's S3 client raises (the probe against a real S3 server: tests/assets/test_table_worker_s3.py)."""

from __future__ import annotations

import pytest

from cohort.pipelines.storage.preflight import ObjectStoreError, _cause, probe_root
from cohort.pipelines.storage.s3 import S3Settings, is_s3

ENV = {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
    "AWS_REGION": "eu-west-3",
    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "s3cr3t",
}


def test_settings_come_from_the_aws_variables_and_hide_the_secrets() -> None:
    extra = {"AWS_ENDPOINT_URL_S3": "https://s3.example:443", "AWS_SESSION_TOKEN": ""}
    settings = S3Settings.from_environ({**ENV, **extra})
    assert settings.endpoint == "https://s3.example:443" and settings.region == "eu-west-3"
    assert settings.session_token is None
    assert "s3cr3t" not in repr(settings) and "AKIAEXAMPLE" not in repr(settings)
    assert S3Settings.from_environ({"AWS_DEFAULT_REGION": "us-west-2"}).where == "AWS S3 (us-west-2)"


def test_each_client_gets_its_own_names() -> None:
    settings = S3Settings.from_environ(ENV)
    assert settings.iceberg_properties() == {
        "s3.endpoint": "http://127.0.0.1:9000",
        "s3.region": "eu-west-3",
        "s3.access-key-id": "AKIAEXAMPLE",
        "s3.secret-access-key": "s3cr3t",
    }
    kwargs = settings.arrow_kwargs(connect_timeout_s=1.0, request_timeout_s=2.0)
    assert kwargs["endpoint_override"] == "127.0.0.1:9000" and kwargs["scheme"] == "http"
    assert (kwargs["access_key"], kwargs["secret_key"], kwargs["region"]) == ("AKIAEXAMPLE", "s3cr3t", "eu-west-3")
    assert "access_key" not in S3Settings().arrow_kwargs(connect_timeout_s=1.0, request_timeout_s=2.0)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("AWS Error NETWORK_CONNECTION during ListObjectsV2 operation: curlCode: 7, Couldn't connect to server",
         "cannot reach the S3 endpoint http://127.0.0.1:9000 (Couldn't connect to server): check AWS_ENDPOINT_URL"),
        ("AWS Error UNKNOWN (HTTP status 403) during ListObjectsV2 operation: InvalidAccessKeyId",
         "does not know the access key: check AWS_ACCESS_KEY_ID"),
        ("AWS Error SIGNATURE_DOES_NOT_MATCH during ListObjectsV2 operation: ...",
         "refused the signature: check AWS_SECRET_ACCESS_KEY"),
        ("AWS Error NO_SUCH_BUCKET during ListObjectsV2 operation", "bucket 'b' does not exist at http://127.0.0.1:9000"),
        ("AWS Error ACCESS_DENIED during PutObject operation", "access denied: the keys may not write under s3://b/x"),
    ],
)  # fmt: skip
def test_the_probe_names_the_cause_in_one_line(text: str, says: str) -> None:
    cause = _cause(OSError(text), S3Settings.from_environ(ENV), "b", "write under s3://b/x")
    assert says in cause and "\n" not in cause and "s3cr3t" not in cause


def test_only_s3_roots_are_probed() -> None:
    assert probe_root("/tmp/lake", write=True) is None and probe_root("gs://b/x", write=True) is None
    assert is_s3("s3://b/x") and not is_s3("s3a://b/x")
    with pytest.raises(ObjectStoreError, match="names a bucket"):
        probe_root("s3:///lake", write=False)
