"""Issue 14: a postmortem you can paste. One finding per root cause (the others its evidence), savings bounded by
the time they come from, INFO findings off healthy steps, the steps that matter first, figures that agree, and
the Unix habits of the text output. Real traces throughout (../shared/traces and the bundled demo)."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from readme_sample import README_WIDTH, current, sample

from traceinsight.cli.main import main
from traceinsight.diagnose import rootcause
from traceinsight.diagnose.rootcause import StepBudget, attribute, floors
from traceinsight.pipeline import analyze
from traceinsight.report.saved import document_of
from traceinsight.report.sections import finding_groups, saving_totals, step_tags

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "h200" / "flashinfer_decode_sweep.pt.trace.json.gz"
DEMO_META = REPO / "examples" / "h200" / "flashinfer_decode_sweep.meta.json.gz"
SHARED = REPO.parent / "shared" / "traces"
# Every shared trace analyze reads as a trace (the ncu CSV and the .nsys-rep need other inputs / nsys).
SHARED_TRACES = [
    ("h200/flashinfer_decode_sweep.pt.trace.json.gz", "h200/flashinfer_decode_sweep.meta.json.gz"),
    ("h200/flashinfer_decode_sweep.pt.trace.json.gz", None),
    ("h200/flashinfer_fa2_decode_sweep.pt.trace.json.gz", "h200/flashinfer_fa2_decode_sweep.meta.json.gz"),
    ("h200/flashinfer_decode_small.pt.trace.json.gz", None),
    ("h200/flashinfer_decode.sqlite", "h200/flashinfer_decode.nsys.meta.json"),
    ("foreign/tracelens_h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", None),
    ("foreign/fuser_h200_report1.sqlite", None),
    ("foreign/pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite", None),
    ("foreign/hta_a100_alexnet_critical_path_trace.json.gz", None),
    ("foreign/kineto_tbplugin_v100_resnet50_worker0.1623143089861.pt.trace.json.gz", None),
]


@pytest.fixture(scope="module")
def demo():  # type: ignore[no-untyped-def]
    _, (a,) = analyze([DEMO], meta=[DEMO_META], cache=False)
    return a


def _cli(*args: str, columns: int | None = README_WIDTH) -> str:
    env = {"NO_COLOR": "1"}
    if columns:
        env["COLUMNS"] = str(columns)
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_one_finding_per_root_cause_on_the_demo(demo) -> None:  # type: ignore[no-untyped-def]
    """split-kv-off's 51 launches were also told as 4 latency spikes and SM idle: now those are its evidence."""
    by_ref = {f.ref: f for f in demo.findings}
    off = next(f for f in demo.findings if f.id == "split-kv-off")
    assert off.supports is None
    assert {by_ref[r].id for r in off.related} == {"latency-spike", "sm-idle"}
    spikes = [f for f in demo.findings if f.id == "latency-spike" and f.evidence["cause"] == "split-kv-off"]
    assert len(spikes) == 4 and all(f.supports == off.ref for f in spikes)
    # The tensor-core path: the slow path is the root; the prefill-named kernel, its tail and idle SMs its evidence.
    slow = next(f for f in demo.findings if f.id == "slow-path")
    assert {by_ref[r].id for r in slow.related} >= {"decode-on-prefill-kernel", "tail-ctas", "sm-idle"}
    roots = [f for f in demo.findings if f.supports is None]
    assert [f.id for f in roots][:3] == ["split-kv-off", "split-kv-starved", "slow-path"]
    assert len(roots) == 7 and len(demo.findings) == 44  # slow-steps: 32 first-step host stalls, one root (issue 27)
    # Evidence carries no saving of its own in the listing; every root carries its basis.
    assert all(f.attributed_ns is None for f in demo.findings if f.supports)
    assert {f.saving_basis for f in roots} == {"steps", "span"}


def test_demo_findings_fit_in_15_lines() -> None:
    out = _cli("analyze", str(DEMO), "--meta", str(DEMO_META))
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Findings: "))
    end = next(i for i in range(start, len(lines)) if not lines[i].strip())
    assert end - start <= 15, "\n".join(lines[start:end])
    assert lines[start] == "Findings: 7 root causes (44 findings, the others are their evidence)"
    said = " ".join(lines[start:end])
    assert "savings: 806 ms of 1.01 s in steps (floor 207 ms), 439 ms of 782 ms between steps" in said


