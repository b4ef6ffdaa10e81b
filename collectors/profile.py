"""Profilers around a run: torch.profiler in process; Nsight Systems and Nsight Compute by re-executing the run
under the tool (the child marks its measured region with cudaProfilerStart/Stop).

- torch: a Kineto trace, `NAME.pt.trace.json.gz`. While the planner runs, CPU-op collection is paused
  (FlashInfer's tensor-core `plan()` iterates a tensor in Python: thousands of tiny ops per call). The loop kind
  instead profiles as engines do: a schedule (wait 1, warm-up 1, active = its steps), `record_shapes=True`, every
  step a ProfilerStep#N range (`Session.step()` at each boundary), nothing paused.
- nsys: `nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none --backtrace=none --cuda-graph-trace=node
  --capture-range=cudaProfilerApi`, then, where nsys left only a `.qdstrm` (it cannot convert it on some
  machines), `QdstrmImporter -i NAME.qdstrm`, then `nsys export --type sqlite`: `NAME.sqlite` (+ `NAME.nsys-rep`).
- ncu: `ncu --profile-from-start off --nvtx --clock-control none --csv --page raw --metrics ... -k regex:...`
  (FA3: `--kernel-name-base demangled`, its kernels being `cutlass::device_kernel<flash::...>` instances),
  stdout to `NAME.ncu.csv` (the child sends its own stdout to stderr). Graph warm-ups and captures are left
  out with cudaProfilerStop/Start so that only annotated steps are measured.

Tool locations: $NSYS / $NCU, then PATH, then the usual install folders. QdstrmImporter: $QDSTRM_IMPORTER, or
next to nsys; `TRACEINSIGHT_EXTRA_LD_LIBRARY_PATH` is prepended to its LD_LIBRARY_PATH (it needs libdw.so.1).
"""

from __future__ import annotations

import glob
import gzip
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from traceinsight.errors import ToolMissingError

from .config import RunConfig

NSYS_GLOBS = ("/opt/nvidia/nsight-systems/*/bin/nsys", "/opt/nvidia/nsight-systems-*/bin/nsys",
              "/usr/local/cuda/bin/nsys", "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys")
NCU_GLOBS = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu")


class Session:
    """The in-process side of profiling: entered around the measured region of a run."""

    def __init__(self, rt: Any, cfg: RunConfig) -> None:
        self.torch, self.cfg = rt.torch, cfg
        self._prof: Any = None
        self._can_toggle = True
        self.trace_path: Path | None = None
        # The loop kind under torch.profiler runs on a schedule, as engines profile: one `wait` and one `warmup`
        # step (unrecorded) before its measured steps, each a ProfilerStep#N range (N = lead_steps + measured).
        self.stepped = cfg.kind == "loop" and cfg.profiler == "torch"
        self.lead_steps = 2 if self.stepped else 0

    def __enter__(self) -> Session:
        t = self.torch
        if self.cfg.profiler == "torch" and self.stepped:
            act = t.profiler.ProfilerActivity
            kw = {"activities": [act.CPU, act.CUDA], "record_shapes": True, "on_trace_ready": self._trace_ready,
                  "schedule": t.profiler.schedule(wait=1, warmup=1, active=self.cfg.steps, repeat=1)}
            try:  # one profiling cycle: acc_events only silences torch's warning about cycles (torch >= 2.5)
                self._prof = t.profiler.profile(**kw, acc_events=True)
            except TypeError:
                self._prof = t.profiler.profile(**kw)
            self._prof.__enter__()
        elif self.cfg.profiler == "torch":
            act = t.profiler.ProfilerActivity
            try:  # one profiling cycle; acc_events only silences torch's warning about cycles (torch >= 2.5)
                self._prof = t.profiler.profile(activities=[act.CPU, act.CUDA], acc_events=True)
            except TypeError:
                self._prof = t.profiler.profile(activities=[act.CPU, act.CUDA])
            self._prof.__enter__()
        elif self.cfg.profiler in ("nsys", "ncu"):
            t.cuda.synchronize()
            t.cuda.profiler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        t = self.torch
        t.cuda.synchronize()
        if self._prof is not None:
            self._prof.__exit__(*exc)
            if exc[0] is None and not self.stepped:
                self.trace_path = export_kineto(self._prof, self.cfg.output(".pt.trace.json.gz"))
        elif self.cfg.profiler in ("nsys", "ncu"):
            t.cuda.profiler.stop()

    def step(self) -> None:
        """A step boundary (stepped sessions): ends the current ProfilerStep#N range and opens the next; after
        the last measured step this stops the profiler and exports the trace."""
        if self._prof is not None and self.stepped:
            self._prof.step()

    def _trace_ready(self, prof: Any) -> None:
        self.trace_path = export_kineto(prof, self.cfg.output(".pt.trace.json.gz"))

    @contextmanager
    def quiet(self, gpu: bool = False) -> Iterator[None]:
        """Leave host bookkeeping (and, with `gpu`, warm-up launches) out of the measurement: torch.profiler
        stops collecting CPU ops; ncu (gpu=True) stops profiling kernels."""
        toggled = stopped = False
        if self._prof is not None and self._can_toggle:
            try:
                self._prof.toggle_collection_dynamic(False, [self.torch.profiler.ProfilerActivity.CPU])
                toggled = True
            except Exception:  # noqa: BLE001 - older torch: collect everything rather than fail
                self._can_toggle = False
        if gpu and self.cfg.profiler == "ncu":
            self.torch.cuda.synchronize()
            self.torch.cuda.profiler.stop()
            stopped = True
        try:
            yield
        finally:
            if toggled:
                self._prof.toggle_collection_dynamic(True, [self.torch.profiler.ProfilerActivity.CPU])
            if stopped:
                self.torch.cuda.synchronize()
                self.torch.cuda.profiler.start()


