"""What the registry client makes of each answer: only the registry's own "not found" (HTTP 404 with error code
40401, 40402 or 40403) means a schema or subject is not there; a 404 from a path the registry does not serve
(a wrong URL), a proxy's HTML page, a 5xx and a 2xx that is not the registry's JSON are errors naming the URL
and the status, on one line. Against the test registry over HTTP (harness.schema_registry) and a plain
HTTP server answering what proxies answer (tests.support.http_answers)."""

from __future__ import annotations

import json

import pytest

from cohort.pipelines.formats.registry import (
    RegistryConnection,
    RegistryError,
    RegistryUnavailableError,
    SchemaSource,
    is_not_found,
    refusal,
)
from harness.schema_registry import SchemaRegistryServer
from tests.support.http_answers import UNAVAILABLE_PAGE, FixedAnswerServer
from tests.support.order_schemas import ORDER_V1


def source(url: str) -> SchemaSource:
    return SchemaSource(RegistryConnection(url, max_retries=1, retry_wait_ms=1, timeout_s=5))


def test_the_registry_s_not_found_answers_are_none(registry: SchemaRegistryServer) -> None:
    schema_id = registry.register("orders-value", json.dumps(ORDER_V1))
    found = source(registry.url)
    assert found.by_id(schema_id) is not None
    assert found.by_id(999) is None  # 40403
    assert found.latest("nothing-value") is None  # 40401
    with pytest.raises(RegistryError, match="version 7 is not in the Schema Registry"):  # 40402
        found.version("orders-value", 7)


@pytest.mark.parametrize("prefix", ["/wrong/", "/api/v1"])
def test_a_url_with_a_path_the_registry_does_not_serve_is_an_error_not_an_unknown_schema(
    registry: SchemaRegistryServer, prefix: str
) -> None:
    registry.register("orders-value", json.dumps(ORDER_V1))
    url = registry.url + prefix
    wrong = source(url)
    with pytest.raises(RegistryUnavailableError) as by_id:
        wrong.by_id(1)
    with pytest.raises(RegistryUnavailableError) as latest:
        wrong.latest("orders-value")
    for error, what in ((by_id.value, "schema id 1"), (latest.value, "subject 'orders-value'")):
        message = str(error)
        assert "\n" not in message
        assert message.startswith(f"the Schema Registry at {url} answered HTTP 404 reading {what}"), message
        assert "check the registry URL" in message


def test_a_proxy_s_html_404_page_is_an_error_naming_the_url_and_status() -> None:
    with FixedAnswerServer(404) as proxy, pytest.raises(RegistryUnavailableError) as refused:
        source(proxy.url).by_id(1)
    message = str(refused.value)
    assert "\n" not in message and len(message) < 400
    assert message.startswith(f"the Schema Registry at {proxy.url} answered HTTP 404 reading schema id 1"), message
    assert "not the registry's: <html> <head><title>404 Not Found</title>" in message


def test_a_5xx_is_an_error_after_the_client_s_retries() -> None:
    with FixedAnswerServer(503, UNAVAILABLE_PAGE) as proxy, pytest.raises(RegistryUnavailableError) as failed:
        source(proxy.url).latest("orders-value")
    message = str(failed.value)
    assert "\n" not in message
    assert message.startswith(f"the Schema Registry at {proxy.url} failed reading subject 'orders-value': HTTP 503")
    assert "503 Service Unavailable" in message
    assert proxy.requests == 2  # the first try and one retry (max_retries=1)


def test_a_2xx_that_is_not_the_registry_s_json_is_an_error() -> None:
    welcome = "<html><body>Welcome</body></html>"
    with FixedAnswerServer(200, welcome) as page, pytest.raises(RegistryUnavailableError) as odd:
        source(page.url).by_id(1)
    assert str(odd.value).startswith(f"the Schema Registry at {page.url} answered reading schema id 1 with something")


def test_which_answers_mean_not_found() -> None:
    assert all(is_not_found(404, code) for code in (40401, 40402, 40403))
    assert not any(is_not_found(404, code) for code in (404, -1, None, 40408))
    assert not is_not_found(500, 40403)
    connection = RegistryConnection("http://registry:8081", max_retries=2)
    credentials = refusal(connection, "schema id 3", 401, 401, "Unauthorized")
    assert type(credentials) is RegistryError and "refused the credentials (HTTP 401)" in str(credentials)
    bad_request = refusal(connection, "schema id 3", 422, 42201, "Invalid schema")
    assert isinstance(bad_request, RegistryUnavailableError)
    assert str(bad_request) == (
        "the Schema Registry at http://registry:8081 refused reading schema id 3: HTTP 422 (error code 42201: "
        "Invalid schema)"
    )
    long_page = refusal(connection, "schema id 3", 502, -1, "Unknown Schema Registry Error: b'" + "x" * 500 + "'")
    assert "HTTP 502 after 2 retries" in str(long_page) and len(str(long_page)) < 300
