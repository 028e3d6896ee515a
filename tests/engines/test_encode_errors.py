"""Where a bad line of an engine's data is: the engines' encoder (shared by Spark, Ray and
Dask) names the partition or worker and the row, counted from 0 in it, as its other
errors do; in-process, no engine needed."""

from __future__ import annotations

import pytest

from terascale import DataError
from terascale.engines.spark._encode import Encoding


def _text() -> Encoding:
    return Encoding(kind="text", bits=12, features=("value",), text={"bits": 12})


def test_a_bad_line_is_named_by_its_row_in_the_partition() -> None:
    lines = ["1 |f a:1", "-1 |f b:2", "abc |f a:1", "1 |f c"]
    with pytest.raises(DataError) as e:
        _text().encode(lines, 40, "Spark partition 3")
    assert str(e.value).startswith("Spark partition 3, row 42: the label section has a word "
                                   "that is not a number: 'abc |f a:1'"), str(e.value)


def test_a_null_line_is_named_the_same_way() -> None:
    with pytest.raises(DataError, match=r"^Dask partition 2, row 1: the text column is null"):
        _text().encode([("1 |f a:1",), (None,)], 0, "Dask partition 2")
