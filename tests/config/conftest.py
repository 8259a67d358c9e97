"""``store``: a SQLite store file holding two entities, for the ``kquota configs`` tests
(``test_cli_configs*.py``). ``test_config_store.py`` has a ``store`` of its own: a
``QuotaStore`` on each backend."""

from __future__ import annotations

from pathlib import Path

import pytest
from kquota.cli import main


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store holding two entities (version 2)."""
    path = tmp_path / "quotas.sqlite"
    for args in (
        ["--add-config", "producer_byte_rate=1048576", "--user", "alice"],
        ["--add-config", "request_percentage=50", "--user", "bob", "--client", "app-1"],
    ):
        assert main(["configs", "--store", str(path), "--alter", *args]) == 0
    return path
