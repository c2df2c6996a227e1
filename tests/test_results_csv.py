"""Result files: the column-at-a-time CSV writer gives pandas' `to_csv` text exactly."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from results.files import csv_chunks, frame_csv

TEXT = st.text(alphabet=st.sampled_from(list('ab,"= \n_')), max_size=6)
FLOAT = st.floats(allow_nan=True, allow_infinity=True, width=64)


@settings(max_examples=200, deadline=None)
@given(
    rows=st.integers(0, 5),
    data=st.data(),
)
def test_same_text_as_pandas(rows: int, data: st.DataObject) -> None:
    columns = {
        "f": data.draw(st.lists(FLOAT, min_size=rows, max_size=rows)),
        "i": data.draw(st.lists(st.integers(-(2**40), 2**40), min_size=rows, max_size=rows)),
        "b": data.draw(st.lists(st.booleans(), min_size=rows, max_size=rows)),
        "s": data.draw(st.lists(st.none() | TEXT, min_size=rows, max_size=rows)),
        "o": data.draw(
            st.lists(st.none() | TEXT | FLOAT | st.integers(), min_size=rows, max_size=rows)
        ),
    }
    frame = pd.DataFrame(columns)
    keep = data.draw(st.lists(st.sampled_from(list(columns)), min_size=1, unique=True))
    frame = frame[keep]
    assert frame_csv(frame) == frame.to_csv(index=False)
    assert "".join(csv_chunks(frame, rows=2)) == frame.to_csv(index=False)


def test_nullable_and_narrow_columns() -> None:
    frame = pd.DataFrame(
        {
            "n": pd.array([1, None, 3], dtype="Int64"),
            "f32": np.array([1.1, np.nan, 3], dtype=np.float32),
            "np": [np.float64(0.5), {"k": 1}, [1, 2]],
            "mixed": [1, 1.0, True],
            "zeros": [0.0, -0.0, 0.0],
        }
    )
    assert frame_csv(frame) == frame.to_csv(index=False)
    for name in frame.columns:
        assert frame_csv(frame[[name]]) == frame[[name]].to_csv(index=False)


def test_counting_columns_are_written_as_integers_where_whole() -> None:
    """A count (vocab.INTEGER_COLUMNS) of whole floats, missing values among them, is
    written as integers; a count with a fraction and a column that measures stay as
    pandas writes them."""
    frame = pd.DataFrame(
        {
            "workers": [256.0, np.nan, 8.0],
            "steps": [1.5, 2.0, 3.0],
            "step_time_mean_s": [1.0, 2.0, 3.0],
            "rank": [1.0, 2.0, np.nan],
        }
    )
    lines = frame_csv(frame).splitlines()
    assert lines[1:] == ["256,1.5,1.0,1", ",2.0,2.0,2", "8,3.0,3.0,"]
    # cut into pieces, every piece reads the same way
    assert "".join(csv_chunks(frame, rows=1)) == frame_csv(frame)
