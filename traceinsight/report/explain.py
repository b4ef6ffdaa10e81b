"""Terminal rendering of `traceinsight explain`: one step's breakdown beside its baseline, the attribution, the
kernels and host operations that changed, the cause and the remedy. Reads the explanation's JSON form."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from traceinsight.report.text import _table
from traceinsight.units import fmt_ns


def _signed(ns: float) -> str:
    return ("+" if ns > 0 else "-" if ns < 0 else "") + fmt_ns(abs(ns)) if ns else "0"


def render_explanation(ex: Any, con: Console) -> None:
    doc = ex.to_json() if hasattr(ex, "to_json") else ex
    head = Text()
    head.append(f"step {doc['step']}", style="bold")
    head.append(f"  {doc['name']}  [{doc['phase']}]\n")
    slow = not doc["spike"] and bool(doc.get("incident"))  # a slow-steps incident holds it (below the spike ratio)
    verdict = "a latency spike" if doc["spike"] else ("a slow step, short of a spike" if slow else "within its trend")
    head.append(f"took {fmt_ns(doc['wall_ns'])} against a {fmt_ns(doc['baseline_ns'])} baseline "
                f"({doc['ratio']:.2f}x, {doc['baseline']}): {verdict}")
    if doc.get("cause") and not doc["spike"] and not slow:
        head.append(f"\nlargest growth: {doc['cause']}")
    elif doc.get("cause"):
        head.append(f"\ncause: {doc['cause']}", style="bold red")
        if doc.get("incident"):
            inc = doc["incident"]
            onset = inc.get("onset_steps") or []
            span = (f"step {inc['first_step']}" if inc["first_step"] == inc["last_step"]
                    else f"steps {inc['first_step']}-{inc['last_step']}")
            head.append(f"  (incident of {span}"
                        + (f", onset at step {onset[0]} before the total crossed the threshold at step "
                           f"{inc['threshold_step']}" if onset and inc.get("threshold_step") is not None else "")
                        + ")")
    con.print(head)
    con.print()
    b = doc.get("breakdown") or {}
    t = _table(f"Where the time went (baseline: median of {len(doc['baseline_steps'])} steps around it)",
               [("component", "left"), ("this step", "right"), ("baseline", "right"), ("change", "right"),
                ("share of excess", "right")])
    for p in doc["attribution"]:
        if not p["step_ns"] and not p["baseline_ns"]:
            continue
        share = f"{100 * p['share']:.0f}%" if p["attributed_ns"] > 0 else ""
        t.add_row(p["component"], fmt_ns(p["step_ns"]), fmt_ns(p["baseline_ns"]), _signed(p["delta_ns"]), share)
    t.add_row(Text("wall", style="bold"), fmt_ns(doc["wall_ns"]), fmt_ns(doc["baseline_ns"]),
              _signed(doc["excess_ns"]), "")
    con.print(t)
    tiles = doc.get("tiles")
    if tiles and tiles.get("decode_rows") and tiles.get("prefill_rows"):
        con.print(Text(f"mixed launch: {tiles['decode_rows']} decode rows and {tiles['prefill_rows']} prefill rows in "
                       f"{tiles['tiles']} tiles of {tiles['tile_rows']} rows; {100 * tiles['padding_share']:.0f}% of "
                       f"the tile rows are padding ({100 * tiles['decode_tile_share']:.0f}% of the tiles hold only "
                       "decode rows)", style="yellow"))
    if b:
        con.print(Text(f"window from {b['source']}; GPU busy {fmt_ns(b['gpu_busy_ns'])}, idle {fmt_ns(b['idle_ns'])} "
                       f"in {b['idle_stretches']} stretch{'es' if b['idle_stretches'] != 1 else ''} (longest wait "
                       f"for the host {fmt_ns(b['host_gap_max_ns'])})",
                       style="dim"))
    con.print()
    k = _table("Kernels against the same steps", [("kernel", "left"), ("component", "left"), ("launches", "right"),
                                                   ("this step", "right"), ("baseline", "right"),
                                                   ("change", "right")])
    for r in doc["kernels"]:
        k.add_row(r["kernel"], r["component"], str(r["count"]), fmt_ns(r["step_ns"]), fmt_ns(r["baseline_ns"]),
                  _signed(r["delta_ns"]))
    con.print(k)
    host = doc.get("host")
    if host and not host.get("recorded_ops"):
        con.print()
        con.print(Text(f"On the host: the GPU waited {fmt_ns(host['stall_ns'])} in the longest stretches; the trace "
                       "records no host operation in this step (add NVTX ranges or record_function around host "
                       "work, or profile CPU ops with torch.profiler).", style="dim"))
    elif host:
        con.print()
        h = _table(f"On the host while the GPU waited ({fmt_ns(host['stall_ns'])} in the longest stretches; "
                   f"{fmt_ns(host['untracked_ns'])} outside any recorded op)",
                   [("host op", "left"), ("calls", "right"), ("in the wait", "right"), ("this step", "right"),
                    ("usually", "right")])
        for r in host["ops"]:
            h.add_row(r["name"], str(r["calls"]), fmt_ns(r["in_stall_ns"]), fmt_ns(r["step_ns"]),
                      fmt_ns(r["usual_ns"]) if r["usual_ns"] else "not seen")
        con.print(h)
    if doc.get("remedy"):
        con.print()
        con.print(Text("remedy: ", style="bold") + Text(doc["remedy"]))
