"""Ingest and analyze at scale, side by side with Meta's HTA and a plain `json.load`, on real-derived inputs.

Inputs are built from the real H200 captures in ../shared/traces/h200 by replication (nothing synthetic):
- Kineto JSON: the sweep trace's events copied N times; copy k has every `ts` shifted by k x (trace span + 1 ms)
  and every correlation / External id / flow id shifted by k x (largest id + 1), the header and tail once;
  sizes 100 MB, 1 GB, 4 GB of uncompressed JSON (decimal units) by default.
- Nsight Systems SQLite: the export's kernel, runtime, memcpy/memset and NVTX rows copied N times with
  shifted times and correlation ids, to 1M and 10M kernel rows.
They are written once to a scratch folder (default /tmp/traceinsight-bench, never the repository) and reused.

Each measurement runs in a fresh process (wall time, and peak RSS from wait4's rusage of that process):
  traceinsight ingest (library `load`, cache off), `traceinsight analyze --format json` with an empty cache
  (cold), the same again (repeat: a large input's analysis was kept by the cold run) and with the analysis cache off
  and the ingest cache filled (cached), HTA `TraceAnalysis(trace_dir)` + `get_gpu_kernel_breakdown
  (visualize=False)` in its own venv (benchmarks/hta_env.sh), and `json.load(open(path))`.

    .venv/bin/python benchmarks/ingest_scale.py [--sizes 100M,1G,4G] [--rows 1M,10M] [--repeat 1]
        [--scratch /tmp/traceinsight-bench] [--hta-venv /tmp/hta-venv] [--hta-max 1G] [--no-hta]
        [--ref /tmp/ref37] [--only 'cold|fetchall']

`--ref CHECKOUT` runs each `analyze` again with another checkout (PYTHONPATH, tool named '... [ref]'), its own
empty cache folder, interleaved with this one's in each repeat (the order of the two swapped every repeat; both
as `python -P -m traceinsight`);
`--only REGEX` measures the tools whose names match.

Prints a table (times, RSS, ratios to HTA, MB/s) and writes benchmarks/results/ingest_scale.json.
The machine is shared and noisy: compare ratios taken in the same run, and repeat.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
H200 = REPO.parent / "shared" / "traces" / "h200"
KINETO_SRC = H200 / "flashinfer_decode_sweep.pt.trace.json.gz"
NSYS_SRC = H200 / "flashinfer_decode.sqlite"
DEFAULT_SCRATCH = Path("/tmp/traceinsight-bench")
RESULTS = REPO / "benchmarks" / "results" / "ingest_scale.json"

# Numbers shifted in each copy of the Kineto events: the integer part of `ts` (microseconds; the decimals are
# kept as written), and ids that link events (correlation, External id, flow id).
_KINETO_TS = re.compile(rb'"ts": (\d+)')
_KINETO_IDS = re.compile(rb'"(?:correlation|External id|id)": (\d+)')
# Gap between copies (us for Kineto, ns for nsys).
GAP_US = 1000
GAP_NS = 1_000_000
# nsys tables copied, and their columns shifted by the time period / id period.
NSYS_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
               "CUPTI_ACTIVITY_KIND_MEMSET", "NVTX_EVENTS")
_UNITS = {"K": 10**3, "M": 10**6, "G": 10**9}
FETCHALL = "sqlite3 fetchall kernel+runtime"


def parse_size(text: str) -> int:
    """'100M' -> 100_000_000 (decimal units K, M, G; a bare number is taken as is)."""
    text = text.strip().upper()
    if text[-1:] in _UNITS:
        return int(float(text[:-1]) * _UNITS[text[-1]])
    return int(text)


def size_label(n: int) -> str:
    for unit in ("G", "M", "K"):
        if n >= _UNITS[unit] and n % (_UNITS[unit] // 10) == 0:
            return f"{n / _UNITS[unit]:g}{unit}"
    return str(n)


# ================================================================== Kineto input
@dataclass
class KinetoTemplate:
    """The source trace cut into: head (up to and including `[` of traceEvents), the events' text split at the
    numbers to shift, and the tail (from the closing `]`). Shifts per copy: `period_us`, `id_period`."""

    head: bytes
    tail: bytes
    literals: list[bytes]  # text between numbers; len(literals) == len(values) + 1
    values: list[int]
    is_ts: list[bool]
    period_us: int
    id_period: int
    events: int  # events per copy

    @property
    def copy_bytes(self) -> int:
        return sum(map(len, self.literals)) + sum(len(str(v)) for v in self.values) + 1


def kineto_template(src: Path = KINETO_SRC) -> KinetoTemplate:
    import orjson

    raw = src.read_bytes()
    data = zlib.decompress(raw, 31) if raw[:2] == b"\x1f\x8b" else raw
    doc = orjson.loads(data)
    events = doc["traceEvents"]
    start = data.index(b'"traceEvents": [') + len(b'"traceEvents": [')
    end = data.rindex(b"]", 0, data.rindex(b'"traceName"'))
    body = data[start:end].rstrip()  # "\n  {...},\n  ...{...}"
    assert body.endswith(b"}") and orjson.loads(b"[" + body + b"]") == events
    ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    last = max(e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, float)))
    period = math.ceil(last - min(ts)) + GAP_US
    literals: list[bytes] = []
    values: list[int] = []
    is_ts: list[bool] = []
    marks = sorted([(m.start(1), m.end(1), True) for m in _KINETO_TS.finditer(body)]
                   + [(m.start(1), m.end(1), False) for m in _KINETO_IDS.finditer(body)])
    pos = 0
    for s, e, t in marks:
        literals.append(body[pos:s])
        values.append(int(body[s:e]))
        is_ts.append(t)
        pos = e
    literals.append(body[pos:])
    ids = [v for v, t in zip(values, is_ts, strict=True) if not t]
    id_period = 10 ** len(str(max(ids) + 1)) if ids else 1
    return KinetoTemplate(data[:start], data[end:], literals, values, is_ts, period, id_period, len(events))


def kineto_copy(t: KinetoTemplate, k: int) -> bytes:
    """The events text of copy k (no leading/trailing comma)."""
    dt, di = k * t.period_us, k * t.id_period
    parts: list[bytes] = [b""] * (2 * len(t.values) + 1)
    parts[0::2] = t.literals
    parts[1::2] = [b"%d" % (v + (dt if ts else di)) for v, ts in zip(t.values, t.is_ts, strict=True)]
    return b"".join(parts)


def build_kineto(dst: Path, copies: int, template: KinetoTemplate | None = None) -> Path:
    """Write `copies` shifted copies of the source events as one Kineto trace at `dst` (atomically)."""
    t = template or kineto_template()
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".partial")
    with tmp.open("wb") as fh:
        fh.write(t.head)
        for k in range(copies):
            if k:
                fh.write(b",")
            fh.write(kineto_copy(t, k))
        fh.write(b"\n  ")
        fh.write(t.tail)
    os.replace(tmp, dst)
    return dst


def kineto_copies_for(target_bytes: int, t: KinetoTemplate) -> int:
    return max(1, round(target_bytes / t.copy_bytes))


# ================================================================== nsys SQLite input
@dataclass
class NsysShape:
    kernels: int  # kernel rows of the source
    period_ns: int
    id_period: int


def nsys_shape(src: Path = NSYS_SRC) -> NsysShape:
    con = sqlite3.connect(f"file:{src}?mode=ro&immutable=1", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        present = [t for t in NSYS_TABLES if t in tables]
        lo = min(con.execute(f"SELECT min(start) FROM {t}").fetchone()[0] or 2**62 for t in present)
        hi = max(con.execute(f"SELECT max(coalesce(end, start)) FROM {t}").fetchone()[0] or 0 for t in present)
        ids = [con.execute(f"SELECT max(correlationId) FROM {t}").fetchone()[0] or 0
               for t in present if t.startswith("CUPTI")]
        kernels = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    finally:
        con.close()
    return NsysShape(kernels, hi - lo + GAP_NS, 10 ** len(str(max(ids) + 1)))


def build_nsys(dst: Path, copies: int, src: Path = NSYS_SRC) -> Path:
    """Copy the export to `dst` (atomically) with its activity and NVTX rows repeated `copies` times, copy k
    shifted by k periods in time and in correlation id."""
    shape = nsys_shape(src)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".partial")
    shutil.copyfile(src, tmp)
    con = sqlite3.connect(tmp)
    try:
        con.execute("PRAGMA journal_mode = OFF")
        con.execute("PRAGMA synchronous = OFF")
        con.execute("CREATE TEMP TABLE copies (k INTEGER PRIMARY KEY)")
        con.execute(
            "INSERT INTO copies WITH RECURSIVE r(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM r WHERE k < ?) "
            "SELECT k FROM r", (copies - 1,))
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table in NSYS_TABLES:
            if table not in tables or copies < 2:
                continue
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
            exprs = []
            for c in cols:
                if c in ("start", "end"):
                    exprs.append(f'b."{c}" + c.k * {shape.period_ns}')
                elif c == "correlationId":
                    exprs.append(f'b."{c}" + c.k * {shape.id_period}')
                else:
                    exprs.append(f'b."{c}"')
            con.execute(f'CREATE TEMP TABLE base AS SELECT * FROM "{table}" ORDER BY rowid')
            names = ", ".join(f'"{c}"' for c in cols)
            con.execute(f'INSERT INTO "{table}" ({names}) SELECT {", ".join(exprs)} FROM copies c CROSS JOIN base b '
                        "ORDER BY c.k, b.rowid")
            con.execute("DROP TABLE base")
        con.commit()
    finally:
        con.close()
    os.replace(tmp, dst)
    return dst


def nsys_copies_for(rows: int, shape: NsysShape) -> int:
    return max(1, math.ceil(rows / shape.kernels))


# ================================================================== measuring
@dataclass
class Run:
    wall_s: float
    rss_mb: float
    ok: bool
    note: str = ""
    cpu_s: float = 0.0  # user + system CPU time of the process and its children (less sensitive to other load)
    load1: float = 0.0  # the machine's 1-minute load average when the run started (2 cores here)
    # CPU time of the process's main thread, where the command says it (--ref's analyze: `_as_module`): on an idle
    # machine the wall is at least this; what worker threads (and DuckDB's) take off it runs beside.
    main_cpu_s: float | None = None


@dataclass
class Case:
    input: str
    kind: str  # kineto | nsys
    bytes: int
    kernels: int
    tool: str
    runs: list[Run] = field(default_factory=list)

    def best(self) -> Run | None:
        ok = [r for r in self.runs if r.ok]
        if not ok:
            return None
        main = [r.main_cpu_s for r in ok if r.main_cpu_s is not None]
        return Run(statistics.median(r.wall_s for r in ok), max(r.rss_mb for r in ok), True,
                   cpu_s=statistics.median(r.cpu_s for r in ok), main_cpu_s=statistics.median(main) if main else None)


def measure(cmd: list[str], env: dict[str, str] | None = None, timeout_s: float = 3600,
            mem_limit_bytes: int | None = None) -> Run:
    """Run `cmd` in a fresh process; wall time and that process's peak RSS (rusage via wait4)."""
    def limit() -> None:
        if mem_limit_bytes:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (mem_limit_bytes, mem_limit_bytes))

    load1 = os.getloadavg()[0]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, preexec_fn=limit)
    note = ""
    try:
        _, status, usage = _wait4(p, timeout_s)
    except subprocess.TimeoutExpired:
        p.kill()
        _, status, usage = os.wait4(p.pid, 0)
        note = f"timeout after {timeout_s:.0f} s"
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    p.returncode = os.waitstatus_to_exitcode(status)
    ok = p.returncode == 0 and not note
    main = [float(line.split()[1]) for line in err.splitlines() if line.startswith(MAIN_CPU)]
    err = "\n".join(line for line in err.splitlines() if not line.startswith(MAIN_CPU))
    if not ok and not note:
        last = [line for line in err.strip().splitlines() if line.strip()][-1:] or [f"exit {p.returncode}"]
        note = f"exit {p.returncode}: {last[0][:160]}"
    return Run(wall, usage.ru_maxrss / 1024, ok, note, usage.ru_utime + usage.ru_stime, load1,
               main[-1] if main else None)


