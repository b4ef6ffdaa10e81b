"""What a fresh `traceinsight analyze` process loads: not the heavy modules the analysis of a Kineto trace never
uses (pandas, which pyarrow imports on its first conversion of Python values or to numpy when it is installed:
a third of a second; matplotlib; scipy; streamlit), nor, for a short trace, those it can do without (70 ms for
pyarrow.compute, 40 ms for the other commands' modules and the collectors', 40 ms for rich when the output is
not text, 15 ms for numpy.ma). benchmarks/analyze_speed.py times the whole process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "h200" / "flashinfer_decode_sweep.pt.trace.json.gz"
HEAVY = ("pandas", "matplotlib", "scipy", "streamlit")
# Modules (or packages) a short trace's analysis does without, whatever the output format.
SHORT_TRACE_NEEDS_NOT = ("pyarrow.compute", "numpy.ma", "collectors", "traceinsight.collectors",
                         "traceinsight.cli.fleet", "traceinsight.cli.dashboard")

PROBE = """
import json, runpy, sys
sys.argv = ["traceinsight", "analyze", *sys.argv[1:], "--no-cache"]
try:
    runpy.run_module("traceinsight", run_name="__main__")
except SystemExit:
    pass
sys.stderr.write(json.dumps(sorted(sys.modules)) + "\\n")
"""


def loaded_by(*args: str) -> tuple[str, set[str]]:
    """stdout of `traceinsight analyze ARGS --no-cache` in a fresh process, and the modules it loaded."""
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=True)
    return done.stdout, set(json.loads(done.stderr.strip().splitlines()[-1]))


def loaded_any(loaded: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if n in loaded or any(m.startswith(n + ".") for m in loaded))


def test_analyze_of_a_kineto_trace_loads_no_heavy_module_it_does_not_use() -> None:
    out, loaded = loaded_by(str(EXAMPLE))
    assert "split-kv-off" in out
    assert not loaded_any(loaded, HEAVY), loaded_any(loaded, HEAVY)
    assert not loaded_any(loaded, SHORT_TRACE_NEEDS_NOT), loaded_any(loaded, SHORT_TRACE_NEEDS_NOT)
    assert "rich" in loaded  # the text report is rich's: the probe sees what it imports


def test_analyze_to_json_does_not_load_rich() -> None:
    out, loaded = loaded_by(str(EXAMPLE), "--format", "json")
    assert json.loads(out)["findings"]
    assert not loaded_any(loaded, ("rich", *SHORT_TRACE_NEEDS_NOT, *HEAVY))
