"""Row-level validation against a user's `pandera.pyspark` DataFrameModel, evaluated with Arrow.

pandera.pyspark validates a whole DataFrame and reports per check (did any row fail?), not per row, so it
cannot say which records to quarantine. This module derives per-row failures soundly by evaluating the
same predicates pandera evaluates, as Arrow compute kernels over each decoded batch in the reading task:

- pandera's built-in pyspark checks each compute `cond` and fail when `df.filter(~cond)` is non-empty,
  so a row fails a check exactly when `NOT cond` is TRUE; a null makes `NOT cond` null, which passes,
  as in pandera (nulls are governed by `nullable` alone). The table below mirrors
  pandera/backends/pyspark/builtin_checks.py check by check.
- `nullable=False` fails rows where the column is null.
- the column's dtype must equal the decoded column's Spark type; that is a property of the schema, not
  of a row, so a mismatch is a configuration error raised when the model is compiled.

What cannot be decided row by row is refused when the model is compiled, with the reason: dataframe-level
checks, `unique`, regex column names, custom checks and `unique_values_eq`. Regular expressions run on RE2
(Arrow's engine): a pattern RE2 cannot compile (look-arounds, back-references) is refused when the model is
compiled. The equivalence with pandera is tested by running pandera's own `validate` on both outputs of a
split.

Example:
    >>> import pandera.pyspark as pa
    >>> import pyspark.sql.types as T
    >>> class Order(pa.DataFrameModel):
    ...     id: T.LongType() = pa.Field(gt=0)
    >>> [c.description for c in compile_model(Order, T.StructType([T.StructField("id", T.LongType())]))]
    ['id: greater_than(0)', 'id: not_nullable']
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StructType

__all__ = ["ModelError", "RowCheck", "compile_model", "failure_reasons"]


class ModelError(ValueError):
    """A pandera model that cannot be used for row-level validation of the decoded values."""


def _regex(pattern: Any) -> str:
    return pattern.pattern if isinstance(pattern, re.Pattern) else str(pattern)


def _in_range(c: pa.Array, s: Mapping[str, Any]) -> pa.Array:
    low = pc.greater_equal(c, s["min_value"]) if s.get("include_min", True) else pc.greater(c, s["min_value"])
    high = pc.less_equal(c, s["max_value"]) if s.get("include_max", True) else pc.less(c, s["max_value"])
    return pc.and_(low, high)


def _str_length(c: pa.Array, s: Mapping[str, Any]) -> pa.Array:
    # A string column in use; _try_on_empty also runs it on other types, which Arrow refuses (as it should),
    # while pyarrow-stubs accept string arrays only.
    length = pc.utf8_length(c)  # type: ignore[call-overload]
    if s.get("exact_value") is not None:
        return pc.equal(length, s["exact_value"])
    if s.get("min_value") is None and s.get("max_value") is None:
        raise ModelError("str_length needs min_value, max_value or exact_value")
    if s.get("min_value") is None:
        return pc.less_equal(length, s["max_value"])
    if s.get("max_value") is None:
        return pc.greater_equal(length, s["min_value"])
    return pc.and_(pc.greater_equal(length, s["min_value"]), pc.less_equal(length, s["max_value"]))


def _anchored(s: Mapping[str, Any]) -> str:
    pattern = _regex(s["pattern"])
    return pattern if pattern.startswith("^") else f"^{pattern}"


_PASSES: dict[str, Callable[[pa.Array, Mapping[str, Any]], pa.Array]] = {
    "equal_to": lambda c, s: pc.equal(c, s["value"]),
    "not_equal_to": lambda c, s: pc.not_equal(c, s["value"]),
    "greater_than": lambda c, s: pc.greater(c, s["min_value"]),
    "greater_than_or_equal_to": lambda c, s: pc.greater_equal(c, s["min_value"]),
    "less_than": lambda c, s: pc.less(c, s["max_value"]),
    "less_than_or_equal_to": lambda c, s: pc.less_equal(c, s["max_value"]),
    "in_range": _in_range,
    "isin": lambda c, s: pc.is_in(c, value_set=pa.array(list(s["allowed_values"]), c.type)),
    "notin": lambda c, s: pc.invert(pc.is_in(c, value_set=pa.array(list(s["forbidden_values"]), c.type))),
    "str_matches": lambda c, s: pc.match_substring_regex(c, _anchored(s)),
    "str_contains": lambda c, s: pc.match_substring_regex(c, _regex(s["pattern"])),
    "str_startswith": lambda c, s: pc.starts_with(c, s["string"]),
    "str_endswith": lambda c, s: pc.ends_with(c, s["string"]),
    "str_length": _str_length,
}
"""check name -> the condition a passing value satisfies, as in pandera's pyspark built-in checks."""


