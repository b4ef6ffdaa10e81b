"""Today's analysis of every shared and committed trace equals its golden snapshot (tests/golden.py): findings
with their named causes, each launch's split state, phase and schedule model, each step's wall time, and every
rule's outcome. A change meant to alter results regenerates the goldens (`python tests/golden.py NAME`) and says
why in its commit; anything else that changes one is a regression.

The same analysis, saved as its tables (`analyze --save`: a Parquet dataset) and read back by `traceinsight report`
(report/saved.py), gives back the JSON document `analyze` reads from the tables in its own database (every step,
and the steps that matter) and its text report exactly: the reports need nothing but the tables."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from golden import CASES, analyze_golden, path, snapshot_json

from traceinsight.ingest.parquet import export_parquet
from traceinsight.report import saved
from traceinsight.report.console import make_console
from traceinsight.report.json_doc import STEPS_ALL, STEPS_SELECTED
from traceinsight.report.tables import write_tables
from traceinsight.report.text import render_doc


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


def _plain(doc: dict[str, Any]) -> Any:
    return orjson.loads(orjson.dumps(doc, option=orjson.OPT_NON_STR_KEYS))


def _text(doc: dict[str, Any]) -> str:
    out = io.StringIO()
    render_doc(doc, make_console(file=out, no_color=True, width=140), max_steps=None)
    return out.getvalue()


@pytest.mark.parametrize("name", list(CASES))
def test_analysis_equals_its_golden(name: str, tmp_path: Path) -> None:
    want = json.loads(gzip.decompress(path(name).read_bytes()))
    db, a = analyze_golden(name)
    got = snapshot_json(a)
    assert got == want, _first_difference(got, want)

    write_tables(db, [a])
    export_parquet(db, [a.trace_id], tmp_path, options={"analysis": True})
    back, here = saved.open_saved(tmp_path), saved.of_analyses(db.con, [a])
    for steps in (STEPS_ALL, STEPS_SELECTED):
        doc, again = _plain(saved.document(here, a.trace_id, steps)), _plain(saved.document(back, 0, steps))
        assert again == doc, f"saved, --steps {steps}: {_first_difference(again, doc)}"
    assert _text(saved.document(back, 0, STEPS_ALL)) == _text(saved.document(here, a.trace_id, STEPS_ALL))
