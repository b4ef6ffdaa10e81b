"""Multi-rank runs (issue 30) on real multi-rank Kineto traces: HolisticTraceAnalysis' two ranks of a 128-rank
NCCL run (tests/data/foreign/hta, a sample of the events: some collectives lost on one rank), and a 2-rank run
built from HTA's real rank-0 trace of a 2-rank run (its rank 1 is not public): rank 1 a copy, then with one rank
made late before one collective, a clock offset, or a stall on every rank. Expected values are read from the
files with json here, not from the analyzer."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from traceinsight.cli.main import main
from traceinsight.diagnose.rules import rank_straggler
from traceinsight.diagnose.run_rules import run_rules
from traceinsight.ingest import load
from traceinsight.labels import label
from traceinsight.model.kernel_table import ensure_labels
from traceinsight.model.ranks import RunAlignment, align_run, find_runs

HTA = Path(__file__).resolve().parent / "data" / "foreign" / "hta"
PAIR = [HTA / "sampled_rank-0.json.gz", HTA / "sampled_rank-1.json.gz"]
NCCL_RANK0 = HTA / "nccl_data_rank0.json.gz"
US = 1000  # ns per µs (Kineto's unit)


def _doc(path: Path) -> dict[str, Any]:
    return json.loads(gzip.decompress(path.read_bytes()))  # type: ignore[no-any-return]


def _write(doc: dict[str, Any], path: Path) -> Path:
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def _nccl(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel" and "nccl" in e["name"]),
                  key=lambda e: e["ts"])


def _align(paths: list[Path]) -> RunAlignment:
    db, ids = load(paths, cache=False)
    ensure_labels(db)
    runs = find_runs(db, ids)
    assert len(runs) == 1
    return align_run(db, runs[0])


# ------------------------------------------------------------------ HTA's two ranks of one run
@pytest.fixture(scope="module")
def pair() -> RunAlignment:
    return _align(PAIR)


def test_the_two_hta_ranks_are_one_run(pair: RunAlignment) -> None:
    assert [r.rank for r in pair.ranks] == [0, 1]
    assert pair.world_size == 128
    assert pair.steps == ["ProfilerStep#551", "ProfilerStep#552"]


def test_every_collective_both_ranks_hold_is_matched_and_only_those(pair: RunAlignment) -> None:
    """Read with json: a rank-0 NCCL kernel is the same collective as a rank-1 kernel on the same stream that ends
    within 0.5 ms of it (one NCCL operation ends on every rank together); the sample lost the others' partners."""
    k0, k1 = (_nccl(_doc(p)) for p in PAIR)
    both = [(a, b) for a in k0 for b in k1 if a["args"]["stream"] == b["args"]["stream"]
            and abs((a["ts"] + a["dur"]) - (b["ts"] + b["dur"])) <= 500]
    assert len(both) == len(pair.collectives) == 5
    assert pair.counts == {0: len(k0), 1: len(k1)}
    assert pair.unmatched == {0: len(k0) - 5, 1: len(k1) - 5}
    assert not pair.sequences_identical
    want = sorted((round(a["ts"] * US), round(b["ts"] * US)) for a, b in both)
    got = sorted((c.starts_ns[0], c.starts_ns[1] + pair.offsets_ns[1]) for c in pair.collectives)
    assert got == want
    assert abs(pair.offsets_ns[1]) <= 100 * US  # one host: the two clocks are the same clock


def test_wait_is_the_last_arrival_less_ones_own_bounded_by_the_kernel(pair: RunAlignment) -> None:
    for c in pair.collectives:
        last = max(c.starts_ns)
        for s, d, w in zip(c.starts_ns, c.durs_ns, c.waits_ns, strict=True):
            assert 0 <= w <= d
            assert w == min(last - s, d)
        assert c.waits_ns[pair.rank_ids.index(c.last_rank)] == 0


def test_each_rank_step_totals_its_collectives_and_waits(pair: RunAlignment) -> None:
    for s in pair.rank_steps:
        k = pair.rank_ids.index(s.rank)
        mine = [c for c in pair.collectives if c.step == s.step]
        assert s.wait_ns == sum(c.waits_ns[k] for c in mine) <= s.collective_ns


