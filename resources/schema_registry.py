"""The Schema Registry resource: where the registry formats (Avro, Protobuf, JSON Schema) read their schemas.

Typed configuration only; `connection()` turns it into the `RegistryConnection` a pipeline spec carries to the
reading tasks. The password is hidden from `repr`, from Dagster's config display and from every error message.

Example:
    >>> import dagster as dg
    >>> registry = SchemaRegistryResource(
    ...     url="https://registry.internal:8081",
    ...     username="cohort",
    ...     password=dg.EnvVar("SCHEMA_REGISTRY_PASSWORD"),
    ... )  # doctest: +SKIP
"""

from __future__ import annotations

import dagster as dg
from pydantic import ConfigDict, Field, field_validator, model_validator

from cohort.pipelines.formats.registry import RegistryConnection, check_registry_url

__all__ = ["SchemaRegistryResource"]


class SchemaRegistryResource(dg.ConfigurableResource):
    """A Confluent-compatible Schema Registry: URL, HTTP basic auth, and the client's timeout and retries.

    Given to `build_cohort_definitions(schema_registry=...)`, it serves every group whose pipeline reads a
    registry format without a `registry` of its own.
    """

    model_config = ConfigDict(hide_input_in_errors=True)  # a refused configuration never shows the password

    url: str = Field(description="http(s)://host[:port][/path] of the Schema Registry.")
    username: str | None = Field(default=None, description="HTTP basic auth user (an API key on Confluent Cloud).")
    password: str | None = Field(
        default=None, repr=False, description="HTTP basic auth password; give it as dg.EnvVar('...'). Never logged."
    )
    timeout_s: float = Field(default=10.0, gt=0, description="Timeout of one registry request.")
    max_retries: int = Field(default=3, ge=0, description="Retries of a failed request before the batch fails.")
    retry_wait_ms: int = Field(default=500, ge=0, description="First wait between retries (it grows up to 4x).")

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        check_registry_url(value)
        return value

    @model_validator(mode="after")
    def _check_credentials(self) -> SchemaRegistryResource:
        if (self.username is None) != (self.password is None):
            raise ValueError("give both a Schema Registry username and password, or neither")
        return self

    def connection(self) -> RegistryConnection:
        """The connection a pipeline spec carries to the reading tasks (secret included: never log it)."""
        return RegistryConnection(
            url=self.url,
            username=self.username,
            password=self.password,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            retry_wait_ms=self.retry_wait_ms,
        )