def _wait4(p: subprocess.Popen[bytes], timeout_s: float) -> tuple[int, int, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            return pid, status, usage
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(p.args, timeout_s)
        time.sleep(0.02)


def commands(path: Path, kind: str, py: str, hta_py: str | None, baseline: bool = True) -> dict[str, list[str]]:
    cli = str(Path(py).with_name("traceinsight"))
    out = {
        "traceinsight ingest": [py, "-c", "import sys; from pathlib import Path; from traceinsight.ingest import load; "
                                "from traceinsight.tuning import tune; tune(); "  # as the command's entry does
                                "load([Path(sys.argv[1])], cache=False)", str(path)],
        "traceinsight analyze (cold)": [cli, "analyze", str(path), "--format", "json"],
        "traceinsight analyze (repeat)": [cli, "analyze", str(path), "--format", "json"],
        "traceinsight analyze (cached)": [cli, "analyze", str(path), "--format", "json"],
    }
    if kind == "kineto" and baseline:
        out["json.load"] = [py, "-c", "import json, sys; json.load(open(sys.argv[1], 'rb'))", str(path)]
    if kind == "kineto" and hta_py:
        out["HTA load + kernel breakdown"] = [
            hta_py, "-c", "import sys, logging; logging.disable(logging.WARNING); "
            "import warnings; warnings.simplefilter('ignore'); "
            "from hta.trace_analysis import TraceAnalysis; "
            "TraceAnalysis(trace_dir=sys.argv[1]).get_gpu_kernel_breakdown(visualize=False)", str(path.parent)]
    if kind == "nsys":
        # The peer issue 13 measures analyze against: a bare Python read of the two tables it cannot do without.
        out[FETCHALL] = [
            py, "-c", "import sqlite3, sys; c = sqlite3.connect(f'file:{sys.argv[1]}?mode=ro&immutable=1', uri=True); "
            "k = c.execute('SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchall(); "
            "r = c.execute('SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME').fetchall()", str(path)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="100M,1G,4G", help="Kineto JSON sizes (decimal units), '' for none")
    ap.add_argument("--rows", default="1M,10M", help="nsys SQLite kernel rows, '' for none")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--scratch", type=Path, default=DEFAULT_SCRATCH)
    ap.add_argument("--hta-venv", type=Path, default=Path(os.environ.get("HTA_VENV", "/tmp/hta-venv")))
    ap.add_argument("--hta-max", default="1G", help="largest Kineto size HTA is run on (it needs ~15x the size)")
    ap.add_argument("--hta-mem-limit", default="20G", help="address-space limit for HTA and json.load processes")
    ap.add_argument("--baseline-max", default="1G", help="largest Kineto size json.load is run on (~8x the size)")
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--analyze-max-kernels", default="2M",
                    help="skip `analyze` on inputs with more kernels (its Python objects per kernel: ~5 GB at 1M)")
    ap.add_argument("--ti-mem-limit", default="20G",
                    help="address-space limit for traceinsight processes (a run past it fails, not the machine)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--build-only", action="store_true", help="build the inputs, measure nothing")
    ap.add_argument("--ref", type=Path, help="a reference checkout: its `analyze` runs beside this one's")
    ap.add_argument("--only", help="measure only the tools whose names match this regular expression")
    args = ap.parse_args()

    py = sys.executable
    hta_exe = args.hta_venv / "bin" / "python"
    hta_py: str | None = str(hta_exe)
    if args.no_hta or not hta_exe.exists():
        if not args.no_hta:
            print(f"HTA venv not found at {args.hta_venv} (bash benchmarks/hta_env.sh): HTA not measured")
        hta_py = None
    scratch = args.scratch
    scratch.mkdir(parents=True, exist_ok=True)
    inputs: list[tuple[str, str, Path, int]] = []  # label, kind, path, kernels
    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    if sizes:
        t = kineto_template()
        per_copy_kernels = _kineto_kernels(t)
        for size in sizes:
            copies = kineto_copies_for(size, t)
            path = scratch / f"kineto_{size_label(size)}" / "rank0.pt.trace.json"
            if not path.exists() or _stamp(path) != copies:
                t0 = time.perf_counter()
                build_kineto(path, copies, t)
                _write_stamp(path, copies)
                print(f"built {path} ({path.stat().st_size / 1e6:.0f} MB, {copies} copies) in "
                      f"{time.perf_counter() - t0:.0f} s")
            inputs.append((f"kineto {size_label(size)}", "kineto", path, copies * per_copy_kernels))
    rows = [parse_size(s) for s in args.rows.split(",") if s.strip()]
    if rows:
        shape = nsys_shape()
        for n in rows:
            copies = nsys_copies_for(n, shape)
            path = scratch / f"nsys_{size_label(n)}" / "flashinfer_decode_x.sqlite"
            if not path.exists() or _stamp(path) != copies:
                t0 = time.perf_counter()
                build_nsys(path, copies)
                _write_stamp(path, copies)
                print(f"built {path} ({path.stat().st_size / 1e6:.0f} MB, {copies * shape.kernels} kernels) in "
                      f"{time.perf_counter() - t0:.0f} s")
            inputs.append((f"nsys {size_label(n)} rows", "nsys", path, copies * shape.kernels))

    if args.build_only:
        return
    hta_max = parse_size(args.hta_max)
    cases: list[Case] = []
    for label, kind, path, kernels in inputs:
        size = path.stat().st_size
        cmds = commands(path, kind, py, hta_py if size <= hta_max * 1.05 else None,
                        baseline=size <= parse_size(args.baseline_max) * 1.05)
        if kernels > parse_size(args.analyze_max_kernels):
            print(f"  {label}: analyze skipped ({kernels} kernels > --analyze-max-kernels)")
            cmds = {k: v for k, v in cmds.items() if not k.startswith("traceinsight analyze")}
        if args.only:
            cmds = {k: v for k, v in cmds.items() if re.search(args.only, k)}
        # The analyses of each checkout (this one's, then the reference's), and the other tools (run once).
        analyses = {k: v for k, v in cmds.items() if k.startswith("traceinsight analyze")}
        checkouts: list[tuple[str, dict[str, list[str]], str | None]] = [("", analyses, None)]
        if args.ref:
            as_module = {k: _as_module(v, py) for k, v in analyses.items()}
            checkouts = [("", as_module, None), (" [ref]", as_module, str(args.ref))]
        others = {k: v for k, v in cmds.items() if k not in analyses}
        own = {name + suffix: Case(label, kind, size, kernels, name + suffix)
               for suffix, group, _ in checkouts for name in group}
        own.update((name, Case(label, kind, size, kernels, name)) for name in others)
        cases.extend(own.values())
        for i in range(args.repeat):
            for name, cmd in others.items():
                _measure_into(own[name], label, cmd, dict(os.environ), args)
            for suffix, group, pythonpath in (checkouts if i % 2 == 0 else checkouts[::-1]):
                with tempfile.TemporaryDirectory(prefix="ti-cache-") as cache:
                    # In order: the cold analyze fills the caches the next ones read. 'repeat' is the same
                    # command again, as a user runs it (a large input's analysis is kept by its first run and
                    # rendered from its tables, cli/analysis_cache.py); 'cached' has the analysis cache off: an
                    # analysis with the ingest cache filled.
                    env = {**os.environ, "TRACEINSIGHT_CACHE_DIR": cache}
                    env.pop("PYTHONPATH", None)
                    if pythonpath:
                        env["PYTHONPATH"] = pythonpath
                    for name, cmd in group.items():
                        _measure_into(own[name + suffix], label, cmd, {**env, "TRACEINSIGHT_ANALYSIS_CACHE": "0"}
                                      if name.endswith("(cached)") else env, args)
    report(cases, args.out)


