"""Reading values out of a Prometheus text scrape."""

from __future__ import annotations

import re


def client_sample(text: str, name: str, client_id: str) -> float:
    """The value of ``name`` for the client-id sensor of ``client_id`` (user tag empty) in
    a Prometheus scrape."""
    for line in text.splitlines():
        match = re.fullmatch(name + r"\{(.*)\} (\S+)", line)
        if match and sorted(match.group(1).split(",")) == [
            f'client_id="{client_id}"',
            'user=""',
        ]:
            return float(match.group(2))
    raise AssertionError(f"no {name} for client {client_id!r} in the scrape:\n{text}")
