"""`traceinsight dashboard [PATH...]`: start the Streamlit dashboard (dashboards/app.py) on localhost with the
given traces (sidecars `*.meta.json[.gz]` attach to the first trace)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

from traceinsight.cli.main import user_errors
from traceinsight.errors import InputError, ToolMissingError

APP = Path(__file__).resolve().parents[2] / "dashboards" / "app.py"
PATHS_ENV = "TRACEINSIGHT_DASHBOARD_PATHS"
MAX_UPLOAD_ENV = "TRACEINSIGHT_MAX_UPLOAD_MB"


def streamlit_command(paths: list[Path], port: int | None, host: str, max_upload_mb: int,
                      headless: bool) -> tuple[list[str], dict[str, str]]:
    """The `streamlit run` command line and environment that start the dashboard."""
    cmd = [sys.executable, "-m", "streamlit", "run", str(APP), "--server.address", host,
           "--server.maxUploadSize", str(max_upload_mb), "--browser.gatherUsageStats", "false",
           "--server.headless", "true" if headless else "false", "--global.developmentMode", "false",
           "--client.toolbarMode", "minimal", "--server.fileWatcherType", "none"]
    if port:
        cmd += ["--server.port", str(port)]
    env = dict(os.environ)
    env[PATHS_ENV] = os.pathsep.join(str(p.resolve()) for p in paths)
    env[MAX_UPLOAD_ENV] = str(max_upload_mb)
    return cmd, env


@click.command(name="dashboard")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--port", type=int, default=None, help="Port (default: Streamlit's, 8501 or the next free one).")
@click.option("--host", default="localhost", show_default=True, help="Address to listen on.")
@click.option("--max-upload-mb", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Largest trace the page accepts as an upload.")
@click.option("--headless/--browser", default=False, help="Do not open a browser window.")
@user_errors
def command(paths: tuple[Path, ...], port: int | None, host: str, max_upload_mb: int, headless: bool) -> None:
    """Open the interactive dashboard: findings, step timeline (click a step for its launches), kernel table,
    threshold chart and per-SM schedule; pick a bundled example, the PATHs given here, or upload a trace."""
    for p in paths:
        if not p.is_file():
            raise InputError(f"{p}: no such file")
    if not APP.is_file():
        raise ToolMissingError(f"{APP}: the dashboard app is missing (it ships in the source tree's dashboards/)")
    try:
        import streamlit  # noqa: F401
    except ImportError:
        raise ToolMissingError("the dashboard needs streamlit: pip install 'traceinsight-attention[dashboard]'") \
            from None
    cmd, env = streamlit_command(list(paths), port, host, max_upload_mb, headless)
    try:
        sys.exit(subprocess.call(cmd, env=env))
    except KeyboardInterrupt:
        sys.exit(130)