def test_listed_savings_never_exceed_the_time_they_come_from() -> None:
    """On every shared trace: the roots' attributed savings add up to at most the steps' wall time (savings
    inside steps) and the time between them (gpu-idle-gaps); no root claims more than its own steps' time."""
    for trace, meta in SHARED_TRACES:
        _, (a,) = analyze([SHARED / trace], meta=[SHARED / meta] if meta else [], cache=False)
        doc = document_of(a)
        t = saving_totals(doc)
        assert t["listed_steps_ns"] <= t["steps_wall_ns"], trace
        assert t["listed_between_ns"] <= t["between_steps_ns"], trace
        walls = {s.index: s.wall_ns for s in a.steps}
        for f in a.findings:
            if f.supports is None and f.attributed_ns and f.saving_basis == "steps" and f.steps:
                assert f.attributed_ns <= sum(walls[i] for i in f.steps), (trace, f.ref)
        listed = sum(g.saving_ns or 0 for g in finding_groups(doc))
        assert listed == t["listed_steps_ns"] + t["listed_between_ns"], trace


def test_demo_listed_savings_against_step_time(demo) -> None:  # type: ignore[no-untyped-def]
    """Before: 2.9 s of savings listed against 1.01 s of step time. Now: 806 ms within steps."""
    t = document_of(demo)["savings"]
    assert t["steps_wall_ns"] == 1_012_903_127
    assert t["listed_steps_ns"] == 805_983_599 < t["steps_wall_ns"] - t["steps_floor_ns"]
    assert t["steps_floor_ns"] == 206_919_518  # what the steps would still take with the remedies (issue 27)
    assert t["listed_between_ns"] == 439_300_339 < t["between_steps_ns"]


def test_attribute_bounds_each_step() -> None:
    budget = {0: 100, 1: 100, 2: 50}
    # The first claim takes what it asks for, spread by what is left; the second gets only the rest.
    assert attribute([(150, [0, 1]), (200, [1, 2])], budget) == [150, 75]
    # A claim without steps draws on what is left in all; None stays None; nothing goes negative.
    assert attribute([(None, [0]), (-5, [0]), (400, [])], budget) == [None, 0, 250]
    assert attribute([(10, [7])], budget) == [10]  # steps outside the budget: the total bounds it
    assert attribute([(300, [0, 1, 2]), (1, [0])], budget) == [250, 0]


def test_info_findings_do_not_tag_healthy_steps(demo) -> None:  # type: ignore[no-untyped-def]
    """135 healthy steps carried kv-bandwidth / gpu-idle-gaps tags; INFO causes now tag only steps that broke
    from their trend (latency spikes)."""
    doc = document_of(demo)
    tags = step_tags(doc)
    spikes = {i for f in doc["findings"] if f["id"] == "latency-spike" for i in f["steps"]}
    infos = {f["id"] for f in doc["findings"] if f["severity"] == "info" and f["supports"] is None}
    assert infos >= {"gpu-idle-gaps", "kv-bandwidth"}
    for i, t in tags.items():
        if any(x.split(" ")[0] in infos for x in t):
            assert i in spikes
    assert len(tags) == 255 and not any(i in tags for i in range(0, 63))


def test_steps_table_leads_with_the_steps_that_matter() -> None:
    out = _cli("analyze", str(DEMO), "--meta", str(DEMO_META), columns=220)
    table = out[out.index("Steps (390"):]
    assert table.startswith("Steps (390, 255 with findings): the 40 that matter most")
    rows = re.findall(r"^\s*(\d+)\s+decode ", table, re.M)
    assert len(rows) == 40 and all(int(r) >= 63 for r in rows)
    assert "135 healthy steps folded (time median 370 us, max 675 us)" in table
    # Every root cause with steps shows some of them.
    for cause in ("split-kv-off", "split-kv-starved", "slow-path"):
        assert re.search(rf"^\s*\d+ .*{cause}", table, re.M), cause


def test_kernel_phase_is_its_launches_phase(demo) -> None:  # type: ignore[no-untyped-def]
    """The kernel table said `unknown` for PrefillWithKVCacheKernel while a finding called its launches decode."""
    rows = {k["kernel"]: k for k in document_of(demo)["kernels"]}
    pre = rows["PrefillWithKVCacheKernel"]
    assert (pre["phase"], pre["name_phase"]) == ("decode", "unknown")
    assert pre["phase_evidence"].startswith("from its 195 launches in steps")  # 65 more ran outside steps (warm-up)
    assert rows["PersistentVariableLengthMergeStatesKernel"]["phase"] == "decode"


