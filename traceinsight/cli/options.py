"""The arguments and options several `traceinsight` commands share, and what they turn into."""

from __future__ import annotations

import os
from pathlib import Path

import click


def repeated_paths(paths: tuple[str, ...]) -> list[str]:
    """Plain files given more than once among `paths` (by identity, so `./t.json` and `t.json` are one)."""
    seen: set[tuple[int, int]] = set()
    out = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        if not Path(p).is_file():
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            out.append(p)
        seen.add(key)
    return out


def as_paths(values: tuple[str, ...]) -> list[Path]:
    """Each value as a Path."""
    return [Path(v) for v in values]


path_arg = click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
meta_option = click.option(
    "--meta", "meta", multiple=True, type=click.Path(path_type=str),
    help="Sidecar with each step's batch composition (collector sidecar, *.meta.json[.gz], or FlashInfer's API "
         "log: FLASHINFER_LOGLEVEL=10 with its plan() dumps beside it), attached to the first trace.")
ncu_option = click.option(
    "--ncu", "ncu", multiple=True, type=click.Path(path_type=str),
    help="Nsight Compute CSV (ncu --csv, details page or --page raw) to match to the first trace's kernels.")


def _set_memory_limit(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value:
        from traceinsight.ingest.store import MEMORY_LIMIT_ENV

        os.environ[MEMORY_LIMIT_ENV] = value
    return value


memory_option = click.option(
    "--memory-limit", default=None, metavar="SIZE", expose_value=False, callback=_set_memory_limit,
    help="Cap DuckDB's memory (e.g. 8GB; also $TRACEINSIGHT_MEMORY_LIMIT; default: 80% of the machine's or "
         "container's memory less what the analysis holds outside DuckDB, re-fitted between stages). What does not "
         "fit spills to the cache folder.")