# The line on stderr that gives the CPU time of a command's main thread (`_as_module`).
MAIN_CPU = "main-thread-cpu "


def _as_module(cmd: list[str], py: str) -> list[str]:
    """An `analyze` command run as the package's entry (`traceinsight.cli.main`) from `python -P -c`: the checkout
    on PYTHONPATH when set, else the installed one (-P keeps the working folder off the path); at exit it writes
    its main thread's CPU time on stderr (MAIN_CPU)."""
    code = ("import atexit, sys, time; atexit.register(lambda: print("
            f"{MAIN_CPU!r} + str(time.thread_time()), file=sys.stderr)); "
            "sys.argv[0] = 'traceinsight'; from traceinsight.cli import main; main()")
    return [py, "-P", "-c", code, *cmd[1:]]


def _measure_into(case: Case, label: str, cmd: list[str], env: dict[str, str], args: argparse.Namespace) -> None:
    limit = parse_size(args.hta_mem_limit if case.tool.startswith(("HTA", "json")) else args.ti_mem_limit)
    run = measure(cmd, env=env, timeout_s=args.timeout, mem_limit_bytes=limit)
    case.runs.append(run)
    status = "" if run.ok else f"  FAILED: {run.note}"
    main = "" if run.main_cpu_s is None else f" ({run.main_cpu_s:.2f} main)"
    print(f"  {label:16} {case.tool:36} {run.wall_s:8.2f} s {run.cpu_s:8.2f} cpu-s{main} {run.rss_mb:8.0f} MB"
          f"  (load {run.load1:.1f}){status}", flush=True)


