"""Where things are, for the tests and their helpers wherever they sit in ``tests/``."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
"""``tests/``."""
SUPPORT = TESTS / "support"
"""``tests/support/``: helpers, reference models, generators (on ``sys.path``)."""
ROOT = TESTS.parent
"""The repository."""
SHARED = ROOT.parent / "shared"
"""``../shared`` beside the repository."""
SHARED_VECTORS = SHARED / "conformance"
"""The conformance vectors from Kafka's own tests."""
VECTORS = TESTS / "vectors"
"""kquota's own vectors, with Kafka's answers."""