def test_kernel_phase_mixed_when_launches_differ() -> None:
    """The collected serving loop runs the FA2 kernel for prefill and decode steps alike. Judged by the sidecar's
    truth (each step's injected event), not by the launches' own phases: the kernel ran in decode steps, the
    prefill-only steps and the chunked-prefill (mixed) steps, so its table row says mixed."""
    loop = REPO / "examples" / "loop"
    _, (a,) = analyze([loop / "loop_fa2_torch.pt.trace.json.gz"], meta=[loop / "loop_fa2_torch.sidecar.json.gz"],
                      cache=False)
    with gzip.open(loop / "loop_fa2_torch.sidecar.json.gz") as fh:
        event = {s["key"]: (s["truth"] or {}).get("event") for s in json.load(fh)["steps"]}
    phase_of = {None: "decode", "host-sleep": "decode", "host-cpu": "decode", "long-join": "decode",
                "prefill": "prefill", "chunked-prefill": "mixed"}
    ran_in: dict[str, set[str]] = {}
    for s in a.steps:
        for x in s.launches:
            ran_in.setdefault(x.attention.kernel, set()).add(phase_of[event[a.schedule.batches[s.index].step_key]])
    assert ran_in == {"BatchPrefillWithPagedKVCacheKernel": {"decode", "prefill", "mixed"}}
    rows = {k["kernel"]: k for k in document_of(a)["kernels"]}
    assert rows["BatchPrefillWithPagedKVCacheKernel"]["phase"] == "mixed"


def test_gpu_idle_share_agrees_with_its_sentence() -> None:
    """The small trace read 'GPU idle 26% … (0% of the time from first to last step)'."""
    out = _cli("analyze", str(SHARED / "h200" / "flashinfer_decode_small.pt.trace.json.gz"))
    m = re.search(r"gpu-idle-gaps\s+\S+ \S+ (\d+)% GPU idle between steps (\d+)% of the time", out)
    assert m and m.group(1) == m.group(2) != "0", out


def test_width_from_columns_and_option_and_no_trailing_spaces() -> None:
    narrow = _cli("analyze", str(DEMO), columns=80)
    wide = _cli("analyze", str(DEMO), "--width", "160", columns=80)
    assert max(len(line) for line in narrow.splitlines()) <= 80
    assert 120 < max(len(line) for line in wide.splitlines()) <= 160
    for out in (narrow, wide):
        assert not [line for line in out.splitlines() if line != line.rstrip()]


