"""A custom quota callback (KIP-257) in a back-test: checked on the driver, shipped to
Spark's Python workers.

The scenario managers are built where the replay runs, on the executors, each with its own
instance of the callback (``QuotaConfig.quota_callback``, ``"module:factory"``), so the
callback's module must be importable there. :func:`ship` adds its top-level package (as a
zip) or module file to the job with ``SparkContext.addPyFile``, unless it is installed in
this Python's site-packages (install it on every worker of a cluster, as kquota itself).
"""

from __future__ import annotations

import importlib.util
import sysconfig
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from kquota.callback import load_callback

__all__ = ["ship"]

_shipped: set[tuple[str, str]] = set()
"""(Spark application id, top-level module) already added to that application."""


def ship(spark: Any, spec: str) -> None:
    """Load the callback ``spec`` names once here (a bad spec fails before the job, with
    the error :func:`~kquota.load_callback` gives), then make its module importable by the
    workers of ``spark``."""
    load_callback(spec).close()
    top = spec.partition(":")[0].split(".")[0]
    found = importlib.util.find_spec(top)
    if found is None or found.origin in (None, "built-in", "frozen") or top == "kquota":
        return
    installed = {
        str(Path(p).resolve())
        for p in (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])
    }
    locations = list(found.submodule_search_locations or [])
    path = Path(locations[0] if locations else str(found.origin)).resolve()
    if any(str(path).startswith(root + "/") for root in installed):
        return
    context = spark.sparkContext
    key = (str(context.applicationId), top)
    if key in _shipped:
        return
    if locations:
        folder = Path(tempfile.mkdtemp(prefix="kquota-callback-"))
        archive = folder / f"{top}.zip"
        with zipfile.ZipFile(archive, "w") as zf:
            for file in sorted(path.rglob("*.py")):
                zf.write(file, Path(top) / file.relative_to(path))
        context.addPyFile(str(archive))
    else:
        context.addPyFile(str(path))
    _shipped.add(key)
