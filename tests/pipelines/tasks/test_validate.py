"""Row-level checks derived from a pandera.pyspark model, evaluated with Arrow, agree with pandera's own
verdicts on Spark, check by check."""

from __future__ import annotations

import pandera.pyspark as pa
import pyarrow
import pyspark.sql.types as T
import pytest

from cohort.pipelines.tasks.validate import ModelError, compile_model, failure_reasons

SCHEMA = T.StructType(
    [
        T.StructField("n", T.LongType()),
        T.StructField("x", T.DoubleType()),
        T.StructField("s", T.StringType()),
    ]
)
ROWS = [
    (1, 0.5, "apple"),
    (5, 9.5, "banana"),
    (10, 10.0, "cherry"),
    (-3, -1.0, "kiwi"),
    (None, None, None),
    (7, 3.0, "apricot"),
]

FIELDS = [
    ("n", {"eq": 5}),
    ("n", {"ne": 5}),
    ("n", {"gt": 1}),
    ("n", {"ge": 1}),
    ("n", {"lt": 10}),
    ("n", {"le": 7}),
    ("x", {"in_range": {"min_value": 0.5, "max_value": 10.0, "include_min": False}}),
    ("n", {"isin": [1, 5, 7]}),
    ("n", {"notin": [5, 10]}),
    ("s", {"str_matches": "a.*"}),
    ("s", {"str_contains": "an"}),
    ("s", {"str_startswith": "ap"}),
    ("s", {"str_endswith": "y"}),
    ("s", {"str_length": {"min_value": 5, "max_value": 6}}),
]


def arrow_rows() -> pyarrow.Table:
    """ROWS as the Arrow table the reading tasks check."""
    columns = list(zip(*ROWS, strict=True))
    types = [pyarrow.int64(), pyarrow.float64(), pyarrow.string()]
    return pyarrow.table([pyarrow.array(c, t) for c, t in zip(columns, types, strict=True)], names=SCHEMA.names)


def model_with(column: str, kwargs: dict, nullable: bool = True) -> type[pa.DataFrameModel]:
    dtypes = {"n": T.LongType(), "x": T.DoubleType(), "s": T.StringType()}
    annotations = {column: dtypes[column]}
    namespace = {"__annotations__": annotations, column: pa.Field(nullable=nullable, **kwargs)}
    return type("Generated", (pa.DataFrameModel,), namespace)


@pytest.mark.parametrize(("column", "kwargs"), FIELDS, ids=[f"{c}-{next(iter(k))}" for c, k in FIELDS])
@pytest.mark.slow
def test_row_verdicts_match_pandera(spark, column, kwargs):
    model = model_with(column, kwargs)
    reasons = failure_reasons(compile_model(model, SCHEMA), arrow_rows())
    for value, reason in zip([r[SCHEMA.names.index(column)] for r in ROWS], reasons, strict=True):
        single = spark.createDataFrame([(value,)], T.StructType([SCHEMA[column]]))
        pandera_failed = bool(model.validate(single).pandera.errors)
        assert (reason is not None) == pandera_failed, (kwargs, value, reason)


def test_not_nullable_and_every_failed_check_is_listed():
    class Model(pa.DataFrameModel):
        n: T.LongType() = pa.Field(gt=0, lt=5)  # type: ignore[valid-type]
        s: T.StringType() = pa.Field(nullable=True)  # type: ignore[valid-type]

    reasons = failure_reasons(compile_model(Model, SCHEMA), arrow_rows())
    too_big, too_small = "n: less_than(5)", "n: greater_than(0)"
    assert reasons == [None, too_big, too_big, too_small, "n: not_nullable", too_big]

    class Both(pa.DataFrameModel):
        n: T.LongType() = pa.Field(gt=0, lt=5)  # type: ignore[valid-type]
        s: T.StringType() = pa.Field(str_startswith="a", nullable=True)  # type: ignore[valid-type]

    assert failure_reasons(compile_model(Both, SCHEMA), arrow_rows())[1] == "n: less_than(5); s: str_startswith('a')"


def test_models_that_cannot_be_checked_row_by_row_are_refused():
    class WrongType(pa.DataFrameModel):
        n: T.StringType()  # type: ignore[valid-type]

    class Missing(pa.DataFrameModel):
        missing: T.LongType()  # type: ignore[valid-type]

    class Unique(pa.DataFrameModel):
        n: T.LongType()  # type: ignore[valid-type]

        class Config:
            unique = ["n"]

    class Frame(pa.DataFrameModel):
        n: T.LongType()  # type: ignore[valid-type]

        @pa.dataframe_check
        @classmethod
        def positive(cls, df):  # type: ignore[no-untyped-def]
            return True

    with pytest.raises(ModelError, match=r"WrongType.n: the model's dtype string differs .* bigint"):
        compile_model(WrongType, SCHEMA)
    with pytest.raises(ModelError, match=r"Missing.missing: no such column"):
        compile_model(Missing, SCHEMA)
    with pytest.raises(ModelError, match="unique"):
        compile_model(Unique, SCHEMA)
    with pytest.raises(ModelError, match="dataframe-level checks"):
        compile_model(Frame, SCHEMA)
    with pytest.raises(ModelError, match=r"not a pandera\.pyspark"):
        compile_model(object(), SCHEMA)


def test_custom_checks_are_refused_with_the_supported_list():
    class Custom(pa.DataFrameModel):
        n: T.LongType()  # type: ignore[valid-type]

        @pa.check("n")
        @classmethod
        def even(cls, data):  # type: ignore[no-untyped-def]
            return True

    with pytest.raises(ModelError, match=r"Custom.n: check 'even' cannot be evaluated row by row; supported"):
        compile_model(Custom, SCHEMA)


def test_compiled_checks_never_yield_null():
    nulls = pyarrow.table({"n": pyarrow.nulls(1, pyarrow.int64())})
    (check,) = compile_model(model_with("n", {"gt": 1}), SCHEMA)
    assert check.fails(nulls).to_pylist() == [False]


def test_patterns_arrow_cannot_run_are_refused_when_the_model_is_compiled():
    model = model_with("s", {"str_matches": "(?=a)a"})  # a look-ahead: Java regex has it, RE2 does not
    with pytest.raises(ModelError, match=r"Generated.s: check .* cannot run on the column"):
        compile_model(model, SCHEMA)
