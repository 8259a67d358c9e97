"""A griffe extension for the API reference: kquota's docstrings are written with Sphinx
roles (``:class:`QuotaManager```, ``:meth:`~QuotaManager.record```) and reST literal
blocks (a paragraph ending in ``::``). Markdown knows neither, so each role becomes inline
code showing its target (the last part of it with ``~``, as Sphinx shows it) and ``::``
becomes ``:`` before the indented block, which Markdown already renders as code."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|data|mod|exc|obj|const):`(~?)([^`]+)`")
LITERAL = re.compile(r"::$", re.MULTILINE)


def _role(match: re.Match[str]) -> str:
    short, target = match.groups()
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


def markdown(text: str) -> str:
    return LITERAL.sub(":", ROLE.sub(_role, text))


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