def _kineto_kernels(t: KinetoTemplate) -> int:
    body = kineto_copy(t, 0)
    return body.count(b'"cat": "kernel"')


def _stamp_path(path: Path) -> Path:
    """Beside the input's folder, not in it: HTA reads every trace-like file of its folder."""
    return path.parent.with_name(path.parent.name + ".copies")


def _stamp(path: Path) -> int | None:
    s = _stamp_path(path)
    return int(s.read_text()) if s.exists() else None


def _write_stamp(path: Path, copies: int) -> None:
    _stamp_path(path).write_text(str(copies))


def report(cases: list[Case], out: Path) -> None:
    print()
    print(f"{'input':16} {'tool':36} {'MB':>7} {'wall s':>8} {'cpu s':>7} {'peak MB':>8} {'MB/s':>7} "
          f"{'MB/cpu-s':>8} {'krows/s':>8} {'x HTA time':>10} {'HTA RSS /':>9}")
    rows = []
    by_input: dict[str, dict[str, Case]] = {}
    for c in cases:
        by_input.setdefault(c.input, {})[c.tool] = c
    for inp, tools in by_input.items():
        hta = tools.get("HTA load + kernel breakdown")
        hta_best = hta.best() if hta else None
        peer = tools.get(FETCHALL)
        peer_best = peer.best() if peer else None
        for name, c in tools.items():
            b = c.best()
            row: dict[str, Any] = {"input": inp, "kind": c.kind, "bytes": c.bytes, "kernels": c.kernels, "tool": name,
                                   "runs": [r.__dict__ for r in c.runs]}
            if b is None:
                notes = "; ".join(r.note for r in c.runs)
                print(f"{inp:16} {name:36} {c.bytes / 1e6:7.0f}   failed: {notes}")
                row["failed"] = notes
                rows.append(row)
                continue
            speed = hta_best.wall_s / b.wall_s if hta_best else None
            mem = hta_best.rss_mb / b.rss_mb if hta_best else None
            per_cpu = c.bytes / 1e6 / b.cpu_s if b.cpu_s else None
            row.update({"wall_s": b.wall_s, "cpu_s": b.cpu_s, "main_thread_cpu_s": b.main_cpu_s,
                        "peak_rss_mb": b.rss_mb,
                        "mb_per_s": c.bytes / 1e6 / b.wall_s, "mb_per_cpu_s": per_cpu,
                        "kernel_rows_per_s": c.kernels / b.wall_s, "hta_time_ratio": speed, "hta_rss_ratio": mem,
                        "fetchall_time_ratio": b.wall_s / peer_best.wall_s if peer_best else None,
                        # CPU seconds against the peer's: steadier than wall time on a loaded machine
                        "fetchall_cpu_ratio": b.cpu_s / peer_best.cpu_s if peer_best and peer_best.cpu_s else None,
                        # each repeat's own ratio to the peer run beside it, then their median
                        "fetchall_time_ratio_paired": statistics.median(
                            r.wall_s / p.wall_s for r, p in zip(c.runs, peer.runs, strict=False) if r.ok and p.ok)
                        if peer and any(r.ok and p.ok for r, p in zip(c.runs, peer.runs, strict=False)) else None})
            ref = tools.get(name + " [ref]")
            ref_best = ref.best() if ref else None
            if ref and ref_best:  # this checkout against the reference's (--ref): medians, and CPU
                row.update({"ref_time_ratio": b.wall_s / ref_best.wall_s,
                            "ref_cpu_ratio": b.cpu_s / ref_best.cpu_s if ref_best.cpu_s else None,
                            "ref_main_thread_cpu_ratio": b.main_cpu_s / ref_best.main_cpu_s
                            if b.main_cpu_s and ref_best.main_cpu_s else None})
            rows.append(row)
            print(f"{inp:16} {name:36} {c.bytes / 1e6:7.0f} {b.wall_s:8.2f} {b.cpu_s:7.1f} {b.rss_mb:8.0f} "
                  f"{c.bytes / 1e6 / b.wall_s:7.0f} {per_cpu or 0:8.0f} {c.kernels / b.wall_s / 1e3:8.0f} "
                  f"{'' if speed is None else f'{speed:9.1f}x':>10} {'' if mem is None else f'{mem:8.1f}x':>9}"
                  + (f"  {b.wall_s / peer_best.wall_s:.2f}x fetchall" if peer_best else "")
                  + (f"  {b.wall_s / ref_best.wall_s:.3f}x ref" if ref_best else ""))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "machine": platform.platform(), "cpus": os.cpu_count(), "python": platform.python_version(),
        "load_average": os.getloadavg(), "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "results": rows,
    }, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
