"""The S3 server the object-storage tests run on (harness.s3_server) keeps the semantics Cohort relies on: a listing
shows every completed write, `If-None-Match: *` refuses an existing key and `If-Match` a moved one (HTTP 412),
multipart uploads, server-side copy and delete, signatures and a denied write refused (HTTP 403), and delta-rs's
commits through conditional puts lose none of several writers' concurrent commits."""

from __future__ import annotations

import concurrent.futures

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from botocore.exceptions import ClientError

from harness.s3_server import S3Credentials
from tests.fixtures.s3 import S3Bucket


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code"))


def test_a_listing_shows_every_completed_write(s3_bucket: S3Bucket) -> None:
    client = s3_bucket.server.client()
    for i in range(30):
        client.put_object(Bucket=s3_bucket.name, Key=f"lake/k{i:02}", Body=b"x")
        assert len(s3_bucket.object_keys("lake/")) == i + 1  # read after write, every time


def test_if_none_match_refuses_an_existing_key_and_if_match_a_moved_one(s3_bucket: S3Bucket) -> None:
    client = s3_bucket.server.client()
    first = client.put_object(Bucket=s3_bucket.name, Key="log/0.json", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as refused:
        client.put_object(Bucket=s3_bucket.name, Key="log/0.json", Body=b"second", IfNoneMatch="*")
    assert _code(refused.value) == "PreconditionFailed"
    moved = client.put_object(Bucket=s3_bucket.name, Key="log/0.json", Body=b"third", IfMatch=first["ETag"])
    with pytest.raises(ClientError) as stale:
        client.put_object(Bucket=s3_bucket.name, Key="log/0.json", Body=b"fourth", IfMatch=first["ETag"])
    assert _code(stale.value) == "PreconditionFailed"
    body = client.get_object(Bucket=s3_bucket.name, Key="log/0.json")
    assert body["Body"].read() == b"third" and body["ETag"] == moved["ETag"]


def test_racing_conditional_puts_have_one_winner(s3_bucket: S3Bucket) -> None:
    client = s3_bucket.server.client()

    def put(i: int) -> bool:
        try:
            client.put_object(Bucket=s3_bucket.name, Key="race", Body=str(i).encode(), IfNoneMatch="*")
            return True
        except ClientError as error:
            assert _code(error) == "PreconditionFailed"
            return False

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        won = list(pool.map(put, range(32)))
    assert won.count(True) == 1


def test_multipart_upload_copy_and_delete(s3_bucket: S3Bucket) -> None:
    fs = pafs.S3FileSystem(**s3_bucket.server.arrow_kwargs())
    data = bytes(range(256)) * (24 * 1024 * 1024 // 256)  # 24 MiB: pyarrow uploads it in parts
    with fs.open_output_stream(f"{s3_bucket.name}/lake/big.bin") as out:
        out.write(data)
    fs.copy_file(f"{s3_bucket.name}/lake/big.bin", f"{s3_bucket.name}/lake/copy.bin")
    with fs.open_input_stream(f"{s3_bucket.name}/lake/copy.bin") as copied:
        assert copied.read() == data
    fs.delete_file(f"{s3_bucket.name}/lake/big.bin")  # pyarrow leaves an empty `lake/` marker in its place
    assert [k for k in s3_bucket.object_keys("lake/") if not k.endswith("/")] == ["lake/copy.bin"]
    client = s3_bucket.server.client()
    upload = client.create_multipart_upload(Bucket=s3_bucket.name, Key="lake/parts.bin")
    parts = [
        {"PartNumber": n, "ETag": client.upload_part(
            Bucket=s3_bucket.name, Key="lake/parts.bin", UploadId=upload["UploadId"], PartNumber=n, Body=chunk
        )["ETag"]}
        for n, chunk in ((1, b"a" * 5 * 1024 * 1024), (2, b"b"))
    ]  # fmt: skip
    client.complete_multipart_upload(
        Bucket=s3_bucket.name, Key="lake/parts.bin", UploadId=upload["UploadId"], MultipartUpload={"Parts": parts}
    )
    assert client.head_object(Bucket=s3_bucket.name, Key="lake/parts.bin")["ContentLength"] == 5 * 1024 * 1024 + 1


def test_wrong_keys_and_a_denied_write_are_refused(s3_bucket: S3Bucket) -> None:
    server = s3_bucket.server
    with pytest.raises(ClientError) as unknown:
        server.client(S3Credentials("AKIAUNKNOWNUNKNOWN00", "x")).list_objects_v2(Bucket=s3_bucket.name)
    assert _code(unknown.value) == "InvalidAccessKeyId"
    with pytest.raises(ClientError) as secret:
        server.client(S3Credentials(server.credentials.access_key_id, "wrong")).list_objects_v2(Bucket=s3_bucket.name)
    assert _code(secret.value) == "SignatureDoesNotMatch"
    read_only = server.create_bucket(f"{s3_bucket.name}-ro", writable=False)
    server.client().list_objects_v2(Bucket=read_only)
    with pytest.raises(ClientError) as denied:
        server.client().put_object(Bucket=read_only, Key="x", Body=b"x")
    assert _code(denied.value) == "AccessDenied"


def test_delta_commits_of_concurrent_writers_all_land(s3_bucket: S3Bucket) -> None:
    """delta-rs writes each log entry with `If-None-Match: *`: of racing writers one wins each version and the
    others rebase, so no commit is lost (no locking provider, no unsafe rename)."""
    from deltalake import DeltaTable, write_deltalake

    options = s3_bucket.server.storage_options()
    root = f"{s3_bucket.root}/delta"
    write_deltalake(root, pa.table({"n": pa.array([-1], pa.int64())}), storage_options=options)

    def append(n: int) -> None:
        write_deltalake(root, pa.table({"n": pa.array([n], pa.int64())}), mode="append", storage_options=options)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(append, range(12)))
    table = DeltaTable(root, storage_options=options)
    assert table.version() == 12
    assert sorted(table.to_pyarrow_table().column("n").to_pylist()) == list(range(-1, 12))
