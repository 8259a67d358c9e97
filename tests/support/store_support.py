"""What the quota-store tests (``tests/config/test_config_store*.py``) share: a few
entities, a change set of one alteration, a file's digest and a Python child process."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
from pathlib import Path

from kquota import DEFAULT, Entity
from kquota.config.model import AnyEntity, IpEntity
from kquota.config.store import Alteration, ChangeSet

ALICE = Entity(user="alice")
BOB_APP = Entity(user="bob", client_id="app-1")
DEFAULT_CLIENT = Entity(client_id=DEFAULT)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def change(entity: AnyEntity, add: dict[str, float] | None = None, *delete: str) -> ChangeSet:
    return ChangeSet((Alteration(entity, add or {}, delete),))


def run_python(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


IP_1 = IpEntity("10.0.0.1")
IP_6 = IpEntity("2001:db8::1")
DEFAULT_IP = IpEntity(DEFAULT)