def test_pipe_width_without_columns() -> None:
    """Piped with no $COLUMNS: 120 columns (was a fixed 200 with trailing spaces)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["PYTHONPATH"] = str(REPO)
    out = subprocess.run([sys.executable, "-m", "traceinsight", "analyze", str(DEMO)], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert max(len(line) for line in out.splitlines()) <= 120
    assert not [line for line in out.splitlines() if line != line.rstrip()]


def test_readme_sample_is_the_real_output() -> None:
    assert current() == f"<!-- analyze-sample -->\n```\n{sample()}```\n<!-- /analyze-sample -->", (
        "README's sample differs from the real output: run `python tests/readme_sample.py`")


def test_diff_says_when_the_workloads_differ_and_matches_steps_by_name(tmp_path: Path) -> None:
    import json as _json

    from traceinsight.report.diff import diff_docs

    small = SHARED / "h200" / "flashinfer_decode_small.pt.trace.json.gz"
    _, (a,) = analyze([small], cache=False)
    _, (b,) = analyze([SHARED / "h200" / "flashinfer_decode.sqlite"], cache=False)
    other = diff_docs(document_of(a), document_of(b))
    assert other["matched_steps"]["workloads_differ"] and other["matched_steps"]["matched"] == 0
    assert other["summary"][0].startswith("the workloads differ: only 0 of before's 18 steps")
    same = diff_docs(document_of(a), document_of(a))
    assert same["matched_steps"]["matched"] == 18 and not same["matched_steps"]["workloads_differ"]
    assert same["matched_steps"]["median_ratio"] == 1.0
    # A finding whose steps moved, with the same severity and as many steps, was 'same': now 'changed'.
    before = document_of(a)
    after = _json.loads(_json.dumps(before))
    f = next(f for f in after["findings"] if f["id"] == "slow-path")
    f["steps"] = [i - 9 for i in f["steps"]]  # the same number of steps, other steps
    row = next(r for r in diff_docs(before, after)["findings"] if r["id"] == "slow-path")
    assert row["status"] == "changed" and "steps" in row["changed"]


def test_codesign_checks_kv_memory_against_the_gpu() -> None:
    import json as _json

    r = CliRunner().invoke(main, ["codesign", "--qo-heads", "32", "--kv-heads", "4", "--head-dim", "128", "--gpu",
                                  "h200", "--kv-len", "131072", "--batch", "256", "--layers", "48", "--format",
                                  "json"])
    assert r.exit_code == 0, r.output
    doc = _json.loads(r.stdout)
    mem = doc["memory"]
    # 2 (K,V) x 4 heads x 128 x 2 bytes = 2048 B per token per layer; x 48 layers x 256 x 131072 tokens.
    assert mem["kv_cache_bytes"] == 2048 * 48 * 256 * 131072 and mem["fits"] is False
    check = next(c for c in doc["checks"] if c["name"] == "kv-fits-memory")
    assert not check["ok"] and "does not fit" in check["message"]
    assert "traceinsight: warning: KV cache of 256 x 131,072 tokens" in r.stderr
    r = CliRunner().invoke(main, ["codesign", "--qo-heads", "32", "--kv-heads", "4", "--head-dim", "128", "--gpu",
                                  "h200", "--kv-len", "4096", "--batch", "64", "--layers", "48"])
    assert r.exit_code == 0 and "warning" not in r.stderr and "ok   KV cache of 64 x 4,096 tokens" in r.stdout


def test_per_kernel_spread_like_nsys_stats() -> None:
    """median/p90/p99/min/max/stddev per kernel, checked against the export's own kernel table read with sqlite3."""
    import sqlite3
    import statistics

    path = SHARED / "h200" / "flashinfer_decode.sqlite"
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    durs: dict[str, list[int]] = {}
    for name, d in con.execute("SELECT s.value, k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                               "JOIN StringIds s ON s.id = k.demangledName"):
        durs.setdefault(name, []).append(d)
    con.close()
    _, (a,) = analyze([path], cache=False)
    rows = {k["name"]: k for k in document_of(a)["kernels"]}
    assert len(rows) == len(durs)
    for name, ds in durs.items():
        k = rows[name]
        assert (k["min_ns"], k["max_ns"], k["count"]) == (min(ds), max(ds), len(ds))
        assert abs(k["median_ns"] - statistics.median(ds)) <= 0.5  # rounded to whole ns
        assert abs(k["stddev_ns"] - (statistics.stdev(ds) if len(ds) > 1 else 0)) <= 0.5
        # p90 / p99 interpolated between order statistics (R's type 7, statistics' 'inclusive')
        p90 = statistics.quantiles(ds, n=10, method="inclusive")[8] if len(ds) > 1 else ds[0]
        p99 = statistics.quantiles(ds, n=100, method="inclusive")[98] if len(ds) > 1 else ds[0]
        assert abs(k["p90_ns"] - p90) <= 0.5 and abs(k["p99_ns"] - p99) <= 0.5
        assert k["min_ns"] <= k["median_ns"] <= k["p90_ns"] <= k["p99_ns"] <= k["max_ns"]
    out = _cli("analyze", str(path), columns=250)
    assert re.search(r"median\s+p90\s+p99\s+min\s+max\s+stddev", out)


def test_an_ncu_csv_alone_says_what_to_do() -> None:
    r = CliRunner().invoke(main, ["analyze", str(SHARED / "h200" / "flashinfer_decode.ncu.csv"), "--format", "json"])
    assert r.exit_code == 0
    assert ("an Nsight Compute CSV (11 profiled kernels) holds per-kernel metrics, not a timeline: give it with "
            "--ncu beside a trace") in r.stderr


def test_floors_take_the_remedy_that_saves_a_step_the_most() -> None:
    """A step's floor is its time under the remedy that saves it the most; remedies are not stacked, and a claim
    the rule could not place is spread by wall time, never past a step's wall."""
    walls = {0: 1000, 1: 1000, 2: 500}
    got = floors(walls, [(900, [0, 1], {0: 800, 1: 100}), (600, [1, 2], {1: 300, 2: 300}), (10_000, [2], {})])
    assert got == {0: 200, 1: 700, 2: 0}
    # The same claims attributed against wall - floor: the step-by-step claims take what is left, in order.
    budget = {s: walls[s] - got[s] for s in walls}
    assert attribute([(900, [0, 1], {0: 800, 1: 100}), (600, [1, 2], {1: 300, 2: 300})], budget) == [900, 500]


def test_step_budget_is_the_dict_it_replaces() -> None:
    """Budgets over every step are arrays (2.3M steps at 10M kernels): each step index once, where it first
    comes, with its last value, as `dict(zip(...))` keeps them; the bounds come out as they do from the dict."""
    keys, values = np.array([3, 1, 3, 2, 1]), np.array([10, 20, 30, 40, 50])
    got = StepBudget.last_of(keys, values)
    assert got == dict(zip(keys.tolist(), values.tolist(), strict=True)) == {3: 30, 1: 50, 2: 40}
    assert list(got) == [3, 1, 2] and got[1] == 50 and 7 not in got
    with pytest.raises(KeyError):
        got[7]
    assert StepBudget.last_of(np.array([0, 1, 2]), np.array([5, 6, 7])) == {0: 5, 1: 6, 2: 7}
    walls = {2: 500, 0: 1000, 1: 1000}
    claims = [(900, [0, 1], {0: 800, 1: 100}), (600, [1, 2], {1: 300, 2: 300}), (10_000, [2], {})]
    assert floors(StepBudget.of(walls), claims) == floors(walls, claims) == {0: 200, 1: 700, 2: 0}
    spread = [(150, [0, 1]), (200, [1, 2]), (5, [])]
    assert attribute(spread, StepBudget.of(walls)) == attribute(spread, walls) == [150, 200, 5]


def test_incidents_of_one_cause_are_one_root_cause() -> None:
    """The FA2 sweep's nine host-stall spikes of 0.15-0.3 ms were nine root causes in the JSON; now one, with the
    nine incidents as its evidence, and its savings bounded by the steps' floor (was 214 ms of 214 ms)."""
    trace, meta = SHARED_TRACES[2]
    _, (a,) = analyze([SHARED / trace], meta=[SHARED / meta], cache=False)
    stalls = [f for f in a.findings if f.id == "latency-spike" and f.evidence["cause"] == "host-stall"]
    (root,) = [f for f in stalls if f.supports is None]
    assert root.evidence["group"] and root.evidence["incidents"] == len(stalls) - 1 == 9
    assert {f.supports for f in stalls if f is not root} == {root.ref}
    assert {f.ref for f in stalls if f is not root} <= set(root.related)
    # the slow steps (1.3-2x) of the same cause are its evidence too: one root cause for host-stall in all
    slow = [f for f in a.findings if f.id == "slow-steps" and f.evidence["cause"] == "host-stall"]
    assert slow and all(f.supports == root.ref for f in slow)
    assert len([f for f in a.findings if f.supports is None and f.evidence.get("cause") == "host-stall"]) == 1
    t = document_of(a)["savings"]
    assert t["listed_steps_ns"] <= t["steps_wall_ns"] - t["steps_floor_ns"] < t["steps_wall_ns"]
    assert t["steps_floor_ns"] > 20_000_000  # at least the balanced split-on launches and the rest of each step


def _spread_in_python_ints(have: list[int], got: int) -> list[int]:
    """What is left of each step after `got` is spread over it in proportion to what it has, the first steps
    giving the rounding's rest: `attribute`'s spread, in Python ints (exact at any size)."""
    avail = sum(have)
    shares = [h * got // avail for h in have]
    left = [h - x for h, x in zip(have, shares, strict=True)]
    taken = sum(shares)
    for k, h in enumerate(left):
        extra = min(h, got - taken)
        left[k], taken = h - extra, taken + extra
    return left


@pytest.mark.parametrize("chunk", [2, 1 << 16])
def test_a_spread_whose_products_overflow_int64_is_exact(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim spread over steps whose budget times the claim passes int64 (gpu-idle-gaps' 10^13 ns over 10^5
    steps of up to 10^7 ns): each step's share exact, in Python ints a chunk at a time."""
    monkeypatch.setattr(rootcause, "_EXACT_CHUNK", chunk)
    budget = {s: (s * 7_919_993 + 10**6) % (4 * 10**12) + 2**40 for s in range(9)}
    got = sum(budget.values()) - 12_345
    assert max(budget.values()) * got > 2**63  # the products overflow int64
    (taken, rest) = attribute([(got, list(budget)), (2**62, [3, 4])], budget)
    want = _spread_in_python_ints(list(budget.values()), got)
    assert taken == got and rest == want[3] + want[4]
