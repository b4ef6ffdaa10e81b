"""The Nsight Systems ingest builds its Arrow columns from numpy buffers, never from Python values through
`pa.array` / `pa.scalar` (nor `pyarrow.compute` with a Python number), which import pandas when it is installed: a
third of a CPU-second of every `analyze` of an export. Checked in a fresh process, the tables read whole and a slice
at a time (the store inserting the slices)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import FOREIGN, H200

PROBE = """
import json, sys
from pathlib import Path
from traceinsight.ingest import nsys_sqlite
from traceinsight.ingest.store import TraceDB
path, rows = Path(sys.argv[1]), (int(sys.argv[2]) or None)
db = TraceDB()
db.add(nsys_sqlite.read(path, rows), path, consume=True)
n = db.sql("SELECT count(*) FROM kernels").fetchone()[0]
print(json.dumps({"kernels": n, "pandas": "pandas" in sys.modules}))
"""


@pytest.mark.parametrize("path", [H200 / "flashinfer_decode.sqlite", FOREIGN / "fuser_h200_report1.sqlite"],
                         ids=lambda p: p.name)
@pytest.mark.parametrize("slice_rows", [0, 1000])
def test_the_nsys_ingest_does_not_import_pandas(path: object, slice_rows: int) -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, str(path), str(slice_rows)], capture_output=True, text=True,
                          check=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["kernels"] > 0
    assert got["pandas"] is False
