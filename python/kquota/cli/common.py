"""What every ``kquota`` subcommand shares: exit statuses, error reporting, and running a
parsed command."""

from __future__ import annotations

import argparse
import io
import sys

from kquota._extras import missing, needs

EXIT_OK = 0
"""Success."""
EXIT_MISMATCH = 1
"""The command ran and found a difference (e.g. a conformance mismatch)."""
EXIT_BAD_INPUT = 2
"""Bad input: a missing or malformed file, a bad value, an unusable store."""


class ExamplesFormatter(argparse.HelpFormatter):
    """argparse's help, with an epilog of examples (text starting ``example``) kept line for
    line as written rather than wrapped like the description."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("example"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def fail(command: str, message: object) -> int:
    """Print one clear line on stderr and return :data:`EXIT_BAD_INPUT`.

    Line breaks in the message (a file name given with one) are printed escaped.
    """
    text = str(message).replace("\r", "\\r").replace("\n", "\\n")
    print(f"kquota {command}: {text}", file=sys.stderr)
    return EXIT_BAD_INPUT


def escape_stdout() -> None:
    """Print undecodable bytes escaped, as Python's stderr does, instead of failing: file
    names from the command line may hold them (lone surrogates in Python)."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed subcommand (``args.run``) and return its exit status; one line naming
    the extra to install (status 2) when its ``args.extra`` is missing.

    Both ``kquota`` and ``python -m kquota.backtest`` (the spark-submit entry point, which
    parses the ``backtest`` arguments alone) run their command through this function.
    """
    if (extra := getattr(args, "extra", None)) and (modules := missing(extra)):
        return fail(args.command, needs(extra, modules))
    try:
        status: int = args.run(args)
    except OSError as exc:  # a safety net: each command names its own paths first
        return fail(args.command, _os_error(exc))
    return status


def _os_error(exc: OSError) -> str:
    """``'PATH': reason`` for an ``OSError`` that names a file, else its message."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    if exc.filename is None:
        return reason
    names = repr(str(exc.filename))
    if exc.filename2 is not None:
        names += f" -> {str(exc.filename2)!r}"
    return f"{names}: {reason}"
