"""`{{ env.NAME }}` in configuration text, as dg's YAML writes it: the variable's name, or the text rendered.

dg renders such templates itself when it loads a component; a reader of the same file outside Dagster (an
Airflow DAG file) renders them here, and both keep a secret written `{{ env.NAME }}` as the variable's name.

Example:
    >>> env_template("{{ env.COHORT_STORE_URL }}")
    'COHORT_STORE_URL'
    >>> render_env("{{ env.LAKE }}/orders", {"LAKE": "/data"})
    '/data/orders'
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

__all__ = ["env_template", "render_env"]

_TEMPLATE = re.compile(r"\{\{\s*env\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def env_template(value: object) -> str | None:
    """The variable's name when `value` is exactly `{{ env.NAME }}`, else None."""
    match = _TEMPLATE.fullmatch(value.strip()) if isinstance(value, str) else None
    return match[1] if match else None


def render_env(text: str, environ: Mapping[str, str] | None = None) -> str:
    """`text` with each `{{ env.NAME }}` replaced by the variable's value; a ValueError naming an unset one."""
    environ = os.environ if environ is None else environ

    def value(match: re.Match[str]) -> str:
        if match[1] not in environ:
            raise ValueError(f"the environment variable {match[1]} is not set")
        return environ[match[1]]

    return _TEMPLATE.sub(value, text)
