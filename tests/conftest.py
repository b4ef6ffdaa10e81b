"""Shared fixtures: where the real traces are (../shared/traces beside the checkout, as in CI)."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

# CI runs the property tests on a fixed seed (HYPOTHESIS_PROFILE=ci, set by .ci/run): a landing must not
# depend on which examples a random draw found. Local runs keep drawing new examples to find new bugs.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

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
