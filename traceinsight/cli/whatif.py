"""`traceinsight whatif PATH`: replay a step's batch through the alternatives (split-KV kept on, FA3's dynamic
split, the other decode paths, the batch capped at B_th - 1) and print each one's predicted time."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import orjson

from traceinsight.cli.errors import user_errors
from traceinsight.cli.output import console
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
    from traceinsight.api import open as open_analysis
    from traceinsight.diagnose.whatif import totals

    if step is not None and all_steps:
        raise InputError(f"{path}: --step and --all exclude each other")
    result = open_analysis(Path(path), meta=[Path(m) for m in meta], step_pattern=step_pattern, diagnostics=False)
    a = result.analyses[0]
    replays = result.whatif(step, all_steps)
    if fmt == "json":
        doc = {"schema": "traceinsight.whatif/1", "trace": a.path, "steps": [r.to_json() for r in replays],
               "totals": totals(replays)}
        sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
        sys.stdout.flush()
        return
    con = console()
    if len(replays) > 1:
        _print_totals(con, replays)
        return
    for r in replays:
        _print_step(con, r)


# The replay of the step as it ran: its row tells how far the model is from the measurement, not a saving.
AS_RUN = "as-run"


def _model_error(measured_ns: int, predicted_ns: int | None) -> str:
    """'model -2%': the prediction of the step as run against its measurement."""
    if not predicted_ns or not measured_ns:
        return "-"
    return f"model {predicted_ns / measured_ns - 1:+.0%}"


def _saving(measured_ns: int, saving_ns: int | None) -> str:
    """'saves 12.3 ms (91%)' / 'costs 1.2 ms more' / '-'."""
    if saving_ns is None:
        return "-"
    if saving_ns < 0:
        return f"costs {fmt_ns(-saving_ns)} more"
    share = f" ({saving_ns / measured_ns:.0%})" if measured_ns else ""
    return f"saves {fmt_ns(saving_ns)}{share}"


def _print_step(con: Any, r: Any) -> None:
    """One step: what each alternative would take and what it saves against the measured launch."""
    from rich import box
    from rich.table import Table

    from traceinsight.diagnose.whatif import alternative_saving_ns

    con.print(f"[bold]step {r.step}[/bold] {r.name}: {r.kernel} ({r.backend}), B = {r.batch_size}, "
              f"{r.total_kv_tokens:,} KV tokens, longest request {r.max_kv_len:,}; measured {fmt_ns(r.measured_ns)}"
              + (f"; B_th = {r.b_threshold}" if r.b_threshold else ""))
    t = Table(box=box.SIMPLE_HEAD)
    for col in ("alternative", "predicted", "saving", "split-KV", "work items", "chunk", "SM idle", "steps"):
        t.add_column(col, justify="right" if col in ("predicted", "saving", "work items", "chunk", "SM idle",
                                                     "steps") else "left")
    notes: list[str] = []
    for alt in r.alternatives:
        split = "-" if alt.split_kv is None else ("on" if alt.split_kv else "off")
        pred = fmt_ns(alt.predicted_ns) + (f" ({fmt_ns(alt.total_ns)} total)" if alt.steps > 1 else "")
        mark = ""
        if alt.assumption:
            notes.append(alt.assumption)
            mark = f" [{len(notes)}]"
        saving = (_model_error(r.measured_ns, alt.predicted_ns) if alt.name == AS_RUN
                  else _saving(r.measured_ns, alternative_saving_ns(r, alt)))
        t.add_row(alt.description + mark, pred, saving, split, str(alt.work_items or "-"),
                  str(alt.chunk_tokens or "-"), "-" if alt.sm_idle is None else f"{alt.sm_idle:.0%}", str(alt.steps))
    con.print(t)
    for i, note in enumerate(notes, 1):
        con.print(f"  [{i}] {note}", style="dim", highlight=False, markup=False)


# Steps listed under the totals of `whatif --all` (those an alternative saves the most in).
TOP_STEPS = 10


def _print_totals(con: Any, replays: list[Any]) -> None:
    """Several steps: one row per alternative with what it saves over all of them, then the steps where the
    best alternative saves the most (one line each); --format json has every step in full."""
    from rich import box
    from rich.table import Table

    from traceinsight.diagnose.whatif import alternative_saving_ns, totals

    measured = sum(r.measured_ns for r in replays)
    con.print(f"[bold]{len(replays)} steps replayed[/bold], measured {fmt_ns(measured)} of attention in all")
    t = Table(box=box.SIMPLE_HEAD)
    for col, just in (("alternative", "left"), ("steps", "right"), ("measured", "right"), ("predicted", "right"),
                      ("saving", "right"), ("best in", "right")):
        t.add_column(col, justify=just)  # type: ignore[arg-type]
    for row in sorted(totals(replays), key=lambda x: -x["saving_ns"]):
        saving = (_model_error(row["measured_ns"], row["cost_ns"]) if row["name"] == AS_RUN
                  else _saving(row["measured_ns"], row["saving_ns"]) if row["steps"] else "-")
        t.add_row(row["description"], str(row["steps"]), fmt_ns(row["measured_ns"]), fmt_ns(row["cost_ns"]),
                  saving, "-" if row["name"] == AS_RUN else f"{row['best_in']} steps")
    con.print(t)
    best = []
    for r in replays:
        cands = [(alternative_saving_ns(r, alt), alt.description) for alt in r.alternatives if alt.name != AS_RUN]
        known = [(s, d) for s, d in cands if s is not None]
        if known:
            s, d = max(known)
            if s > 0:
                best.append((s, r, d))
    best.sort(key=lambda x: -x[0])
    if best:
        con.print(f"[bold]Steps that gain the most[/bold] ({min(TOP_STEPS, len(best))} of {len(best)}; "
                  "--step N for one step's table, --format json for every step)")
        for s, r, d in best[:TOP_STEPS]:
            con.print(f"  step {r.step} {r.name}: measured {fmt_ns(r.measured_ns)}, {d} "
                      f"{_saving(r.measured_ns, s)}")
