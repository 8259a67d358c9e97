"""atheris target ``quota_file``: the quota file parser (``kquota.config.model``).

The input is the file's bytes. ``QuotaConfig.load`` must either return a configuration or
raise :class:`~kquota.exceptions.QuotaFileError` with one line naming the file; nothing
else may escape. A file it accepts must also be usable everywhere a quota file goes:
written back (``dumps``) it reads as the same configuration, every quota manager builds
from it, and a memory store and a SQLite store hold it unchanged (``--import``).
"""

from __future__ import annotations

import json

from fuzz_common import check_message, scratch
from kquota.config.model import PROPERTIES, QuotaConfig
from kquota.config.store import MemoryStore, SQLiteStore
from kquota.exceptions import QuotaFileError


def check_accepted(config: QuotaConfig) -> None:
    """What every accepted configuration must allow."""
    text = config.dumps()
    again = QuotaConfig.from_json(json.loads(text))
    assert again.window == config.window
    assert again.by_entity() == config.by_entity()
    assert again.dumps() == text, "dumps is not stable"
    for quota_type in PROPERTIES.values():
        manager = config.manager(quota_type)
        built = {(e.user, e.client_id, v) for e, v in manager.quotas()}
        assert built == {(e.user, e.client_id, v) for e, v in config.quotas(quota_type)}
    memory = MemoryStore(config).read()
    assert memory.version == 1
    assert memory.config.by_entity() == config.by_entity()
    store_path = scratch() / "store.sqlite"
    store_path.unlink(missing_ok=True)
    store = SQLiteStore(store_path)
    assert store.replace(config) == 1
    stored = store.read().config
    assert stored.window == config.window
    assert stored.by_entity() == config.by_entity()


def test_one_input(data: bytes) -> None:
    path = scratch() / "quotas.json"
    path.write_bytes(data)
    try:
        config = QuotaConfig.load(path)
    except QuotaFileError as exc:
        check_message(exc, names=str(path))
        return
    check_accepted(config)
