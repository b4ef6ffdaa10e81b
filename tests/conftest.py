"""Shared fixtures: where the real traces are (../shared/traces beside the checkout, as in CI)."""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

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


def read_json(path: Path) -> Any:
    """A JSON file, plain or gzipped (told by its magic bytes)."""
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def sidecar_in(folder: Path, stem: str) -> dict[str, Any]:
    """The sidecar `stem`.sidecar.json[.gz] in `folder`."""
    for suffix in (".sidecar.json", ".sidecar.json.gz"):
        if (folder / f"{stem}{suffix}").exists():
            return read_json(folder / f"{stem}{suffix}")  # type: ignore[no-any-return]
    raise AssertionError(f"no sidecar for {stem} in {folder}")


def ncu_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a raw-page Nsight Compute CSV (`ncu --csv --page raw`), read as plain CSV: its header row after
    any log lines, one dict per profiled kernel (the row of units under the header left out)."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.reader(lines[start:]))
    return [dict(zip(rows[0], r, strict=True)) for r in rows[2:]]  # rows[1] holds the units


def ncu_num(cell: str) -> float:
    """A number cell of an Nsight Compute CSV ('1,234.5')."""
    return float(cell.replace(",", ""))


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
