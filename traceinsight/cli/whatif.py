"""`traceinsight whatif PATH`: replay a step's batch through the alternatives (split-KV kept on, FA3's dynamic
split, the other decode paths, the batch capped at B_th - 1) and print each one's predicted time."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import orjson

from traceinsight.cli.main import console, user_errors
from traceinsight.errors import InputError
from traceinsight.units import fmt_ns


@click.command(name="whatif")
@click.argument("path", type=click.Path(path_type=str))
@click.option("--step", "step", type=click.IntRange(min=0), default=None, metavar="N",
              help="Step index to replay (default: the slowest step whose batch composition is known).")
@click.option("--all", "all_steps", is_flag=True, help="Replay every step whose batch composition is known.")
@click.option("--meta", "meta", multiple=True, type=click.Path(path_type=str),
              help="Sidecar with each step's batch composition (collector sidecar or *.meta.json[.gz]).")
@click.option("--step-pattern", default=None, metavar="REGEX", help="As in `analyze`.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: {\"schema\": \"traceinsight.whatif/1\", \"steps\": [...]} (docs/JSON.md).")
@user_errors
def command(path: str, step: int | None, all_steps: bool, meta: tuple[str, ...], step_pattern: str | None,
            fmt: str) -> None:
    """Replay a step's batch through the alternatives and print predicted times: as run, split-KV kept on,
    FlashAttention-3's dynamic split, the other FlashInfer decode paths, and the batch capped at B_th - 1.

    Needs the batch composition of the step (KV lengths): from --meta, or a sidecar the collectors wrote."""
    from traceinsight.diagnose.whatif import replay_step, replayable_steps
    from traceinsight.pipeline import analyze

    if step is not None and all_steps:
        raise InputError(f"{path}: --step and --all exclude each other")
    _, analyses = analyze([Path(path)], meta=[Path(m) for m in meta], step_pattern=step_pattern,
                          diagnostics=False)
    a = analyses[0]
    sched = a.schedule
    known = replayable_steps(sched, a.steps)
    by_index = {s.index: s for s in a.steps}
    if step is not None:
        if step not in by_index:
            raise InputError(f"{path}: no step {step} (the trace has {len(a.steps)} steps, 0..{len(a.steps) - 1})")
        if step not in known:
            raise InputError(f"{path}: step {step} has no known batch composition (KV lengths): pass --meta SIDECAR")
        chosen = [step]
    elif not known:
        raise InputError(f"{path}: no step has a known batch composition (KV lengths): pass --meta SIDECAR")
    elif all_steps:
        chosen = known
    else:
        chosen = [max(known, key=lambda i: by_index[i].launches[0].attention.dur_ns)]
    assert sched is not None
    replays = [replay_step(sched, by_index[i]) for i in chosen]
    if fmt == "json":
        doc = {"schema": "traceinsight.whatif/1", "trace": a.path, "steps": [r.to_json() for r in replays]}
        sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
        sys.stdout.flush()
        return
    from rich import box
    from rich.table import Table

    con = console()
    for r in replays:
        con.print(f"[bold]step {r.step}[/bold] {r.name}: {r.kernel} ({r.backend}), B = {r.batch_size}, "
                  f"{r.total_kv_tokens:,} KV tokens, longest request {r.max_kv_len:,}; measured {fmt_ns(r.measured_ns)}"
                  + (f"; B_th = {r.b_threshold}" if r.b_threshold else ""))
        t = Table(box=box.SIMPLE_HEAD)
        for col in ("alternative", "predicted", "vs measured", "split-KV", "work items", "chunk", "SM idle",
                    "steps", "note"):
            t.add_column(col, justify="right" if col in ("predicted", "vs measured", "work items", "chunk",
                                                         "SM idle", "steps") else "left")
        for alt in r.alternatives:
            ratio = f"{alt.predicted_ns / r.measured_ns:.2f}x" if alt.predicted_ns and r.measured_ns else "-"
            split = "-" if alt.split_kv is None else ("on" if alt.split_kv else "off")
            pred = fmt_ns(alt.predicted_ns) + (f" ({fmt_ns(alt.total_ns)} total)" if alt.steps > 1 else "")
            t.add_row(alt.description, pred, ratio, split, str(alt.work_items or "-"),
                      str(alt.chunk_tokens or "-"), "-" if alt.sm_idle is None else f"{alt.sm_idle:.0%}",
                      str(alt.steps), alt.assumption or "")
        con.print(t)
