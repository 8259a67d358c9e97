"""What every ``kquota`` subcommand shares: exit statuses and error reporting."""

from __future__ import annotations

import sys

EXIT_OK = 0
"""Success."""
EXIT_MISMATCH = 1
"""The command ran and found a difference (e.g. a conformance mismatch)."""
EXIT_BAD_INPUT = 2
"""Bad input: a missing or malformed file, a bad value, an unusable store."""


def fail(command: str, message: object) -> int:
    """Print one clear line on stderr and return :data:`EXIT_BAD_INPUT`.

    Line breaks in the message (a file name given with one) are printed escaped.
    """
    text = str(message).replace("\r", "\\r").replace("\n", "\\n")
    print(f"kquota {command}: {text}", file=sys.stderr)
    return EXIT_BAD_INPUT
