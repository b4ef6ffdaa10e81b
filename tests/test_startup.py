"""What a fresh `traceinsight analyze` process loads: not the heavy modules the analysis of a Kineto trace never
uses (pandas, which pyarrow imports on its first conversion of Python values or to numpy when it is installed:
a third of a second; matplotlib; scipy; streamlit). benchmarks/analyze_speed.py times the whole process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h200" / "flashinfer_decode_sweep.pt.trace.json.gz"
HEAVY = ("pandas", "matplotlib", "scipy", "streamlit")

PROBE = """
import json, runpy, sys
sys.argv = ["traceinsight", "analyze", sys.argv[1], "--no-cache"]
try:
    runpy.run_module("traceinsight", run_name="__main__")
except SystemExit:
    pass
sys.stderr.write(json.dumps(sorted({m.split(".")[0] for m in sys.modules})) + "\\n")
"""


def test_analyze_of_a_kineto_trace_loads_no_heavy_module_it_does_not_use() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE, str(EXAMPLE)], capture_output=True, text=True, check=True)
    loaded = set(json.loads(done.stderr.strip().splitlines()[-1]))
    assert "split-kv-off" in done.stdout
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
