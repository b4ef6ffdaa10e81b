"""How long the HTML (and Markdown) report of the real 27 MB H200 sweep trace takes, end to end in a fresh
process as a user runs it, next to a peer measured in the same run: `traceinsight analyze --format json` of
the same trace (the same analysis, without plots). The report must take under 5 s (issue 4). Also splits one
in-process run into analysis and rendering, so a regression can be placed. Each time is given as wall seconds and as
CPU seconds (the process's, or its children's): on a loaded machine compare the CPU ratios.

    .venv/bin/python benchmarks/report_speed.py [--runs 3] [--trace PATH] [--meta PATH]

Prints a table and writes benchmarks/results/report_speed.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO / "examples" / "h200" / "flashinfer_decode_sweep.pt.trace.json.gz"
DEFAULT_META = REPO / "examples" / "h200" / "flashinfer_decode_sweep.meta.json.gz"
LIMIT_S = 5.0

# Used when the CLI has no --format html yet: the same library calls in a fresh process.
_INLINE = """
import sys
from pathlib import Path
import traceinsight
from traceinsight.report.files import write_report
a = traceinsight.open(Path(sys.argv[1]), meta=[Path(p) for p in sys.argv[3:]])
write_report(a.documents(), sys.argv[2].rsplit('.', 1)[1], Path(sys.argv[2]))
"""


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one run of `cmd`."""
    t0, c0 = time.perf_counter(), _children_cpu()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0, _children_cpu() - c0


def cli_has_html(cli: str) -> bool:
    out = subprocess.run([cli, "analyze", "--help"], capture_output=True, text=True).stdout
    return "html" in out


def in_process(trace: Path, meta: list[Path], out_dir: Path, clock: Any = time.perf_counter) -> dict[str, float]:
    """One run split into stages (s of `clock`: wall, or time.process_time for CPU): analysis, its tables and JSON
    documents, HTML rendering, Markdown rendering."""
    import traceinsight
    from traceinsight.report.files import render_report, report_inputs

    t0 = clock()
    result = traceinsight.open(trace, meta=meta)
    t1 = clock()
    src = result.documents()
    report_inputs(src)
    t2 = clock()
    render_report(src, "html", out_dir / "r.html")
    t3 = clock()
    render_report(src, "md", out_dir / "r.md")
    t4 = clock()
    return {"analysis_s": t1 - t0, "tables_json_and_gantt_s": t2 - t1, "html_render_s": t3 - t2,
            "md_render_s": t4 - t3}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--meta", type=Path, action="append", default=None)
    args = ap.parse_args()
    meta = args.meta if args.meta is not None else ([DEFAULT_META] if DEFAULT_META.is_file() else [])
    cli = str(Path(sys.executable).with_name("traceinsight"))
    tmp = Path(tempfile.mkdtemp(prefix="report-speed-"))
    meta_args = [a for m in meta for a in ("--meta", str(m))]
    html_out, md_out = tmp / "report.html", tmp / "report.md"
    if cli_has_html(cli):
        cases = {
            "analyze --format html": [cli, "analyze", str(args.trace), *meta_args, "--format", "html",
                                      "--out", str(html_out)],
            "analyze --format md": [cli, "analyze", str(args.trace), *meta_args, "--format", "md",
                                    "--out", str(md_out)],
        }
    else:
        inline = [sys.executable, "-c", _INLINE]
        cases = {
            "analyze + write_report html": [*inline, str(args.trace), str(html_out), *map(str, meta)],
            "analyze + write_report md": [*inline, str(args.trace), str(md_out), *map(str, meta)],
        }
    peer = "peer: analyze --format json"
    cases[peer] = [cli, "analyze", str(args.trace), *meta_args, "--format", "json", "--out", str(tmp / "a.json")]
    times: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    timed(cases[peer])  # warm the page cache and .pyc files
    for _ in range(args.runs):  # interleave, so drift hits every case alike
        for name, cmd in cases.items():
            wall, used = timed(cmd)
            times[name].append(wall)
            cpu[name].append(used)
    stages = in_process(args.trace, meta, tmp)
    stages_cpu = in_process(args.trace, meta, tmp, clock=time.process_time)
    peer_med, peer_cpu = statistics.median(times[peer]), statistics.median(cpu[peer])
    rows = []
    print(f"{'case':34} {'median s':>9} {'min s':>7} {'x peer':>7} {'CPU s':>7} {'x peer':>7}")
    for name, ts in times.items():
        med, med_cpu = statistics.median(ts), statistics.median(cpu[name])
        rows.append({"case": name, "median_s": med, "min_s": min(ts), "runs": ts, "ratio_to_peer": med / peer_med,
                     "median_cpu_s": med_cpu, "cpu_runs": cpu[name], "cpu_ratio_to_peer": med_cpu / peer_cpu})
        print(f"{name:34} {med:9.2f} {min(ts):7.2f} {med / peer_med:7.2f} {med_cpu:7.2f} {med_cpu / peer_cpu:7.2f}")
    print("in one process (wall s): " + ", ".join(f"{k} {v:.2f}" for k, v in stages.items()))
    print("in one process (CPU s):  " + ", ".join(f"{k} {v:.2f}" for k, v in stages_cpu.items())
          + f"; HTML rendering / analysis {stages_cpu['html_render_s'] / stages_cpu['analysis_s']:.3f}")
    report = next(r for r in rows if "html" in r["case"])
    verdict = "ok" if report["median_s"] < LIMIT_S else "OVER"
    print(f"HTML report end to end: {report['median_s']:.2f} s (limit {LIMIT_S:.0f} s): {verdict}; "
          f"HTML size {html_out.stat().st_size / 1e3:.0f} kB")
    out = REPO / "benchmarks" / "results" / "report_speed.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"trace": str(args.trace), "meta": [str(m) for m in meta],
                               "machine": platform.platform(), "cpus": os.cpu_count(), "limit_s": LIMIT_S,
                               "results": rows, "stages_s": stages, "stages_cpu_s": stages_cpu,
                               "html_bytes": html_out.stat().st_size}, indent=2) + "\n")
    print(f"wrote {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
