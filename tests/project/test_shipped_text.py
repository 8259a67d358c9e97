"""What ships says why, not when: no issue numbers, sessions, run dates or commit hashes.

Docstrings, comments, printed text, examples, the Makefile and the documentation describe
the code as it is. The history of how it got there (which issue asked for what, what was
measured on which day, which commit changed it) belongs in ``CHANGELOG.md`` and in commit
messages. This test scans the shipped text files that git tracks (data files excluded:
JSON, fuzz corpora, seeds and regressions, conformance vectors, Parquet, lock files) for:

* an issue reference: ``issue 14``, ``issues 6, 14 and 16``, ``#14``;
* a commit hash introduced by a word such as "commit", "of", "since" or "change" (``the CI
  run of d9b90fe``); a hash qualified by its repository (``apache/kafka@1eb7644...``) names
  an upstream source and is allowed;
* a run date (``(2026-11-23, 2-core VM)``); dates that are data (a rolled log's name, a
  log4j or ISO timestamp, a path, a quoted value) are allowed;
* "this session", "last session", "the helper" (the one who measured something).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import NamedTuple

import paths
import pytest

ROOT = paths.ROOT

# What is scanned: the shipped text under these paths, as git tracks it.
SCANNED = (
    "python",
    "rust",
    "examples",
    "benches",
    "tests",
    "fuzz/python",
    "fuzz/rust",
    "fuzz/run",
    "fuzz/minimize",
    "Makefile",
    "README.md",
    "docs",
    ".ci",
    "pyproject.toml",
    "Cargo.toml",
)
# Data, not prose: skipped.
DATA_SUFFIXES = (".json", ".parquet", ".lock", ".proptest-regressions")
DATA_FOLDERS = ("fuzz/corpus/", "fuzz/seeds/", "fuzz/regressions/", "tests/vectors/")
SKIPPED_FILES = ("CHANGELOG.md", "tests/project/test_shipped_text.py")

# A line break and the next line's comment leader (``//``, ``///``, ``//!``, ``#``, ``*``,
# ``--``), if any: a phrase wrapped across comment lines is still one phrase.
_NEWLINE = r"\n[ \t]*(?:(?://[/!]?|#|\*|--)[ \t]*)?"
# Between two words of a phrase: blanks, or a line break.
_GAP = r"(?:[ \t]+|[ \t]*" + _NEWLINE + ")"

PATTERNS: dict[str, re.Pattern[str]] = {
    # "issue 14", "Issues 6, 14 and 16", "issue #14", also wrapped onto the next line.
    "issue": re.compile(r"(?i)\bissues?" + _GAP + r"#?\d+\b"),
    # "#14" as an issue or pull-request reference; not "#1" (a list item), "&#39;" (an
    # HTML entity), "page#12" (a URL fragment), "color: #222" or "fill='#222'" (CSS).
    "issue #": re.compile(r"(?<![\w&#/:='\"])(?<!: )#\d{2,}(?![\w-])"),
    # A commit hash: 7 to 40 lowercase hex digits with at least one digit and one letter
    # (so no word such as "defaced" and no plain number), a whole token (not part of a
    # float such as 1.7976931348623157e308, a path or an ``owner/repo@hash``), right after
    # a word that introduces a revision, perhaps across punctuation or a line break.
    "commit": re.compile(
        r"(?i:\b(?:commits?|of|since|at|in|on|from|before|after|until|change|run|build"
        r"|revision|rev|sha|hash|tag|merge))"
        r"(?:[ \t,:;(`'\"]|" + _NEWLINE + r")+"
        r"(?<![\w.@/])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])(?![0-9]+e[0-9]+(?![0-9a-f]))"
        r"[0-9a-f]{7,40}(?![\w-])"
    ),
    # A date in prose: "(2026-11-23, 2-core VM)", "| 2026-11-26 |". Not a date that is data:
    # inside a name or path ("kafka-request.log.2024-06-03-17", "traffic/2024-06-03/"),
    # a log4j or ISO timestamp ("[2024-06-03 00:00:00,000]", "2024-06-03T00:00:01Z"), a
    # date with its time ("2024-06-03 00:00:00 UTC") or a quoted value ("'2024-06-03'").
    "date": re.compile(
        r"(?<![\w./\\\[\-'\"])20\d\d-[01]\d-[0-3]\d(?![\w/\\:'\"-]|\.\w|[ T]\d\d:|,\d\d\d)"
    ),
    # Who did it, and when: "this session", "the last session", "the helper measured".
    "session": re.compile(r"(?i)\b(?:this|last|previous)" + _GAP + r"session\b"),
    "helper": re.compile(
        r"(?i)\bthe" + _GAP + r"helper\b(?!" + _GAP + r"(?:function|fn|method|class|module"
        r"|thread|type|struct|trait|closure|below|above)\b)"
    ),
}


class Finding(NamedTuple):
    """One match: where it is, which pattern, and the text matched."""

    path: str
    line: int
    kind: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.kind}: {self.text!r}"


def findings_in(text: str, path: str = "<text>") -> list[Finding]:
    """Every match of :data:`PATTERNS` in ``text``, by line."""
    found = [
        Finding(path, text.count("\n", 0, m.start()) + 1, kind, " ".join(m.group().split()))
        for kind, pattern in PATTERNS.items()
        for m in pattern.finditer(text)
    ]
    return sorted(found, key=lambda f: (f.line, f.kind))


def shipped_files(root: Path = ROOT) -> list[str]:
    """The tracked text files that ship (see :data:`SCANNED`), relative to ``root``."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--", *SCANNED],
            capture_output=True,
            check=True,
            timeout=60,  # bounds a hang only
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("needs a git checkout")
    names = [name for name in listed.decode().split("\0") if name]
    return [
        name
        for name in names
        if not name.endswith(DATA_SUFFIXES)
        and not name.startswith(DATA_FOLDERS)
        and name not in SKIPPED_FILES
        and Path(name).name != "CHANGELOG.md"
    ]