def export_kineto(prof: Any, path: Path) -> Path:
    """Write the Kineto trace as gzip-compressed JSON (the raw JSON is removed)."""
    raw = path.with_name(path.name.removesuffix(".gz"))
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(raw))
    with raw.open("rb") as src, gzip.open(path, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()
    return path


# ---------------------------------------------------------------------------------------------- outer runs
def find_tool(env: str, name: str, globs: tuple[str, ...]) -> str:
    """$ENV, then PATH, then the newest match of the install-folder globs; ToolMissingError otherwise."""
    if os.environ.get(env):
        return os.environ[env]
    found = shutil.which(name)
    if found:
        return found
    for pattern in globs:
        matches = sorted(glob.glob(pattern))
        if matches:
            return matches[-1]
    raise ToolMissingError(f"{name} not found: put it on PATH or set ${env} (searched {', '.join(globs)})")


def find_qdstrm_importer(nsys: str) -> str:
    if os.environ.get("QDSTRM_IMPORTER"):
        return os.environ["QDSTRM_IMPORTER"]
    here = Path(nsys).resolve().parent
    for cand in [here / "QdstrmImporter", *sorted(here.parent.glob("*/QdstrmImporter"))]:
        if cand.is_file():
            return str(cand)
    raise ToolMissingError(f"{nsys} left a .qdstrm file and no QdstrmImporter was found beside it "
                           "(set $QDSTRM_IMPORTER)")


def _child(cfg_path: Path) -> list[str]:
    # This package's own name: `collectors` in the source tree, `traceinsight.collectors` in the wheel.
    return [sys.executable, "-m", f"{__package__}.inner", str(cfg_path)]


def _write_config(cfg: RunConfig) -> Path:
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    path = cfg.output(".config.json")
    path.write_text(cfg.to_json(), encoding="utf-8")
    return path


def _run(cmd: list[str], what: str, **kw: Any) -> subprocess.CompletedProcess[bytes]:
    print(f"[collect] {' '.join(cmd)}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, **kw)
    if proc.returncode != 0:
        print(f"[collect] {what} exited with {proc.returncode}", file=sys.stderr, flush=True)
    return proc


def run_nsys(cfg: RunConfig) -> list[Path]:
    """Run `cfg` under Nsight Systems; return the files made (SQLite export, report, sidecar)."""
    nsys = find_tool("NSYS", "nsys", NSYS_GLOBS)
    cfg_path = _write_config(cfg)
    base = cfg.output("")
    for suffix in (".nsys-rep", ".qdstrm", ".sqlite"):
        cfg.output(suffix).unlink(missing_ok=True)
    _run([nsys, "profile", "-t", "cuda,nvtx", "--sample=none", "--cpuctxsw=none", "--backtrace=none",
          "--cuda-graph-trace=node", "--capture-range=cudaProfilerApi", "--capture-range-end=stop",
          "--force-overwrite=true", "-o", str(base), *_child(cfg_path)], "nsys profile")
    rep, qdstrm = cfg.output(".nsys-rep"), cfg.output(".qdstrm")
    if not rep.exists() and qdstrm.exists():
        env = dict(os.environ)
        extra = os.environ.get("TRACEINSIGHT_EXTRA_LD_LIBRARY_PATH")
        if extra:
            env["LD_LIBRARY_PATH"] = extra + os.pathsep + env.get("LD_LIBRARY_PATH", "")
        _run([find_qdstrm_importer(nsys), "-i", str(qdstrm)], "QdstrmImporter", env=env)
    if not rep.exists():
        raise ToolMissingError(f"{rep}: nsys made no report (see its output above)")
    qdstrm.unlink(missing_ok=True)
    sqlite = cfg.output(".sqlite")
    _run([nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(sqlite), str(rep)],
         "nsys export")
    made = [p for p in (sqlite, rep, cfg.sidecar_path) if p.exists()]
    if not cfg.keep_nsys_rep and sqlite.exists():
        rep.unlink()
        made.remove(rep)
    cfg_path.unlink(missing_ok=True)
    return made


def run_ncu(cfg: RunConfig) -> list[Path]:
    """Run `cfg` under Nsight Compute; return the files made (CSV, sidecar)."""
    ncu = find_tool("NCU", "ncu", NCU_GLOBS)
    cfg_path = _write_config(cfg)
    csv_path = cfg.output(".ncu.csv")
    # The details page: each section, plus the metrics (ncu prints them as "Command line profiler metrics" rows:
    # the SM active-cycle min/max there are exact, the sections give them only where a rule fires); else the raw page.
    metrics = ["--metrics", ",".join(cfg.ncu_metrics)] if cfg.ncu_metrics else []
    what = (["--print-units", "base", *(a for s in cfg.ncu_sections for a in ("--section", s)), *metrics]
            if cfg.ncu_sections else ["--page", "raw", "--print-units", "base", *metrics])
    with csv_path.open("wb") as out:
        _run([ncu, "--profile-from-start", "off", "--nvtx", "--clock-control", "none", "--csv", *what,
              *(["--kernel-name-base", cfg.ncu_name_base] if cfg.ncu_name_base != "function" else []),
              "-k", f"regex:{cfg.ncu_kernels}", *_child(cfg_path)],
             "ncu", stdout=out)
    cfg_path.unlink(missing_ok=True)
    return [p for p in (csv_path, cfg.sidecar_path) if p.exists()]
