"""The layout of ``DIR/requests/`` and how to read it back, one row per request and scenario.

``DIR/requests/`` holds one row per request: every input column once, its input position and
sensor tags, then :data:`RESULTS`, a list with one entry per scenario in the order of
``--scale`` (a struct of :data:`~kquota.backtest.options.RESULT_COLUMNS`: the scenario's
label and that scenario's throttles, sending time and added latency). Each input column is
written once however many scenarios there are.

Most questions are per scenario: :func:`scenario_rows` (Spark) and :func:`read_requests`
(pandas) give one row per request and scenario, the input columns beside the scenario's
results, as flat columns::

    requests = scenario_rows(spark.read.parquet("out/requests"))
    requests.where("scenario = 'x2' and throttle_ms > 0").groupBy("client_id").count()

Nothing here needs Spark until a Spark function is called.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pyarrow as pa  # type: ignore[import-untyped]

from kquota.backtest.frames import ADDED_LATENCY, MUTATION_RESULTS, SENT
from kquota.backtest.options import RESULT_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["RESULTS", "read_requests", "results_type", "scenario_rows", "wide_results"]

RESULTS: Final = "results"
"""The column of ``DIR/requests/`` with every scenario's results of the request (a list of
structs, one per scenario in ``--scale`` order)."""


def scenario_rows(requests: DataFrame, scenario: int | None = None) -> DataFrame:
    """``DIR/requests/`` (as Spark read it) as one row per request and scenario: the
    request's columns, then its :data:`RESULTS` entry's fields as columns (``scenario``,
    ``throttle_ms``, ...). ``scenario``: only that scenario's rows (its index in
    ``--scale``), without expanding the others."""
    from pyspark.sql import functions as F

    kept = [F.col(f"`{c}`") for c in requests.columns if c != RESULTS]
    if scenario is None:
        return requests.select(*kept, F.inline(F.col(RESULTS)))
    return requests.select(*kept, F.col(RESULTS)[scenario].alias("_kq_one")).select(
        *kept, "_kq_one.*"
    )


def read_requests(path: str | Path, scenario: str | None = None) -> pd.DataFrame:
    """``DIR/requests/`` as a pandas frame of one row per request and scenario (scenario by
    scenario, in ``--scale`` order), as :func:`scenario_rows` gives it; ``scenario``: only
    that scenario's rows (its label, such as ``x2``; only those are built). For outputs
    that fit in memory."""
    import pyarrow.compute as pc  # type: ignore[import-untyped]
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    table = pq.read_table(str(path))
    nested = table.column(RESULTS).combine_chunks()
    rest = table.drop_columns([RESULTS])
    if not table.num_rows:
        fields = nested.type.value_type
        empty = {f.name: pa.array([], f.type) for f in fields}
        return pa.table({**{n: rest.column(n) for n in rest.column_names}, **empty}).to_pandas()
    lengths = nested.value_lengths().to_numpy(zero_copy_only=False)
    per_row = int(lengths[0])
    if not (lengths == per_row).all():
        raise ValueError(f"{str(path)!r}: the rows do not all have {per_row} scenario results")
    values = nested.flatten()  # row-major: the scenarios of row 0, then of row 1, ...
    if scenario is None:
        order = np.arange(len(values)).reshape(-1, per_row).T.ravel()  # scenario-major
    else:  # only that scenario's entries are taken, in row order
        label = pc.fill_null(pc.equal(values.field(RESULT_COLUMNS[0]), scenario), False)
        order = np.flatnonzero(label.to_numpy(zero_copy_only=False))
    rows = order // per_row  # entry i belongs to row i // per_row
    columns = {n: rest.column(n).take(pa.array(rows)) for n in rest.column_names}
    ordered = values.take(pa.array(order))
    for field in ordered.type:
        columns[field.name] = ordered.field(field.name)
    return pa.table(columns).to_pandas()


def results_type(mutations: bool) -> pa.DataType:
    """The Arrow type of :data:`RESULTS`: a list of structs of the scenario's label and its
    results (with ``mutations`` also :data:`~kquota.backtest.frames.MUTATION_RESULTS`)."""
    names = [*RESULT_COLUMNS[1:], *(MUTATION_RESULTS if mutations else ())]
    fields = [pa.field(RESULT_COLUMNS[0], pa.string())]
    fields += [pa.field(name, _INT64.get(name, pa.int32())) for name in names]
    return pa.list_(pa.struct(fields))


def wide_results(
    labels: pa.Array, results: list[dict[str, np.ndarray]], mutations: bool
) -> pa.Array:
    """The :data:`RESULTS` column of ``n`` requests: ``labels`` (one string per scenario)
    and, per scenario, its result arrays of length ``n`` by name (the fields of
    :func:`results_type` after the label)."""
    k = len(results)
    n = len(next(iter(results[0].values()))) if k else 0
    struct = results_type(mutations).value_type
    fields = [labels.take(pa.array(np.tile(np.arange(k, dtype=np.int32), n)))]
    for field in list(struct)[1:]:
        # row-major: request i's entries are i*k .. i*k+k-1
        stacked = np.stack([np.asarray(r[field.name]) for r in results], axis=1).ravel()
        fields.append(pa.array(stacked, field.type))
    values = pa.StructArray.from_arrays(fields, fields=list(struct))
    offsets = pa.array(np.arange(0, k * n + 1, k, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, values)


_INT64: Final = {SENT: pa.int64(), ADDED_LATENCY: pa.int64()}
"""The results kept in 64 bits (times); the others are 32-bit."""