def findings_in_tree(root: Path = ROOT, skip: frozenset[str] = frozenset()) -> list[Finding]:
    """Every finding in the shipped text files under ``root`` but those in ``skip``."""
    found: list[Finding] = []
    for name in shipped_files(root):
        if name in skip:
            continue
        path = root / name
        if not path.is_file():  # deleted in the work tree, not yet in the index
            continue
        data = path.read_bytes()
        if b"\0" in data:  # binary
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        found.extend(findings_in(text, name))
    return found


def test_the_shipped_text_names_no_issue_session_date_or_commit() -> None:
    found = findings_in_tree()
    assert not found, (
        "shipped text names history (move it to CHANGELOG.md or a commit message; say why,"
        " in the present tense):\n" + "\n".join(map(str, found))
    )


# -- the patterns themselves -------------------------------------------------------------

MUST_MATCH = [
    ("issue", "# The demo times the floor job of issue 14"),
    ("issue", "(issue 14: at most 3x)"),
    ("issue", "Where issues 6, 14 and 16 set a target"),
    ("issue", "a soak on a simulated clock (Issue 11 §3)"),
    ("issue", "the kernel (see issue #14)"),
    ("issue", "//! the low end of the\n//!   issue\n//! 14's busy broker"),
    ("issue #", "fixed in #123, see there"),
    ("issue #", "(#14)"),
    ("commit", "the fresh-clone CI of 55c2a96, on a quiet machine"),
    ("commit", "in the CI run of d9b90fe two commits earlier"),
    ("commit", "the kernel before this change, 3f6c641, and after it"),
    ("commit", "since commit `1a2b3c4d5e`"),
    ("commit", "in the run of\n  66e842d the day before"),
    ("commit", "# as in the run of\n# 66e842d the day before"),
    ("date", "Measured (2026-11-23, 2-core VM): 35.3 MiB"),
    ("date", "| input | back-test | floor job | ratio | target | 2026-11-26 |"),
    ("date", "2026-11-25; CPU time moves less"),
    ("date", "measured on 2026-11-24."),
    ("date", "(the fresh-clone CI of 55c2a96, 2026-11-26, 20:14-20:35)"),
    ("session", "alternated in this session on a quiet machine"),
    ("session", "as the last session found"),
    ("session", "# measured in this\n# session"),
    ("helper", "the helper measured 3% less"),
    ("helper", "The helper tried a prefetch"),
]