def test_rank_1_of_the_hta_pair_kept_rank_0_waiting(pair: RunAlignment) -> None:
    """On the real pair rank 1 arrived last at every matched collective; before them it ran more GEMM time
    (ProfilerStep#551: rank 1 108.5 ms of GEMM kernels vs rank 0 79.4 ms, summed here from the files)."""
    findings, results = run_rules(pair)
    assert [f.evidence["straggler_rank"] for f in findings] == [1]
    assert findings[0].evidence["cause"] == "gemm"
    assert findings[0].saving_ns == sum(c.waits_ns[0] for c in pair.collectives)
    assert results[0].status == "fired"
    gemm = []
    for p in PAIR:
        doc = _doc(p)
        step = next(e for e in doc["traceEvents"] if e.get("name") == "ProfilerStep#551")
        gemm.append(sum(e["dur"] for e in doc["traceEvents"] if e.get("cat") == "kernel"
                        and label(e["name"]).family == "gemm" and step["ts"] <= e["ts"] < step["ts"] + step["dur"]))
    assert gemm[1] > gemm[0] * 1.2


# ------------------------------------------------------------------ a 2-rank run built from HTA's real rank 0
def _rank1(tmp_path: Path, name: str, change: Any = None, shift_ns: int = 0) -> Path:
    doc = _doc(NCCL_RANK0)
    doc["distributedInfo"]["rank"] = 1
    if change is not None:
        change(doc)
    if shift_ns:
        for e in doc["traceEvents"]:
            if "ts" in e:
                e["ts"] += shift_ns / US
    return _write(doc, tmp_path / f"{name}.json.gz")


