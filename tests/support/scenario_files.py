"""Conformance scenario files written by the tests."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def write_json(path: Path, document: object) -> Path:
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def write_changed(path: Path, document: dict[str, Any], change: Callable[[Any], object]) -> Path:
    """A copy of ``document`` after ``change``, written to ``path``."""
    changed = copy.deepcopy(document)
    change(changed)
    return write_json(path, changed)
