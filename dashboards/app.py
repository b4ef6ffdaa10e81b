"""traceinsight dashboard (Streamlit): pick a bundled example, a trace given on the command line, or upload one;
see the findings first, then the step timeline (click a step to see its launches), the labeled kernel table,
the split-KV threshold chart and the simulated per-SM schedule of a launch.

Start it with `traceinsight dashboard [PATH...]` (paths reach the app in TRACEINSIGHT_DASHBOARD_PATHS); with
`--fleet DIR` it opens on the fleet report of that dataset (fleet_view.py, TRACEINSIGHT_DASHBOARD_FLEET). It
calls the library exactly as the CLI does (`traceinsight.open`, the one document builder `report.saved`,
`report.sections`, `report.gantt`), and caches one analysis per distinct file content (SHA-256). A trace given on
the command line or bundled that `traceinsight analyze` analyzed and kept (cli/analysis_cache.py: same files, same
sidecars, default options) opens from the kept tables, nothing analyzed, until "Analyze again" asks for what
only the analysis object gives (every launch's schedule, why a step took its time).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st

# Streamlit runs this file as a script: its neighbours by their package's name (this folder is shipped, and mapped
# by an editable install, as traceinsight.dashboards).
from traceinsight.dashboards import charts, compare_view, fleet_view, sources

from traceinsight.errors import TraceInsightError
from traceinsight.report import finding_order, kernel_tables, launch_pick, notes, sections, sweep_view
from traceinsight.report import timeline as step_timeline
from traceinsight.report.figures import Gantt
from traceinsight.units import fmt_ns

PATHS_ENV = "TRACEINSIGHT_DASHBOARD_PATHS"
META_ENV = "TRACEINSIGHT_DASHBOARD_META"
SEVERITY_BOX = {"critical": st.error, "warning": st.warning, "info": st.info}


@dataclass
class Loaded:
    """One analyzed trace: its JSON document and the report's Gantt (`report.saved`, as every report reads them),
    and the analysis object (for the other launches' schedules and the per-step explanation), None for a trace
    read from its saved or kept tables."""

    doc: dict[str, Any]
    analysis: Any
    gantt: Gantt | str
    # What the page says where the analysis object is missing (a saved or a kept analysis).
    only: str = ""

    def report_gantt(self) -> Gantt | str:
        return self.gantt


SAVED_ONLY = ("not in a saved analysis: it keeps the report's launch only (analyze the trace for every launch's "
              "schedule and the per-step explanation)")
KEPT_ONLY = ("not in the kept analysis: it keeps the report's launch only (switch on \"Analyze again\" in the "
             "sidebar for every launch's schedule and the per-step explanation)")


@st.cache_resource(show_spinner=False, max_entries=6)
def analyze_cached(digest: str, _trace: str, _meta: tuple[str, ...]) -> Loaded:
    """Analyze a trace once per distinct content (`digest` is the cache key; the paths are not hashed). Kept as
    a resource, not pickled per rerun: the attached simulations hold ~10^5 objects."""
    import traceinsight
    from traceinsight.report import saved
    from traceinsight.report.json_doc import STEPS_ALL

    result = traceinsight.open(_trace, meta=list(_meta))  # the Python API, as `analyze` uses it
    (analysis,) = result.analyses
    src = result.documents()
    doc = saved.document(src, analysis.trace_id, STEPS_ALL)
    return Loaded(doc, analysis, saved.gantt(src, analysis.trace_id, doc))


@st.cache_resource(show_spinner=False, max_entries=6)
def saved_cached(digest: str, _folder: str, _key: str) -> Loaded:
    """A trace's document and report Gantt from its saved tables (nothing analyzed), once per `digest`."""
    from traceinsight.report import saved
    from traceinsight.report.json_doc import STEPS_ALL

    src = saved.open_saved(Path(_folder), (_key,))
    doc = saved.document(src, 0, STEPS_ALL)
    return Loaded(doc, None, saved.gantt(src, 0, doc), SAVED_ONLY)


@st.cache_resource(show_spinner=False, max_entries=6)
def kept_cached(entry: str) -> Loaded | None:
    """A trace's document and report Gantt from the analysis `traceinsight analyze` kept at `entry` (its name is
    the key of the inputs as found), None when it cannot be read (then it is deleted: analyze)."""
    from traceinsight.cli import analysis_cache
    from traceinsight.report import saved
    from traceinsight.report.json_doc import STEPS_ALL

    src = analysis_cache.lookup(Path(entry))
    if src is None:
        return None
    doc = saved.document(src, 0, STEPS_ALL)
    return Loaded(doc, None, saved.gantt(src, 0, doc), KEPT_ONLY)


def kept_entry(src: sources.Source) -> Path | None:
    """The kept analysis of `analyze TRACE [--meta SIDECAR ...]` (cli/analysis_cache.py) when there is one: the
    files as the dashboard names them (absolute), or relative to the folder it started in, as typed there."""
    from traceinsight.cli import analysis_cache

    files = [src.trace, *src.meta]
    spellings = [files]
    relative = [Path(os.path.relpath(p)) if p.is_absolute() else p for p in files]
    if relative != files and not any(p.parts[:1] == ("..",) for p in relative):
        spellings.append(relative)
    for trace, *meta in spellings:
        entry = analysis_cache.entry_path([trace], meta, [], None, None)
        if entry is not None and entry.is_file():
            return entry
    return None


def _analyze_source(src: sources.Source) -> Loaded:
    if src.saved is not None:
        return saved_cached(sources.digest_saved(src), str(src.saved), str(src.trace))
    files = [src.trace, *src.meta]
    for p in files:
        if not p.is_file():
            raise TraceInsightError(f"{p}: no such file")
    entry = kept_entry(src)
    if entry is not None:
        st.sidebar.caption("analyzed before (`traceinsight analyze`): read from the analysis it kept")
        if not st.sidebar.toggle("Analyze again (every launch's schedule, why each step took its time)",
                                 key="analyze_kept"):
            kept = kept_cached(str(entry))
            if kept is not None:
                return kept
            kept_cached.clear()  # damaged and deleted: not remembered as missing
    return analyze_cached(sources.digest_files(files), str(src.trace), tuple(str(m) for m in src.meta))


def _analyze_upload(trace: Any, meta: Any | None) -> Loaded:
    uploads = [trace] + ([meta] if meta is not None else [])
    for f in uploads:
        sources.check_size(f.name, f.size)
    blobs = [(f.name, f.getvalue()) for f in uploads]
    digest = sources.digest_bytes([b for _, b in blobs])
    with sources.private_copies(blobs) as paths:
        try:
            return analyze_cached(digest, str(paths[0]), tuple(str(p) for p in paths[1:]))
        except TraceInsightError as exc:  # name the upload, not the private copy
            msg = str(exc)
            for (name, _), p in zip(blobs, paths, strict=True):
                msg = msg.replace(str(p), name)
            raise TraceInsightError(msg) from None


# --- sidebar ------------------------------------------------------------------------------------------------

def choose_source() -> Loaded | None:
    st.sidebar.title("traceinsight")
    cli = sources.from_args([p for p in os.environ.get(PATHS_ENV, "").split(os.pathsep) if p],
                            [p for p in os.environ.get(META_ENV, "").split(os.pathsep) if p])
    fleet = os.environ.get(fleet_view.FLEET_ENV, "")
    if fleet and sources.is_saved(Path(fleet)):
        cli += sources.saved_sources(Path(fleet))  # the fleet's traces, from their saved tables
    bundled = sources.examples()
    options = (["Command line"] if cli else []) + ["Bundled example", "Upload"]
    kind = st.sidebar.radio("Trace", options, key="source_kind")
    try:
        if kind in ("Command line", "Bundled example"):
            pool = cli if kind == "Command line" else bundled
            if not pool:
                st.sidebar.info("No bundled example found (examples/ is missing).")
                return None
            labels = [s.label for s in pool]
            label = st.sidebar.selectbox("File", labels, key="example")
            src = pool[labels.index(label)]
            if src.meta:
                st.sidebar.caption("sidecar: " + ", ".join(m.name for m in src.meta))
            if src.saved is not None:
                st.sidebar.caption(f"saved analysis in {src.saved}: read from its tables, nothing analyzed")
            with st.spinner(f"Reading {src.trace.name} ..." if src.saved else f"Analyzing {src.trace.name} ..."):
                return _analyze_source(src)
        st.sidebar.caption(f"Kineto/torch.profiler JSON(.gz), Nsight Systems .sqlite/.nsys-rep. Up to "
                           f"{sources.MAX_UPLOAD_MB} MB; copied to a private temporary folder and deleted after "
                           "reading.")
        trace = st.sidebar.file_uploader("Trace file", key="upload_trace")
        meta = st.sidebar.file_uploader("Sidecar (optional, *.meta.json[.gz])", key="upload_meta")
        if trace is None:
            st.info("Upload a trace in the sidebar, or pick a bundled example.")
            return None
        with st.spinner(f"Analyzing {trace.name} ..."):
            return _analyze_upload(trace, meta)
    except (TraceInsightError, sources.UploadTooLarge) as exc:
        st.error(f"Cannot analyze this file: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    except Exception as exc:  # noqa: BLE001 - show one line, never a traceback
        st.error(f"Internal error while analyzing: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}")
    return None


def choose_other() -> Loaded | None:
    """The trace to compare with (after): one of the command line's or the bundled examples."""
    cli = sources.from_args([p for p in os.environ.get(PATHS_ENV, "").split(os.pathsep) if p],
                            [p for p in os.environ.get(META_ENV, "").split(os.pathsep) if p])
    pool = cli + sources.examples()
    if not pool:
        return None
    labels = [s.label for s in pool]
    label = st.sidebar.selectbox("After", labels, key="compare_with")
    src = pool[labels.index(label)]
    try:
        with st.spinner(f"Analyzing {src.trace.name} ..."):
            return _analyze_source(src)
    except TraceInsightError as exc:
        st.error(f"Cannot analyze this file: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    return None


# --- sections -----------------------------------------------------------------------------------------------

def header(doc: dict[str, Any]) -> None:
    tr = doc.get("trace") or {}
    gpu = tr.get("gpu") or {}
    st.title("traceinsight")
    st.caption(f"{tr.get('path')} · {tr.get('format')} · {gpu.get('name') or 'unknown GPU'}"
               + (f", {gpu['num_sms']} SMs" if gpu.get("num_sms") else ""))
    findings = doc.get("findings") or []
    worst = finding_order.sorted_findings(doc)[:1]
    cols = st.columns(4)
    cols[0].metric("steps", len(doc.get("steps") or []))
    cols[1].metric("time in steps", fmt_ns(sections.total_step_ns(doc)))
    cols[2].metric("critical findings", sum(f.get("severity") == "critical" for f in findings))
    cols[3].metric("largest saving", fmt_ns(worst[0].get("saving_ns")) if worst else "-")
    savings = sections.savings_line(doc)  # inside steps and between them apart, never one sum against step time
    if savings:
        st.caption(savings)


def _finding_line(f: dict[str, Any], names: dict[int, str]) -> str:
    """One finding by its id (`ref`, e.g. latency-spike#3, else its rule id), severity, summary and steps."""
    steps = list(f.get("steps") or [])
    shown = ", ".join(f"{i} ({names.get(i, '?')})" for i in steps[:6]) + (f" … +{len(steps) - 6}" if len(steps) > 6
                                                                         else "")
    where = f" (steps {shown})" if steps else ""
    return f"`{f.get('ref') or f.get('id')}` {(f.get('severity') or 'info').upper()}: {f.get('summary', '')}{where}"


def findings(doc: dict[str, Any]) -> None:
    st.header("Findings")
    why = notes.missing(doc, "findings")
    if why:
        st.success(why)
    names = {s["index"]: s["name"] for s in doc.get("steps") or []}
    for g in sections.finding_groups(doc):
        first = g.findings[0]
        box = SEVERITY_BOX.get(g.severity, st.info)
        saving = f" — saves ≈ {fmt_ns(g.saving_ns)}" if g.saving_ns else ""
        more = f" (+{len(g.findings) - 1} more)" if len(g.findings) > 1 else ""
        also = f"  \nevidence: {g.evidence_text()}" if g.related else ""
        box(f"**{g.severity.upper()} · {g.id}** — {g.summary}{more}{saving}{also}")
        with st.expander(f"{g.id}: why, remedy, findings and evidence"):
            if first.get("explanation"):
                st.markdown(first["explanation"])
            if first.get("remedy"):
                st.markdown(f"**Remedy:** {first['remedy']}")
            st.markdown("**Findings of this root cause:**  \n" + "  \n".join(_finding_line(f, names)
                                                                              for f in g.findings))
            if g.related:
                st.markdown(f"**Evidence ({len(g.related)} findings of other rules that this cause explains):**  \n"
                            + "  \n".join(_finding_line(f, names) for f in g.related))
            if g.steps:
                st.markdown(f"**Steps ({len(g.steps)}):** "
                            + ", ".join(f"{i} ({names.get(i, '?')})" for i in g.steps[:10])
                            + (f" … +{len(g.steps) - 10}" if len(g.steps) > 10 else ""))
            if first.get("evidence"):
                st.json(first["evidence"], expanded=False)
    line = notes.checks_line(doc)
    if line:
        with st.expander(f"What was checked: {line}"):
            _, rows = notes.checks(doc)
            st.dataframe([{"rule": c.get("id"), "status": c.get("status"), "why": c.get("reason")} for c in rows],
                         hide_index=True, width="stretch")


def _default_step(doc: dict[str, Any]) -> int | None:
    ref = launch_pick.worst_launch(doc)
    if ref is not None:
        return ref.step
    steps = doc.get("steps") or []
    return steps[0]["index"] if steps else None


def timeline(doc: dict[str, Any]) -> int | None:
    """The step timeline; returns the selected step index."""
    st.header("Step timeline")
    why = notes.missing(doc, "steps")
    if why:
        st.info(why)
        return None
    points = step_timeline.timeline(doc)
    event = st.altair_chart(charts.timeline_chart(points), on_select="rerun", key="timeline_chart",
                            width="stretch")
    st.caption("Click a step to see its launches (double-click clears). Coloured: spikes, by the finding that "
               "explains them.")
    index = [p.index for p in points]
    clicked = None
    try:
        picked = (event.selection or {}).get(charts.STEP_SELECTION) or []
        if picked and picked[0].get("step") in index:
            clicked = int(picked[0]["step"])
    except (AttributeError, TypeError):
        picked = []
    if clicked is not None and st.session_state.get("_last_click") != clicked:
        st.session_state["_last_click"] = clicked
        st.session_state["step_select"] = clicked
    if "step_select" not in st.session_state or st.session_state["step_select"] not in index:
        st.session_state["step_select"] = _default_step(doc)
    by_index = {s["index"]: s for s in doc["steps"]}
    step = st.selectbox("Step", index, key="step_select",
                        format_func=lambda i: f"{i} · {by_index[i]['name']} · "
                                              f"{fmt_ns(by_index[i].get('wall_ns', by_index[i]['dur_ns']))}")
    s = by_index[step]
    flagged = [f["id"] for f in doc.get("findings") or [] if step in (f.get("steps") or [])]
    st.markdown(f"**Step {step}** `{s['name']}`: {fmt_ns(s.get('wall_ns', s['dur_ns']))} "
                f"({fmt_ns(s['attention_ns'])} attention), "
                f"{s['kernel_count']} kernels, split-KV {_split(s.get('split_kv'))}"
                + (f"; findings: {', '.join(flagged)}" if flagged else ""))
    rows = []
    for j, x in enumerate(s["launches"]):
        m = x.get("model") or {}
        rows.append({"#": j, "kernel": x["kernel"], "backend": x.get("backend"), "phase": x.get("phase"),
                     "grid": str(tuple(x["grid"])), "block": str(tuple(x["block"])), "time": fmt_ns(x["dur_ns"]),
                     "split-KV": _split(x.get("split_kv")), "merges": len(x.get("merges") or []),
                     "predicted": fmt_ns(m.get("predicted_ns")), "work items": m.get("work_items") or "-",
                     "SM idle": f"{m['sm_idle']:.0%}" if m.get("sm_idle") is not None else "-",
                     "tail": fmt_ns(m.get("tail_ns")), "split evidence": x.get("split_evidence")})
    st.dataframe(rows, hide_index=True, width="stretch")
    return step


def why(loaded: Loaded, step: int | None) -> None:
    """Why the selected step took what it took (`traceinsight explain`): its breakdown against the steps around
    it, what grew, the cause and the remedy."""
    if step is not None and loaded.analysis is None:
        st.caption(f"Why step {step} took what it took: {loaded.only}.")
        return
    if step is None or loaded.analysis is None or not loaded.analysis.findings and not loaded.analysis.checks:
        return
    from traceinsight.diagnose.explain import explain_step

    try:
        ex = explain_step(loaded.analysis, step).to_json()
    except KeyError:
        return
    verdict = "a latency spike" if ex["spike"] else "within its trend"
    st.subheader(f"Why step {step} took {fmt_ns(ex['wall_ns'])}")
    st.markdown(f"{fmt_ns(ex['wall_ns'])} against a {fmt_ns(ex['baseline_ns'])} baseline ({ex['ratio']:.2f}x): "
                f"{verdict}" + (f"; cause **{ex['cause']}**" if ex.get("cause") else ""))
    st.altair_chart(charts.breakdown_chart(ex), key="breakdown_chart", width="stretch")
    st.dataframe([{"component": p["component"], "this step": fmt_ns(p["step_ns"]),
                   "baseline": fmt_ns(p["baseline_ns"]), "change": fmt_ns(p["delta_ns"]),
                   "share of excess": f"{100 * p['share']:.0f}%" if p["attributed_ns"] > 0 else ""}
                  for p in ex["attribution"] if p["step_ns"] or p["baseline_ns"]], hide_index=True, width="stretch")
    host = ex.get("host")
    if host and host.get("ops"):
        st.dataframe([{"host op": r["name"], "calls": r["calls"], "in the wait": fmt_ns(r["in_stall_ns"]),
                       "usually": fmt_ns(r["usual_ns"]) if r["usual_ns"] else "not seen"} for r in host["ops"]],
                     hide_index=True, width="stretch")
    if ex.get("remedy"):
        st.caption(f"Remedy: {ex['remedy']}")


def _split(state: bool | None) -> str:
    return {True: "on", False: "off"}.get(state, "?")  # type: ignore[arg-type]


def kernel_table(doc: dict[str, Any]) -> None:
    st.header("Kernels")
    kernels = kernel_tables.kernel_rows(doc, None)
    if not kernels:
        st.info("not available: no kernel in the trace")
        return
    families = sorted({k.get("family") or "?" for k in kernels})
    backends = sorted({k.get("backend") or "-" for k in kernels})
    c1, c2, c3 = st.columns([2, 2, 3])
    fam = c1.multiselect("Family", families, default=[f for f in families if f in ("attention", "merge",
                                                                                   "prepare")] or families,
                         key="kernel_family")
    back = c2.multiselect("Backend", backends, default=backends, key="kernel_backend")
    text = c3.text_input("Name contains", key="kernel_search").strip().lower()
    rows = []
    for k in kernels:
        if (k.get("family") or "?") not in fam or (k.get("backend") or "-") not in back:
            continue
        if text and text not in (k.get("name") or "").lower() and text not in (k.get("kernel") or "").lower():
            continue
        rows.append({"kernel": k.get("kernel"), "family": k.get("family"), "backend": k.get("backend"),
                     "phase": k.get("phase"), "count": k.get("count"), "total ms": (k.get("total_ns") or 0) / 1e6,
                     "mean us": (k.get("mean_ns") or 0) / 1e3, "max ms": (k.get("max_ns") or 0) / 1e6,
                     "share %": round(100 * (k.get("share") or 0), 2),
                     "grids": kernel_tables.grids_text(k.get("grids")),
                     "parameters": kernel_tables.params_text(k.get("params")),
                     "phase evidence": k.get("phase_evidence"), "name": k.get("name")})
    st.caption(f"{len(rows)} of {len(kernels)} kernels")
    st.dataframe(rows, hide_index=True, width="stretch")


def thresholds(doc: dict[str, Any]) -> None:
    st.header("Split-KV thresholds")
    panels = sweep_view.sweep(doc)
    if panels:
        st.altair_chart(charts.sweep_chart(sweep_view.plotted_panels(panels)), key="sweep_chart")
        st.caption("Median attention time per case over its repeated steps; dashed: B_th, the batch size from "
                   "which the planner turns split-KV off.")
    else:
        st.caption(notes.missing(doc, "sweep") or "")
    why = notes.missing(doc, "thresholds")
    if why:
        st.info(why)
        return
    st.dataframe([{"kernel": t.get("kernel"), "backend": t.get("backend"), "shape": t.get("shape"),
                   "variants": t.get("variants"), "KV heads": t.get("kv_heads"),
                   "CTAs/SM": t.get("occupancy"), "max grid": t.get("max_grid"), "B_th": t.get("b_threshold")}
                  for t in kernel_tables.threshold_rows(doc)], hide_index=True, width="stretch")


def schedule(loaded: Loaded, step: int | None) -> None:
    from traceinsight.report.gantt import gantt_for_launch

    st.header("Per-SM schedule")
    doc = loaded.doc
    choices: list[tuple[str, tuple[int, int] | None]] = [("worst launch of the trace", None)]
    if step is not None:
        s = next(x for x in doc["steps"] if x["index"] == step)
        choices += [(f"step {step}, launch {j}: {x['kernel']} grid {tuple(x['grid'])}", (step, j))
                    for j, x in enumerate(s["launches"])]
    labels = [c[0] for c in choices]
    label = st.selectbox("Launch", labels, key="schedule_launch")
    target = choices[labels.index(label)][1]
    if target is None:
        g = loaded.report_gantt()
    else:
        g = f"Launch {target[1]} of step {target[0]}: {loaded.only}." if loaded.analysis is None else \
            gantt_for_launch(loaded.analysis, *target)
    if not isinstance(g, Gantt):
        st.info(g)
        return
    st.markdown("  \n".join(f"**{line}**" for line in g.title.splitlines()))
    st.altair_chart(charts.gantt_chart(g), key="gantt_chart", width="stretch")
    for n in g.notes:
        st.markdown(f"- {n}")


def report_download(loaded: Loaded) -> None:
    st.header("Report")
    if st.button("Build the HTML report", key="build_report"):
        from traceinsight.report import html

        text = html.render([loaded.doc], [loaded.report_gantt()])
        name = Path((loaded.doc.get("trace") or {}).get("path") or "trace").name
        st.download_button("Download report.html", text, file_name=f"{name}.report.html", mime="text/html",
                           key="download_report")


def main() -> None:
    st.set_page_config(page_title="traceinsight", layout="wide")
    fleet = os.environ.get(fleet_view.FLEET_ENV, "")
    if fleet and st.sidebar.radio("View", ["Fleet", "One trace"], key="view") == "Fleet":
        fleet_view.page(Path(fleet))
        return
    loaded = choose_source()
    if loaded is None:
        return
    if st.sidebar.toggle("Compare with another trace (A/B)", key="compare"):
        other = choose_other()
        if other is not None:
            compare_view.page(loaded.doc, other.doc)
        return
    doc = loaded.doc
    header(doc)
    findings(doc)
    step = timeline(doc)
    why(loaded, step)
    kernel_table(doc)
    thresholds(doc)
    schedule(loaded, step)
    report_download(loaded)


main()
