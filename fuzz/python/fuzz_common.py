"""What the atheris targets share: a scratch folder and the checks of an error message."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

_scratch: Path | None = None


def scratch() -> Path:
    """A private temporary folder for this process, removed at exit."""
    global _scratch
    if _scratch is None:
        _scratch = Path(tempfile.mkdtemp(prefix="kquota-fuzz-"))
        atexit.register(shutil.rmtree, _scratch, ignore_errors=True)
    return _scratch


def check_message(exc: BaseException, *, names: str | None = None) -> None:
    """A clear error: one non-empty line that names ``names`` (e.g. the file) when given."""
    message = str(exc)
    assert message.strip(), f"{type(exc).__name__} with an empty message"
    assert "\n" not in message, f"{type(exc).__name__} message spans lines: {message!r}"
    if names is not None:
        assert names in message, f"{type(exc).__name__} message does not name {names}: {message}"
