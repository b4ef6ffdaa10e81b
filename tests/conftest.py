"""Shared fixtures: where the real traces are (../shared/traces beside the checkout, as in CI)."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "traces"
H200 = TRACES / "h200"
FOREIGN = TRACES / "foreign"
EXAMPLES = REPO / "examples"

# Tests never read or write the user's cache (~/.cache/traceinsight): each run gets a fresh one.
os.environ["TRACEINSIGHT_CACHE_DIR"] = tempfile.mkdtemp(prefix="traceinsight-test-cache-")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="session")
def h200() -> Path:
    if not H200.is_dir():
        pytest.fail(f"real traces not found at {H200} (CI keeps ../shared beside the clone)")
    return H200


@pytest.fixture(scope="session")
def foreign() -> Path:
    if not FOREIGN.is_dir():
        pytest.fail(f"real traces not found at {FOREIGN}")
    return FOREIGN
