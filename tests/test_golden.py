"""Today's analysis of every shared and committed trace equals its golden snapshot (tests/golden.py): findings
with their named causes, each launch's split state, phase and schedule model, each step's wall time, and every
rule's outcome. A change meant to alter results regenerates the goldens (`python tests/golden.py NAME`) and says
why in its commit; anything else that changes one is a regression."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
from golden import CASES, analyze_case, path


def _first_difference(got: Any, want: Any, where: str = "") -> str | None:
    if type(got) is not type(want):
        return f"{where}: {got!r} != {want!r}"
    if isinstance(got, dict):
        for k in sorted(set(got) | set(want)):
            d = _first_difference(got.get(k), want.get(k), f"{where}.{k}")
            if d:
                return d
        return None
    if isinstance(got, list):
        for i, (g, w) in enumerate(zip(got, want, strict=False)):
            d = _first_difference(g, w, f"{where}[{i}]")
            if d:
                return d
        return f"{where}: {len(got)} items != {len(want)}" if len(got) != len(want) else None
    return None if got == want else f"{where}: {got!r} != {want!r}"


@pytest.mark.parametrize("name", list(CASES))
def test_analysis_equals_its_golden(name: str) -> None:
    want = json.loads(gzip.decompress(path(name).read_bytes()))
    got = analyze_case(name)
    assert got == want, _first_difference(got, want)
