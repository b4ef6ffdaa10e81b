"""`traceinsight explain TRACE --step N`: why step N took what it took — its breakdown beside its baseline's, the
attribution of its excess, the kernels and host operations that grew, the cause and the remedy."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import orjson

from traceinsight.cli.errors import user_errors
from traceinsight.cli.output import console


@click.command(name="explain")
@click.argument("path", type=click.Path(path_type=str))
@click.option("--step", "step", type=click.IntRange(min=0), default=None, metavar="N",
              help="Step index (as in `analyze`'s steps table; default: the step with the most excess time).")
@click.option("--meta", "meta", multiple=True, type=click.Path(path_type=str),
              help="Sidecar with each step's batch composition (collector sidecar or *.meta.json[.gz]).")
@click.option("--ncu", "ncu", multiple=True, type=click.Path(path_type=str), help="As in `analyze`.")
@click.option("--step-pattern", default=None, metavar="REGEX", help="As in `analyze`.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: schema traceinsight.explain/1 (docs/JSON.md).")
@click.option("--no-cache", is_flag=True, help="As in `analyze`.")
@user_errors
def command(path: str, step: int | None, meta: tuple[str, ...], ncu: tuple[str, ...], step_pattern: str | None,
            fmt: str, no_cache: bool) -> None:
    """Explain one step: where its time went against the steps around it, which part grew, why, and what to do.

    The step's wall time (its range on the host through the end of its GPU work) is split into attention,
    prefill, the other kernel families and GPU idle (waiting for the host, or on a synchronisation); each part
    is compared with its median over the steps around it, the excess is attributed to the parts that grew, and
    the largest names the cause (docs/DIAGNOSTICS.md, latency-spike)."""
    from traceinsight.api import open as open_analysis

    result = open_analysis(Path(path), meta=[Path(m) for m in meta], ncu=[Path(n) for n in ncu],
                           step_pattern=step_pattern, cache=False if no_cache else None)
    a = result.analyses[0]
    ex = result.explain(step)
    if fmt == "json":
        sys.stdout.buffer.write(orjson.dumps({**ex.to_json(), "trace": a.path}, option=orjson.OPT_INDENT_2) + b"\n")
        sys.stdout.flush()
        return
    from traceinsight.report.explain import render_explanation

    render_explanation(ex, console())