MUST_NOT_MATCH = [
    # issue: the verb, and words that merely contain it
    "whatever value it found, it issues `fence(SeqCst)`",
    "tissue 14",
    "issues with the clock",
    # issue #: list items, entities, URL fragments, CSS colours, Rust raw strings
    "#1 the first step",
    "don&#39;t",
    "https://example.org/page#12",
    "body { color: #222; max-width: 1100px; }",
    "<rect fill='#222222'/>",
    'let s = r#"12"#;',
    # commit: numbers, floats, words, upstream hashes, hashes not introduced by a word
    "producer_byte_rate of 1048576 bytes",
    "a value of 1.7976931348623157e308",
    "at 550e8400 exactly",
    "the page was defaced in the night",
    "At the pinned commit (`apache/kafka@1eb7644349cb07139d6a3c1ad1986979647cac99`,",
    "added (apache/kafka b5f90daf, KAFKA-10162, first released in 2.7.0)",
    "cc e1fbdad7972aef7657eaeecdd8ae46fad70d0d7e15e9e0ab4658c19df9069039 # shrinks",
    "const MAGIC: u32 = 0x7f000000;",
    "in 0xdeadbeef0",
    "in a1b2c3d-4e5f",
    # date: dates that are data
    "kafka-request.log.2024-06-03-17",
    "(``kafka-request.log.2024-06-03-00.gz``)",
    "[2024-06-03 00:00:00,000] DEBUG Completed request:",
    "2024-06-03T00:00:01Z,b1,alice,,fetch,300,,iso-time",
    "--traffic hdfs:///traffic/2024-06-03/ --quotas quotas.json",
    "--out hdfs:///backtests/2024-06-03",
    "T0 = 1_717_372_800_000  # 2024-06-03 00:00:00 UTC",
    "iso = ...  # 2024-06-03T00:00:00.123",
    'assert "e.g. \'[2024-06-03" in text',
    "date = '2024-06-03'",
    "written to 2024-06-03.csv",
    "version 1.2024-06",
    # session: Spark's and the proxy's sessions
    "spark = SparkSession.builder.getOrCreate()",
    "a session kquota starts reads times as UTC",
    "uses that session as it is",
    "the fetch session's epoch",
    '@pytest.fixture(scope="session")',
    # helper: a helper that is code
    "the helper function below parses it",
    "the helper thread wakes up",
    "helpers of the parser",
]


@pytest.mark.parametrize(("kind", "text"), MUST_MATCH)
def test_a_planted_reference_is_found(kind: str, text: str) -> None:
    assert kind in {f.kind for f in findings_in(text)}, text


@pytest.mark.parametrize("text", MUST_NOT_MATCH)
def test_a_near_miss_is_not_found(text: str) -> None:
    assert findings_in(text) == []


def test_a_finding_names_its_file_line_and_text() -> None:
    text = 'def f() -> None:\n    """Fast.\n\n    Measured on 2026-11-23 in the run of d9b90fe.\n'
    assert [str(f) for f in findings_in(text, "python/kquota/f.py")] == [
        "python/kquota/f.py:4: commit: 'of d9b90fe'",
        "python/kquota/f.py:4: date: '2026-11-23'",
    ]
