"""A progress display on stderr while long inputs are read. Its own module, so that an analysis whose output is
not text (`--format json`) does not import rich (40 ms) for a display it does not show."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

# Files larger than this get a progress display while they are read.
PROGRESS_MIN_BYTES = 8 * 1024 * 1024


@contextmanager
def ingest_progress(paths: Sequence[Path], quiet: bool = False) -> Iterator[None]:
    """Around a long ingest: a transient spinner on stderr with the file names, total size and elapsed time.
    Shown only when stderr is a terminal, `quiet` is off and the inputs are large (PROGRESS_MIN_BYTES); never
    mixes with stdout, so `--format json | jq` stays clean."""
    size = 0
    for p in paths:
        try:
            size += Path(p).stat().st_size
        except OSError:
            pass
    if quiet or size < PROGRESS_MIN_BYTES:
        yield
        return
    from traceinsight.report.console import make_console

    err = make_console(stderr=True)
    if not err.is_terminal:
        yield
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    names = ", ".join(Path(p).name for p in paths[:2]) + (f" +{len(paths) - 2}" if len(paths) > 2 else "")
    with Progress(SpinnerColumn(), TextColumn("[bold]analyzing[/bold] {task.description}"), TimeElapsedColumn(),
                  console=err, transient=True) as progress:
        progress.add_task(f"{names} ({size / 1e6:.0f} MB)", total=None)
        yield