def _late(doc: dict[str, Any], x_us: float, index: int, grow_kernel: bool) -> dict[str, Any]:
    """Rank 1 late at NCCL kernel `index` by x_us: the last other kernel before it grows by x_us (or, without
    grow_kernel, the GPU sits idle that long), and everything after that kernel's end starts x_us later."""
    kernels = sorted((e for e in doc["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    coll = _nccl(doc)[index]
    prev = [e for e in kernels if "nccl" not in e["name"] and e["ts"] + e["dur"] <= coll["ts"]][-1]
    cut = prev["ts"] + prev["dur"]
    for e in kernels:
        if e["ts"] >= cut:
            e["ts"] += x_us
    if grow_kernel:
        prev["dur"] += x_us
    return prev


def _waited(doc: dict[str, Any], x_us: float, index: int) -> None:
    """Rank 0's side of the same collective: its kernel lasts x_us longer (it waited), later kernels follow."""
    coll = _nccl(doc)[index]
    end = coll["ts"] + coll["dur"]
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and e["ts"] >= end:
            e["ts"] += x_us
    coll["dur"] += x_us


def test_a_copy_of_a_real_rank_aligns_collective_for_collective_and_nobody_waits(tmp_path: Path) -> None:
    run = _align([NCCL_RANK0, _rank1(tmp_path, "copy")])
    n = len(_nccl(_doc(NCCL_RANK0)))
    assert n == 21
    assert len(run.collectives) == n and run.sequences_identical and run.unmatched == {0: 0, 1: 0}
    assert [c.kind for c in run.collectives] == [k["args"]["Collective name"] for k in _nccl(_doc(NCCL_RANK0))]
    assert {c.group for c in run.collectives} == {"0"}  # the recorded 'Process Group Name'
    assert all(c.waits_ns == (0, 0) for c in run.collectives)
    assert run_rules(run)[0] == []


def test_the_collectives_arguments_are_read_from_the_kernels_at_ingest(tmp_path: Path) -> None:
    db, (trace,) = load([NCCL_RANK0], cache=False)
    args = {r["correlation_id"]: r for r in db.rows("SELECT * FROM collectives WHERE trace_id = $t", {"t": trace})}
    kernels = _nccl(_doc(NCCL_RANK0))
    assert len(args) == len(kernels)
    for k in kernels:
        a = args[k["args"]["correlation"]]
        assert (a["name"], a["in_nelems"], a["group_size"], a["group_name"], a["group_ranks"]) == (
            k["args"]["Collective name"], k["args"]["In msg nelems"], 2, k["args"]["Process Group Name"],
            k["args"]["Process Group Ranks"])
    # The run is aligned from the database alone: the rank's file gone after ingest changes nothing.
    copy = _write(_doc(NCCL_RANK0), tmp_path / "rank0.json.gz")
    db, ids = load([copy, _rank1(tmp_path, "copy")], cache=False)
    copy.unlink()
    ensure_labels(db)
    run = align_run(db, find_runs(db, ids)[0])
    assert {c.group for c in run.collectives} == {"0"} and len(run.collectives) == 21


@pytest.mark.parametrize("grow_kernel", [True, False], ids=["kernel-grew", "host-late"])
def test_an_injected_straggler_is_named_with_its_rank_step_and_cause(tmp_path: Path, grow_kernel: bool) -> None:
    x_us, index = 1500.0, 9
    grown: dict[str, Any] = {}

    def late(doc: dict[str, Any]) -> None:
        grown.update(_late(doc, x_us, index, grow_kernel))

    r0 = _doc(NCCL_RANK0)
    _waited(r0, x_us, index)
    run = _align([_write(r0, tmp_path / "rank0.json.gz"), _rank1(tmp_path, "late", late, shift_ns=2_500_000_000)])
    assert abs(run.offsets_ns[1] - 2_500_000_000) <= 10 * US  # the clock offset found from the collectives' ends
    assert run.sequences_identical and len(run.collectives) == 21
    c = run.collectives[index]
    assert c.last_rank == 1
    assert c.waits_ns[0] == pytest.approx(x_us * US, abs=2 * US) and c.waits_ns[1] == 0
    assert all(max(o.waits_ns) <= 2 * US for o in run.collectives if o.index != index)
    findings, _ = run_rules(run)
    assert len(findings) == 1
    f = findings[0]
    steps = [e for e in r0["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    launch_step = next(s["name"] for s in steps if s["ts"] <= _nccl(r0)[index]["ts"] < s["ts"] + s["dur"])
    assert f.evidence["straggler_rank"] == 1 and f.evidence["steps"] == [launch_step]
    assert f.evidence["cause"] == (label(grown["name"]).family if grow_kernel else "host")
    assert f.evidence["cause_growth_ns"] == pytest.approx(x_us * US, abs=2 * US)
    assert f.saving_ns == pytest.approx(x_us * US, abs=2 * US)


def test_a_stall_on_every_rank_is_not_a_straggler(tmp_path: Path) -> None:
    def stall(doc: dict[str, Any]) -> None:
        _late(doc, 5000.0, 9, grow_kernel=False)

    r0 = _doc(NCCL_RANK0)
    stall(r0)
    run = _align([_write(r0, tmp_path / "rank0.json.gz"), _rank1(tmp_path, "stalled", stall)])
    assert run.sequences_identical
    assert all(c.waits_ns == (0, 0) for c in run.collectives)
    findings, results = run_rules(run)
    assert findings == [] and results[0].status == "passed"
    assert rank_straggler.caused_wait_ns(run, 0) == rank_straggler.caused_wait_ns(run, 1) == 0


# ------------------------------------------------------------------ runs and the command line
def test_files_of_different_runs_stay_separate(tmp_path: Path) -> None:
    db, ids = load([NCCL_RANK0, PAIR[0], _rank1(tmp_path, "r1"), NCCL_RANK0.parent / "sampled_rank-1.json.gz"],
                   cache=False)
    ensure_labels(db)
    runs = find_runs(db, ids)
    assert sorted([f.path.endswith(("nccl_data_rank0.json.gz", "r1.json.gz")) for f in run] for run in runs) == [
        [False, False], [True, True]]
    db2, ids2 = load([NCCL_RANK0, PAIR[0]], cache=False)
    assert find_runs(db2, ids2) == []  # world sizes 2 and 128: no run of two ranks


def _cli(*args: Any) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["analyze", *map(str, args)])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, r.stdout


def test_analyze_reports_the_run_in_text_and_json(tmp_path: Path) -> None:
    code, out = _cli(*PAIR, "-q", "--no-cache")
    assert code == 0
    assert "Run: 2 of 128 ranks (0, 1); 5 collectives matched on every rank" in out
    assert "rank-straggler  rank 1 arrived last at 5 of 5 collectives" in out
    code, out = _cli(*PAIR, "-q", "--no-cache", "--format", "json")
    doc = json.loads(out)
    runs = [t["run"] for t in doc["traces"]]
    assert runs[0] == runs[1] and runs[0]["collectives_matched"] == 5
    for c in runs[0]["collectives"]:
        assert c["last_rank"] in (0, 1)
        assert all(0 <= r["wait_ns"] <= r["dur_ns"] for r in c["ranks"])
    straggler = [f for t in doc["traces"] for f in t["findings"] if f["id"] == "rank-straggler"]
    assert [(f["evidence"]["rank"], f["saving_ns"] is None) for f in straggler] == [(0, False), (1, True)]


def test_one_rank_alone_is_analyzed_as_before() -> None:
    code, out = _cli(NCCL_RANK0, "-q", "--no-cache", "--format", "json")
    doc = json.loads(out)
    assert "run" not in doc and all(c["id"] != "rank-straggler" for c in doc["checks"])


def test_the_run_rules_are_declared_as_the_catalogues_rules_are() -> None:
    from traceinsight.diagnose.registry import RULE_IDS
    from traceinsight.diagnose.run_rules import RUN_RULES

    for r in RUN_RULES:
        assert r.__doc__ and r.NAME and r.DESCRIPTION and r.PASSED and callable(r.apply)
        assert r.ID not in RULE_IDS  # a trace analyzed alone is judged by the same catalogue as before
        for name in (n for n in dir(r) if n.isupper() and isinstance(getattr(r, n), int | float)):
            assert any(t in name for t in ("_NS", "FRACTION", "MIN", "MAX")), (r.ID, name)


def _sql(*args: Any) -> list[dict[str, Any]]:
    r = CliRunner().invoke(main, ["sql", *map(str, args), "--format", "json"])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def test_sql_answers_on_the_run_tables_as_the_json_document_says() -> None:
    code, out = _cli(*PAIR, "-q", "--no-cache", "--format", "json")
    run = json.loads(out)["traces"][0]["run"]
    rows = _sql(*PAIR, "select collective, rank, dur_ns, wait_ns, transfer_ns, last_rank from rank_collectives "
                       "order by collective, rank")
    assert [(r["collective"], r["rank"], r["dur_ns"], r["wait_ns"], r["last_rank"]) for r in rows] == [
        (c["index"], x["rank"], x["dur_ns"], x["wait_ns"], c["last_rank"]) for c in run["collectives"]
        for x in c["ranks"]]
    assert all(r["wait_ns"] + r["transfer_ns"] == r["dur_ns"] for r in rows)
    bad = _sql(*PAIR, "select count(*) as n from rank_collectives where wait_ns < 0 or wait_ns > dur_ns "
                      "or (rank = last_rank and wait_ns <> 0)")
    assert bad == [{"n": 0}]
    steps = _sql(*PAIR, "select s.step, s.rank, s.wait_ns, sum(b.busy_ns) as busy from rank_steps s "
                        "join rank_step_busy b using (run, step, rank) group by all order by s.step, s.rank")
    assert [(r["step"], r["rank"], r["wait_ns"]) for r in steps] == sorted(
        (s["step"], s["rank"], s["wait_ns"]) for s in run["rank_steps"])
    assert _sql(NCCL_RANK0, "select count(*) as n from rank_collectives") == [{"n": 0}]  # one rank: no run


def test_the_html_report_has_the_rank_by_step_wait_heatmap(tmp_path: Path) -> None:
    import re

    out = tmp_path / "r.html"
    code, _ = _cli(*PAIR, "-q", "--no-cache", "--format", "html", "--out", out)
    assert code == 0
    page = out.read_text()
    code, text = _cli(*PAIR, "-q", "--no-cache", "--format", "json")
    run = json.loads(text)["traces"][0]["run"]
    cells = re.findall(r'data-rank="(\d+)" data-step="([^"]+)" data-wait-ns="(\d+)"', page)
    assert sorted((int(r), s, int(w)) for r, s, w in cells) == sorted(
        (s["rank"], s["step"], s["wait_ns"]) for s in run["rank_steps"])
    assert page.count('<table class="collectives">') == 1 and "rank 1 arrived last at 5 of 5" in page
    code, _ = _cli(NCCL_RANK0, "-q", "--no-cache", "--format", "html", "--out", tmp_path / "one.html")
    assert 'class="heatmap"' not in (tmp_path / "one.html").read_text()


def test_a_folder_or_a_glob_gives_the_same_run_and_leaves_the_other_runs_file_alone() -> None:
    _, folder = _cli(HTA, "-q", "--no-cache", "--format", "json")
    _, glob = _cli(str(HTA / "sampled_rank-*.json.gz"), "-q", "--no-cache", "--format", "json")
    by_name = {Path(t["trace"]["path"]).name: t for t in json.loads(folder)["traces"]}
    assert "run" not in by_name["nccl_data_rank0.json.gz"]  # rank 0 of another (2-rank) run, alone here
    runs = [t["run"] for t in json.loads(glob)["traces"]]
    assert by_name["sampled_rank-0.json.gz"]["run"]["collectives"] == runs[0]["collectives"]


def test_four_ranks_one_late_the_others_all_wait_for_it(tmp_path: Path) -> None:
    """World size 4 from HTA's real rank 0: ranks 1-3 copies (own clock offsets), rank 2 late by 2 ms before
    collective 16; ranks 0, 1 and 3 each wait 2 ms in it."""
    x_us, index = 2000.0, 16
    paths = []
    for rank in range(4):
        doc = _doc(NCCL_RANK0)
        doc["distributedInfo"].update(rank=rank, world_size=4)
        if rank == 2:
            _late(doc, x_us, index, grow_kernel=True)
        else:
            _waited(doc, x_us, index)
        for e in doc["traceEvents"]:
            if "ts" in e:
                e["ts"] += rank * 1_000_000.0 / 3  # rank r's clock r/3 s ahead
        paths.append(_write(doc, tmp_path / f"r{rank}.json.gz"))
    run = _align(paths)
    assert run.rank_ids == [0, 1, 2, 3] and run.sequences_identical
    assert [round(run.offsets_ns[r] / 1e6) for r in range(4)] == [0, 333, 667, 1000]
    c = run.collectives[index]
    assert c.last_rank == 2
    assert [round(w / US) for w in c.waits_ns] == [2000, 2000, 0, 2000]
    (f,) = run_rules(run)[0]
    assert f.evidence["straggler_rank"] == 2 and f.saving_ns == pytest.approx(3 * x_us * US, abs=10 * US)


SMALL = Path(__file__).resolve().parents[1] / "examples" / "h200" / "flashinfer_decode_small.pt.trace.json.gz"


def _tp_rank(rank: int, late_step: int, x_us: float, waited: bool) -> dict[str, Any]:
    """The real H200 decode trace (18 annotated steps) as one rank of a 2-rank tensor-parallel run: an NCCL
    all-reduce after each step's last kernel (the rank's GPU reaches it when its step's work ends; the next step's
    GPU work starts after it, 22 µs later than in the file). Not `waited`:
    this rank's longest attention kernel of `late_step` is x_us longer, and all GPU work after it x_us later.
    `waited`: its all-reduce of that step lasts x_us longer (it waited), and all GPU work after it is x_us later."""
    doc = _doc(SMALL)
    doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
    ev = doc["traceEvents"]
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")]
    kernels = [e for e in gpu if e["cat"] == "kernel"]
    steps = sorted((e for e in gpu if e["cat"] == "gpu_user_annotation" and e["name"].startswith("decode_step")),
                   key=lambda e: e["ts"])  # each step's GPU-side range
    colls, step_kernels = [], []
    for i, s in enumerate(steps):
        mine = [k for k in kernels if s["ts"] <= k["ts"] <= s["ts"] + s["dur"]]
        step_kernels.append(mine)
        end = max(k["ts"] + k["dur"] for k in mine)
        for e in gpu:  # the next step's work waits for this step's all-reduce
            if e["ts"] >= end and e is not s:
                e["ts"] += 22.0
        colls.append({"ph": "X", "cat": "kernel", "pid": 0, "tid": 99, "dur": 20.0, "ts": end + 1.0,
                      "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                      "args": {"device": 0, "stream": 99, "correlation": 10_000_000 + i, "grid": [16, 1, 1],
                               "block": [512, 1, 1]}})
    coll = colls[late_step]
    if waited:
        cut = coll["ts"] + coll["dur"]
        coll["dur"] += x_us
    else:
        attn = max((k for k in step_kernels[late_step] if "Decode" in k["name"] or "Prefill" in k["name"]),
                   key=lambda k: k["dur"])
        cut = attn["ts"] + attn["dur"]
        attn["dur"] += x_us
    for e in gpu + colls:
        if e["ts"] >= cut:
            e["ts"] += x_us
    ev.extend(colls)
    return doc


def test_the_waiting_ranks_report_puts_the_straggler_in_its_own_slow_step(tmp_path: Path) -> None:
    x_us, late = 1500.0, 10  # step 10: the next step starts 1.1 ms later
    paths = [_write(_tp_rank(0, late, x_us, waited=True), tmp_path / "tp0.json.gz"),
             _write(_tp_rank(1, late, x_us, waited=False), tmp_path / "tp1.json.gz")]
    from traceinsight.pipeline import analyze

    _, analyses = analyze(paths, cache=False)
    run = analyses[0].cache["run"]
    assert len(run.collectives) == 18 and run.sequences_identical
    (f0,) = [f for f in analyses[0].findings if f.id == "rank-straggler"]
    assert f0.evidence["straggler_rank"] == 1 and f0.evidence["cause"] == "attention"
    assert f0.saving_ns == pytest.approx(x_us * US, abs=5 * US)
    assert run.collectives[late].waits_ns[0] == pytest.approx(x_us * US, abs=5 * US)
    # rank 0's own step that the all-reduce it waited in follows: the step made slow on rank 1
    names = sorted((e["ts"], e["name"]) for e in _doc(SMALL)["traceEvents"]
                   if e.get("cat") == "gpu_user_annotation" and e["name"].startswith("decode_step"))
    assert [analyses[0].steps[i].name for i in f0.steps] == [names[late][1]]
    # and the straggler's own findings in its slow step (rank 1's report of that step), named on rank 0
    (own_step,) = [s.index for s in analyses[1].steps if s.name == names[late][1]]
    own = sorted({g.id for g in analyses[1].findings if own_step in g.steps and g.id != "rank-straggler"})
    assert own and f0.evidence["straggler_findings"] == own and f0.evidence["straggler_steps"] == [own_step]
    assert f"rank 1's own findings in those steps: {', '.join(own)}" in f0.summary


def test_the_markdown_report_has_the_run_section(tmp_path: Path) -> None:
    out = tmp_path / "r.md"
    code, _ = _cli(*PAIR, "-q", "--no-cache", "--format", "md", "--out", out)
    text = out.read_text()
    assert code == 0 and text.count("## Run: 2 of 128 ranks") == 1
    assert "| 0 | 8.23 ms (117 ms) | 23.6 ms (99.8 ms) |" in text  # rank 0's wait (time in collectives) per step
    assert "`rank-straggler` rank 1 arrived last at 5 of 5 collectives" in text


def test_docs_multirank_holds_the_tables_the_benchmark_prints(capsys: pytest.CaptureFixture[str]) -> None:
    import runpy

    repo = Path(__file__).resolve().parents[1]
    module = runpy.run_path(str(repo / "benchmarks" / "multirank_table.py"))
    module["main"]([])
    printed = capsys.readouterr().out.strip()
    assert printed and printed in (repo / "docs" / "MULTIRANK.md").read_text()
