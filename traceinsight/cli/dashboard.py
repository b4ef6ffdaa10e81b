"""`traceinsight dashboard [PATH...] [--meta SIDECAR]`: start the Streamlit dashboard (dashboards/app.py) on
localhost with the given traces (sidecars given with --meta or named `*.meta.json[.gz]` attach to the first trace;
a trace without one takes the sidecar beside it). Streamlit runs as a child that ends with this command: on
SIGTERM, SIGHUP or SIGINT the child is stopped, and on Linux the kernel stops it if this process dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import click

from traceinsight.cli.errors import user_errors
from traceinsight.errors import InputError, ToolMissingError

# The app: the source tree's dashboards/ folder, shipped (and mapped by an editable install) as
# `traceinsight.dashboards` (pyproject.toml's package-dir).
DASHBOARDS = "traceinsight.dashboards"
PATHS_ENV = "TRACEINSIGHT_DASHBOARD_PATHS"
META_ENV = "TRACEINSIGHT_DASHBOARD_META"
FLEET_ENV = "TRACEINSIGHT_DASHBOARD_FLEET"
# Seconds the child gets to end after SIGTERM before it is killed.
CHILD_GRACE_S = 5.0
MAX_UPLOAD_ENV = "TRACEINSIGHT_MAX_UPLOAD_MB"


def app_path() -> Path:
    """Where the dashboard's Streamlit script is (`app.py` of traceinsight.dashboards); a path that does not exist
    when that package is missing."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(DASHBOARDS)
    except ImportError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return Path(DASHBOARDS.replace(".", "/")) / "app.py"
    return Path(list(spec.submodule_search_locations)[0]) / "app.py"


def streamlit_command(paths: list[Path], port: int | None, host: str, max_upload_mb: int,
                      headless: bool, meta: list[Path] | None = None,
                      fleet: Path | None = None) -> tuple[list[str], dict[str, str]]:
    """The `streamlit run` command line and environment that start the dashboard."""
    cmd = [sys.executable, "-m", "streamlit", "run", str(app_path()), "--server.address", host,
           "--server.maxUploadSize", str(max_upload_mb), "--browser.gatherUsageStats", "false",
           "--server.headless", "true" if headless else "false", "--global.developmentMode", "false",
           "--client.toolbarMode", "minimal", "--server.fileWatcherType", "none"]
    if port:
        cmd += ["--server.port", str(port)]
    env = dict(os.environ)
    env[PATHS_ENV] = os.pathsep.join(str(p.resolve()) for p in paths)
    env[META_ENV] = os.pathsep.join(str(p.resolve()) for p in meta or [])
    env[MAX_UPLOAD_ENV] = str(max_upload_mb)
    env[FLEET_ENV] = str(fleet.resolve()) if fleet else ""
    return cmd, env


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: ask the kernel to send the child SIGTERM when its parent dies (even by SIGKILL)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def run_child(cmd: list[str], env: dict[str, str]) -> int:
    """Run `cmd` as a child that ends with this process: SIGTERM, SIGHUP and SIGINT are passed on to it (then
    SIGKILL after CHILD_GRACE_S), and on Linux it gets SIGTERM if this process dies. Returns its exit status
    (128 + signal when a signal ended this command)."""
    child = subprocess.Popen(cmd, env=env, preexec_fn=_die_with_parent if sys.platform == "linux" else None)
    got: list[int] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        got.append(signum)
        if child.poll() is None:
            child.terminate()

    old: dict[int, Any] = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        while True:
            try:
                code = child.wait(timeout=CHILD_GRACE_S if got else None)
                break
            except subprocess.TimeoutExpired:
                child.kill()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return 128 + got[0] if got else code


@click.command(name="dashboard")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--port", type=int, default=None, help="Port (default: Streamlit's, 8501 or the next free one).")
@click.option("--host", default="localhost", show_default=True, help="Address to listen on.")
@click.option("--max-upload-mb", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Largest trace the page accepts as an upload.")
@click.option("--headless/--browser", default=False, help="Do not open a browser window.")
@click.option("--meta", "meta", multiple=True, type=click.Path(path_type=Path),
              help="Sidecar for the first trace (default: the <stem>.meta.json[.gz] / .sidecar.json[.gz] beside it).")
@click.option("--fleet", "fleet", default=None, type=click.Path(path_type=Path), metavar="DIR",
              help="Open on the fleet report of DIR, a dataset `traceinsight fleet analyze` wrote.")
@user_errors
def command(paths: tuple[Path, ...], port: int | None, host: str, max_upload_mb: int, headless: bool,
            meta: tuple[Path, ...], fleet: Path | None) -> None:
    """Open the interactive dashboard: findings, step timeline (click a step for its launches), kernel table,
    threshold chart and per-SM schedule; pick a bundled example, the PATHs given here, or upload a trace. A PATH
    may be a folder of saved analyses (`analyze --save DIR`): its traces open from their tables, nothing is
    analyzed. With --fleet DIR: first the report across the traces of that fleet dataset (root causes, time lost
    per trace, worst steps, outliers, failed traces), and each of its traces from its saved tables."""
    if fleet is not None:
        from traceinsight.fleet.report import load_manifest

        load_manifest(fleet)  # not a dataset: one line and exit 2, before anything starts
    from traceinsight.report.saved import is_saved_folder

    for p in (*paths, *meta):
        if not p.is_file() and not (p in paths and is_saved_folder(p)):
            raise InputError(f"{p}: no such file")
    if meta and not paths:
        raise click.UsageError("--meta needs a trace to attach to (give its PATH)")
    app = app_path()
    if not app.is_file():
        raise ToolMissingError(f"{app}: the dashboard app is missing (the package {DASHBOARDS} ships it: reinstall "
                               "traceinsight-attention)")
    try:
        import streamlit  # noqa: F401
    except ImportError:
        raise ToolMissingError("the dashboard needs streamlit: pip install 'traceinsight-attention[dashboard]'") \
            from None
    cmd, env = streamlit_command(list(paths), port, host, max_upload_mb, headless, list(meta), fleet)
    sys.exit(run_child(cmd, env))