@dataclass(frozen=True)
class RowCheck:
    """One row-level check: `column` fails `check` (a pandera check name, or 'not_nullable')."""

    column: str
    check: str
    statistics: tuple[tuple[str, Any], ...] = ()
    error: str | None = None

    @property
    def description(self) -> str:
        return f"{self.column}: {self.error or self.check}"

    def fails(self, table: pa.Table) -> pa.BooleanArray:
        """A boolean array over `table`'s rows: true where the row fails this check, never null."""
        column = table.column(self.column).combine_chunks()
        if self.check == "not_nullable":
            return column.is_null()
        passes = _PASSES[self.check](column, dict(self.statistics))
        return pc.fill_null(pc.and_(column.is_valid(), pc.invert(passes)), False)


def compile_model(model: Any, value_schema: StructType) -> tuple[RowCheck, ...]:
    """The row checks of a pandera.pyspark DataFrameModel (or its DataFrameSchema) over `value_schema`.

    Raises ModelError naming the column and the problem when the model does not fit the decoded values
    or uses a check that cannot be evaluated row by row.
    """
    schema = model.to_schema() if hasattr(model, "to_schema") else model
    name = getattr(model, "__name__", type(schema).__name__)
    if not hasattr(schema, "columns"):
        raise ModelError(f"{name} is not a pandera.pyspark DataFrameModel or DataFrameSchema")
    if getattr(schema, "checks", None):
        raise ModelError(f"{name} has dataframe-level checks, which cannot say which rows fail; use column checks")
    if getattr(schema, "unique", None):
        raise ModelError(f"{name} declares unique columns, a property of the batch, not of a row")
    fields = {f.name: f for f in value_schema.fields}
    if getattr(schema, "strict", False) is True:
        extra = sorted(set(fields) - set(schema.columns))
        if extra:
            raise ModelError(f"{name} is strict but the value schema has columns it does not declare: {extra}")
    checks: list[RowCheck] = []
    for column_name, column in schema.columns.items():
        where = f"{name}.{column_name}"
        if getattr(column, "regex", False):
            raise ModelError(f"{where}: regex column names are not supported; name the columns")
        if getattr(column, "unique", False):
            raise ModelError(f"{where}: unique=True is a property of the batch, not of a row")
        if column_name not in fields:
            raise ModelError(f"{where}: no such column among the decoded values {sorted(fields)}")
        expected = getattr(column.dtype, "type", None)
        actual = fields[column_name].dataType
        if expected is not None and expected != actual:
            raise ModelError(
                f"{where}: the model's dtype {expected.simpleString()} differs from the decoded column's "
                f"{actual.simpleString()}; declare the same type in the value schema and the model"
            )
        for check in column.checks:
            if check.name not in _PASSES:
                raise ModelError(
                    f"{where}: check {check.name!r} cannot be evaluated row by row; supported checks are "
                    f"{', '.join(sorted(_PASSES))}"
                )
            stats = tuple(sorted((check.statistics or {}).items()))
            compiled = RowCheck(column_name, check.name, stats, check.error)
            _try_on_empty(compiled, where, fields[column_name].dataType)
            checks.append(compiled)
        if not column.nullable:
            checks.append(RowCheck(column_name, "not_nullable"))
    return tuple(checks)


def _try_on_empty(check: RowCheck, where: str, data_type: Any) -> None:
    """Evaluate `check` on a one-row column of its type, so a pattern RE2 cannot compile or a value of the
    wrong type is refused when the model is compiled, not in a reading task."""
    from cohort.pipelines.formats.decode import arrow_type

    column_type = arrow_type(data_type, where=check.column)
    # RE2 compiles on data. (pyarrow-stubs' pa.nulls overloads name each concrete type, not DataType.)
    sample = pa.array([""]) if pa.types.is_string(column_type) else pa.nulls(1, column_type)  # type: ignore[call-overload]
    try:
        check.fails(pa.table({check.column: sample}))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError, ValueError) as exc:
        raise ModelError(f"{where}: check {check.description!r} cannot run on the column: {exc}") from exc


def failure_reasons(checks: Sequence[RowCheck], table: pa.Table) -> list[str | None]:
    """Per row: every failed check's description ('; '-separated), None when all pass."""
    reasons: list[str | None] = [None] * table.num_rows
    if not checks or not table.num_rows:
        return reasons
    verdicts = [(c.description, c.fails(table)) for c in checks]
    for description, failed in verdicts:
        if not failed.true_count:
            continue
        for i in cast("list[int]", pc.indices_nonzero(failed).to_pylist()):  # indices: no nulls
            reasons[i] = description if reasons[i] is None else f"{reasons[i]}; {description}"
    return reasons
