"""The optional parts of kquota and the extras that install what they need.

``pip install kquota`` brings the library, ``kquota configs``, ``kquota conformance``,
``kquota proxy`` and the metrics; the back-test and the proxy's capture need more
(``pyproject.toml``'s ``[project.optional-dependencies]``). A part used without its extra
raises :class:`~kquota.exceptions.MissingExtraError`, whose one line names the extra to
install.
"""

from __future__ import annotations

import importlib.util
from typing import Final

from kquota.exceptions import MissingExtraError

EXTRAS: Final[dict[str, tuple[str, ...]]] = {
    "spark": ("pyspark", "pandas", "pyarrow", "matplotlib"),
    # The capture (--capture) writes Parquet in the back-test's traffic schema.
    "proxy": ("pyarrow",),
    # The quota store on a compacted Kafka topic (kafka://HOST:PORT/TOPIC).
    "kafka": ("confluent_kafka",),
}
"""Each extra and the top-level modules it installs (each distribution's name is its
module's; a test holds this table to ``pyproject.toml``)."""


def missing(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be found here (none imported to find out)."""
    return [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]


def needs(extra: str, modules: list[str]) -> str:
    """What to say of a part used without ``modules`` of ``extra``."""
    return (
        f"needs the {extra} extra ({', '.join(modules)} not installed):"
        f' pip install "kquota[{extra}]"'
    )


def require(extra: str, feature: str) -> None:
    """Raise :class:`~kquota.exceptions.MissingExtraError` if a module of ``extra`` is
    missing; ``feature`` names what needs it (``"kquota proxy"``)."""
    if modules := missing(extra):
        raise MissingExtraError(f"{feature} {needs(extra, modules)}")
