"""Every named query of traceinsight/queries, run on small inline tables against the rows it must return (as
Perfetto's SQL stdlib tests do): a few kernels, launches and ranges written out here, so each test reads as the
case it holds."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from traceinsight.ingest.store import TraceDB
from traceinsight.model.kernel_table import ensure_labels
from traceinsight.model.steps import FA3_CAP_PER_PREPARE_CTA, attention_split_params
from traceinsight.queries import names, sql

T = 3  # a trace id other than 0, so a query that forgets its $trace filter shows


class Inline:
    """A database of inline rows: kernels (with their labels), launch calls, ranges, memory operations."""

    def __init__(self) -> None:
        self.db = TraceDB()
        ensure_labels(self.db)  # creates kernel_labels; the rows below label the kernels themselves
        self.db.sql("INSERT INTO traces (trace_id, path, format) VALUES ($t, 'inline', 'kineto')", {"t": T})
        self.labels: set[str] = set()
        self.next_range = 0

    def kernel(self, kid: int, name: str, family: str, start: int, end: int, *, backend: str | None = None,
               stream: int | None = 7, device: int | None = 0, corr: int | None = None, grid_x: int = 1,
               grid_y: int = 1, grid_z: int = 1, trace: int = T) -> None:
        if name not in self.labels:
            self.labels.add(name)
            self.db.sql("INSERT INTO kernel_labels VALUES ($n, $f, $b, $n, 'unknown', '', 'inline', '{}')",
                        {"n": name, "f": family, "b": backend})
        self.db.sql("INSERT INTO kernel_rows (trace_id, kernel_id, name_id, device_id, stream_id, start_ns, end_ns, "
                    "dur_ns, grid_x, grid_y, grid_z, correlation_id, process_id) "
                    "VALUES ($t, $k, $n, $d, $s, $a, $e, $e - $a, $g, $gy, $gz, $c, 1)",
                    {"t": trace, "k": kid, "n": self.db.name_id(trace, name), "d": device, "s": stream, "a": start,
                     "e": end, "g": grid_x, "gy": grid_y, "gz": grid_z, "c": corr})

    def launch(self, corr: int, start: int, thread: int = 11, trace: int = T) -> None:
        self.db.sql("INSERT INTO launches VALUES ($t, $c, 'cudaLaunchKernel', $a, $a + 5, 1, $h)",
                    {"t": trace, "c": corr, "a": start, "h": thread})

    def range(self, name: str, start: int, end: int, *, side: str = "cpu", kind: str = "annotation",
              thread: int | None = 11, device: int | None = None, trace: int = T) -> int:
        rid = self.next_range
        self.next_range += 1
        self.db.sql("INSERT INTO ranges (trace_id, range_id, name, kind, side, start_ns, end_ns, dur_ns, process_id, "
                    "thread_id, device_id) VALUES ($t, $r, $n, $k, $s, $a, $e, $e - $a, 1, $h, $d)",
                    {"t": trace, "r": rid, "n": name, "k": kind, "s": side, "a": start, "e": end, "h": thread,
                     "d": device})
        return rid

    def memop(self, start: int, end: int, corr: int | None = None, device: int = 0) -> None:
        self.db.sql("INSERT INTO memops VALUES ($t, 'memcpy', 'Memcpy HtoD', $d, 7, $a, $e, $e - $a, 64, $c)",
                    {"t": T, "d": device, "a": start, "e": end, "c": corr})

    def rows(self, query: str, **params: Any) -> list[tuple[Any, ...]]:
        return [tuple(r.values()) for r in self.db.rows(sql(query), params)]

    def run(self, query: str, **params: Any) -> None:
        self.db.script(sql(query), params)


def _group(x: Inline, limit: int = 1, names: list[str] | None = None) -> None:
    """The grouping queries up to _step_members, as group_steps runs them."""
    x.run("step_kernel_launch", trace=T)
    x.run("step_ranges", trace=T)
    x.run("step_range_choice", limit=limit, names=names)
    x.run("step_members", trace=T)


def _chosen(x: Inline) -> list[tuple[Any, ...]]:
    return [(r["range_id"], r["name"]) for r in x.db.rows("SELECT range_id, name FROM _step_chosen ORDER BY range_id")]


def _two_steps() -> Inline:
    """Two profiler steps of a decode loop on one thread, each: a GEMM, an attention launch and its merge; a run
    range around both; inside step 0 an 'attn' range around its attention launch and a GPU-side annotation."""
    x = Inline()
    for i, base in enumerate((1000, 2000)):
        c = 10 * i
        x.launch(c + 1, base + 10)
        x.launch(c + 2, base + 20)
        x.launch(c + 3, base + 30)
        x.kernel(3 * i, "gemm", "gemm", base + 100, base + 200, corr=c + 1)
        x.kernel(3 * i + 1, "attn", "attention", base + 200, base + 400, backend="flashinfer-fa2", corr=c + 2)
        x.kernel(3 * i + 2, "merge_states", "merge", base + 400, base + 450, corr=c + 3)
    x.range("run", 0, 5000)  # range 0: wraps both steps
    x.range("ProfilerStep#0", 1000, 1900, kind="profiler_step")  # 1
    x.range("ProfilerStep#1", 2000, 2900, kind="profiler_step")  # 2
    x.range("attn", 1015, 1025)  # 3: inside step 0, around its attention launch call only
    x.range("attn_gpu", 1150, 1500, side="gpu", kind="gpu_annotation", thread=None, device=0)  # 4
    return x


def test_every_named_query_has_an_inline_test() -> None:
    # This file and its siblings (test_queries_rules.py: the rules' selections over the launch relation).
    text = "".join(p.read_text() for p in Path(__file__).parent.glob("test_queries*.py"))
    tested = set(re.findall(r'"([a-z_0-9]+)"', text))
    assert set(names()) <= tested, sorted(set(names()) - tested)


def test_step_kernel_launch_joins_each_kernel_to_its_launch_call() -> None:
    x = _two_steps()
    x.kernel(6, "loose", "elementwise", 3000, 3100, corr=None)
    x.run("step_kernel_launch", trace=T)
    got = x.db.rows("SELECT kernel_id, family, launch_ns, thread_id FROM _step_kernel_launch ORDER BY kernel_id")
    assert [(r["kernel_id"], r["launch_ns"]) for r in got] == [(0, 1010), (1, 1020), (2, 1030), (3, 2010),
                                                               (4, 2020), (5, 2030), (6, None)]
    assert {r["thread_id"] for r in got[:6]} == {11}


def test_step_ranges_keeps_one_trace() -> None:
    x = _two_steps()
    x.range("other trace", 0, 10, trace=T + 1)
    x.run("step_ranges", trace=T)
    assert x.db.rows("SELECT count(*) AS n FROM _step_ranges")[0]["n"] == 5


def test_step_range_choice_takes_the_outermost_cpu_range_that_is_not_a_wrapper() -> None:
    x = _two_steps()
    _group(x, limit=1)  # 2 attention kernels: a range around more than 1 of them wraps the run
    assert _chosen(x) == [(1, "ProfilerStep#0"), (2, "ProfilerStep#1")]


def test_step_range_choice_by_name_picks_only_named_ranges() -> None:
    x = _two_steps()
    _group(x, limit=1, names=["attn", "attn_gpu"])
    # 'attn' encloses step 0's launch call; the GPU-side annotation is second choice (CPU ranges first).
    assert _chosen(x) == [(3, "attn")]
    _group(x, limit=1, names=["attn_gpu"])
    assert _chosen(x) == [(4, "attn_gpu")]
    _group(x, limit=1, names=["run"])  # a pattern may pick a range that encloses everything
    assert _chosen(x) == [(0, "run")]


def test_step_members_holds_every_kernel_launched_in_a_step_range() -> None:
    x = _two_steps()
    _group(x)
    got = x.db.rows("SELECT step_key, kernel_id, ranged FROM _step_members ORDER BY step_key, kernel_id")
    assert [(r["step_key"], r["kernel_id"], r["ranged"]) for r in got] == [
        (1, 0, True), (1, 1, True), (1, 2, True), (2, 3, True), (2, 4, True), (2, 5, True)]


def test_step_members_groups_launches_outside_every_range() -> None:
    x = Inline()  # no ranges: each attention kernel with its merges, and the prepare kernels before it
    x.kernel(0, "merge_states", "merge", 0, 10)  # before any attention kernel: no launch
    x.kernel(1, "prepare", "prepare", 20, 30)
    x.kernel(2, "attn", "attention", 40, 90, backend="fa3")
    x.kernel(3, "gemm", "gemm", 90, 95)  # not attention work: in no launch step
    x.kernel(4, "merge_states", "merge", 100, 110)
    x.kernel(5, "attn", "attention", 120, 150, backend="fa3")
    x.kernel(6, "prepare", "prepare", 160, 170)  # no attention kernel after it: no launch
    _group(x)
    got = x.db.rows("SELECT step_key, kernel_id, ranged FROM _step_members ORDER BY kernel_id")
    assert [(r["step_key"], r["kernel_id"], r["ranged"]) for r in got] == [
        (-1, 1, False), (-1, 2, False), (-1, 4, False), (-2, 5, False)]


def test_step_members_replaces_only_its_own_trace() -> None:
    x = _two_steps()
    _group(x)
    x.db.sql("INSERT INTO _step_members (trace_id, step_key, kernel_id, ranged) VALUES ($t, 9, 99, TRUE)",
             {"t": T + 1})
    _group(x)
    got = x.db.rows("SELECT trace_id, count(*) AS n FROM _step_members GROUP BY ALL ORDER BY trace_id")
    assert [(r["trace_id"], r["n"]) for r in got] == [(T, 6), (T + 1, 1)]


def _launches(x: Inline) -> list[tuple[Any, ...]]:
    rows = x.db.rows(sql("step_launches"), {
        "trace": T, "fa3_cap": FA3_CAP_PER_PREPARE_CTA, **attention_split_params(x.db)})
    return [(r["step_key"], r["kernel_id"], r["role"], r["launch_id"], r["split_kv"], r["split_evidence"])
            for r in rows]


def test_step_launches_attaches_merges_per_stream_and_reads_split_state() -> None:
    x = Inline()
    x.launch(1, 10)
    x.range("step", 0, 100)
    # Stream 7: a split FA2 launch (its merge follows); stream 8: an FA2 launch with no merge after it.
    x.kernel(0, "attn", "attention", 200, 300, backend="flashinfer-fa2", stream=7, corr=1)
    x.kernel(1, "attn", "attention", 210, 320, backend="flashinfer-fa2", stream=8, corr=1)
    x.kernel(2, "merge_states", "merge", 330, 340, stream=7, corr=1)
    _group(x, limit=2)
    assert _launches(x) == [  # each launch's rows together: its attention row first
        (0, 0, "attention", 0, True, "merge_states follows the launch on stream 7"),
        (0, 2, "merge", 0, None, None),
        (0, 1, "attention", 1, False, "no merge/combine kernel follows the launch on stream 8"),
    ]


def test_step_launches_names_each_kernels_label_by_its_kernel_label_rows_id() -> None:
    """step_launches gives a kernel's label as a row id of kernel_labels; kernel_label_rows reads each id's label
    once: the merge kernel's id leads to its own name and family, not the attention kernel's."""
    x = Inline()
    x.kernel(0, "attn", "attention", 0, 90, backend="flashinfer-fa2")
    x.kernel(1, "merge_states", "merge", 90, 95)
    x.kernel(2, "attn", "attention", 100, 190, backend="flashinfer-fa2")
    _group(x)
    labels = {r[0]: r[1:] for r in x.rows("kernel_label_rows")}
    rows = x.db.rows(sql("step_launches"), {"trace": T, "fa3_cap": FA3_CAP_PER_PREPARE_CTA,
                                            **attention_split_params(x.db)})
    got = [(r["kernel_id"], *labels[r["label_id"]][:4]) for r in rows]
    assert sorted(got) == [(0, "attn", "attn", "attention", "flashinfer-fa2"),
                           (1, "merge_states", "merge_states", "merge", None),
                           (2, "attn", "attn", "attention", "flashinfer-fa2")]
    assert len(labels) == 2 and not {"name", "kernel", "family", "params_json"} & set(rows[0])


def test_step_launches_reads_fa3s_cap_from_its_prepare_grid() -> None:
    x = Inline()
    # FA3 above its dynamic-split cap: the prepare kernel runs 2 CTAs, the combine still runs: no request split.
    x.kernel(0, "prepare_varlen", "prepare", 0, 10, backend="fa3", grid_x=2)
    x.kernel(1, "fa3_fwd", "attention", 20, 90, backend="fa3")
    x.kernel(2, "fa3_combine", "merge", 90, 95, backend="fa3")
    # The same below the cap (1 CTA): split. Then an sm90 launch (never splits) and one of an unknown backend.
    x.kernel(3, "prepare_varlen", "prepare", 100, 110, backend="fa3", grid_x=1)
    x.kernel(4, "fa3_fwd", "attention", 120, 190, backend="fa3")
    x.kernel(5, "fa3_combine", "merge", 190, 195, backend="fa3")
    x.kernel(6, "sm90_attn", "attention", 200, 290, backend="flashinfer-sm90", stream=None)
    x.kernel(7, "other_attn", "attention", 300, 390, backend=None)
    _group(x)
    cap = FA3_CAP_PER_PREPARE_CTA
    assert _launches(x) == [
        (-4, 7, "attention", 7, None, "split-KV of backend unknown is not visible in a trace"),
        (-3, 6, "attention", 6, False, "the flashinfer-sm90 backend never splits along KV"),
        (-2, 4, "attention", 4, True, "fa3_combine follows the launch on stream 7"),
        (-2, 5, "merge", 4, None, None),
        (-2, 3, "prepare", 4, None, None),  # a launch's rows: attention, merges, prepares
        (-1, 1, "attention", 1, False, f"fa3_combine follows, but the prepare kernel ran 2 CTAs: B > {cap} "
                                       "requests, above FA3's dynamic-split cap no request is cut"),
        (-1, 2, "merge", 1, None, None),
        (-1, 0, "prepare", 1, None, None),
    ]


def test_step_launches_reads_partitions_from_the_grid_axis_a_rule_names() -> None:
    """vLLM v2 (model/split_signal.toml: partitions on grid.z, its reduce kernel always runs), v1 (never splits),
    ll4mi with no grid in the trace (the reduce kernel decides), FlashMLA (its combine runs after every launch)."""
    x = Inline()
    x.kernel(0, "paged_attention_v2_kernel", "attention", 0, 90, backend="vllm", grid_x=32, grid_y=8, grid_z=16)
    x.kernel(1, "paged_attention_v2_reduce_kernel", "merge", 90, 95, backend="vllm")
    x.kernel(2, "paged_attention_v2_kernel", "attention", 100, 190, backend="vllm", grid_x=32, grid_y=8)
    x.kernel(3, "paged_attention_v2_reduce_kernel", "merge", 190, 195, backend="vllm")
    x.kernel(4, "paged_attention_v1_kernel", "attention", 200, 290, backend="vllm")
    x.kernel(5, "paged_attention_ll4mi_QKV_mfma16_kernel", "attention", 300, 390, backend="vllm-rocm",
             grid_x=0, grid_y=0, grid_z=0)
    x.kernel(6, "paged_attention_ll4mi_reduce_kernel", "merge", 390, 395, backend="vllm-rocm")
    x.kernel(7, "flash_fwd_splitkv_mla_kernel", "attention", 400, 490, backend="flashmla")
    x.kernel(8, "flash_fwd_splitkv_mla_combine_kernel", "merge", 490, 495, backend="flashmla")
    _group(x)
    got = [r for r in _launches(x) if r[2] == "attention"]
    assert got == [
        (-5, 7, "attention", 7, None, "flash_fwd_splitkv_mla_combine_kernel runs after every launch of the flashmla "
                                      "backend, split or not; which requests were cut is device data"),
        (-4, 5, "attention", 5, True, "paged_attention_ll4mi_reduce_kernel follows the launch on stream 7"),
        (-3, 4, "attention", 4, False, "paged_attention_v1_kernel (vllm) never splits along KV"),
        (-2, 2, "attention", 2, False, "paged_attention_v2_reduce_kernel follows the launch on stream 7, but grid.z = 1"
                                       " partitions of 512 tokens (vLLM PARTITION_SIZE; ceil(max_seq_len / 512)): no "
                                       "request is cut, the merge kernel only copies"),
        (-1, 0, "attention", 0, True, "paged_attention_v2_reduce_kernel follows the launch on stream 7; grid.z = 16 "
                                      "partitions of 512 tokens (vLLM PARTITION_SIZE; ceil(max_seq_len / 512))"),
    ]


def test_step_rows_gives_each_steps_span_count_and_range() -> None:
    x = _two_steps()
    _group(x)
    got = x.db.rows(sql("step_rows"), {"trace": T})  # in step_key order
    assert [(r["step_key"], r["kernel_count"], r["start_ns"], r["end_ns"], r["name"], r["side"],
             r["range_start_ns"]) for r in got] == [
        (1, 3, 1100, 1450, "ProfilerStep#0", "cpu", 1000), (2, 3, 2100, 2450, "ProfilerStep#1", "cpu", 2000)]


def test_step_scratch_drop_keeps_only_what_step_rows_and_step_kernels_read() -> None:
    x = _two_steps()
    _group(x)
    x.run("step_scratch_drop")
    temp = {r["table_name"] for r in x.db.rows("SELECT table_name FROM duckdb_tables() WHERE temporary")}
    assert temp == {"_step_chosen", "_step_members"}
    assert len(x.db.rows(sql("step_rows"), {"trace": T})) == 2
    x.run("step_scratch_drop")  # nothing left to drop: no error


def test_step_kernels_lists_one_steps_kernels_in_start_order() -> None:
    x = _two_steps()
    _group(x)
    assert [r[0] for r in x.rows("step_kernels", trace=T, step_key=2)] == [3, 4, 5]


def test_step_kernels_names_each_label_by_its_id_as_step_launches_does() -> None:
    x = _two_steps()
    _group(x)
    labels = {r[0]: r[1] for r in x.rows("kernel_label_rows")}
    got = x.db.rows(sql("step_kernels"), {"trace": T, "step_key": 1})
    assert [(r["kernel_id"], labels[r["label_id"]]) for r in got] == [(0, "gemm"), (1, "attn"), (2, "merge_states")]
    assert "name" not in got[0]


def test_step_launches_counts_each_launchs_merges_and_prepares_on_its_attention_row() -> None:
    x = Inline()
    x.kernel(0, "prepare_varlen", "prepare", 0, 10, backend="fa3")
    x.kernel(1, "fa3_fwd", "attention", 20, 90, backend="fa3")
    x.kernel(2, "fa3_combine", "merge", 90, 95, backend="fa3")
    x.kernel(3, "fa3_combine", "merge", 95, 99, backend="fa3", stream=8)  # another stream: no launch of its own
    x.kernel(4, "fa3_fwd", "attention", 120, 190, backend="fa3")
    _group(x)
    rows = x.db.rows(sql("step_launches"), {"trace": T, "fa3_cap": FA3_CAP_PER_PREPARE_CTA,
                                            **attention_split_params(x.db)})
    assert [(r["kernel_id"], r["role"], r["merges"], r["prepares"]) for r in rows] == [
        (4, "attention", 0, 0), (1, "attention", 1, 1), (2, "merge", None, None), (0, "prepare", None, None)]


def test_kernel_and_family_summaries_total_by_name_and_family() -> None:
    x = _two_steps()
    got = x.db.rows(sql("kernel_summary"), {"trace": T})
    assert [(r["name"], r["count"], r["total_ns"], r["min_ns"], r["max_ns"]) for r in got] == [
        ("attn", 2, 400, 200, 200), ("gemm", 2, 200, 100, 100), ("merge_states", 2, 100, 50, 50)]
    assert sum(r["share"] for r in got) == pytest.approx(1.0)
    fam = x.db.rows(sql("family_summary"), {"trace": T})
    assert [(r["family"], r["total_ns"]) for r in fam] == [("attention", 400), ("gemm", 200), ("merge", 100)]


def test_kernel_summary_lists_grids_by_launches_then_value_at_most_eight() -> None:
    """The grids of a kernel come most launched first, ties by x, y, z; past 8 distinct grids the least launched
    are left out, whatever order the rows were stored (or DuckDB's threads read them) in."""
    x = Inline()
    # Stored least launched first: (9,1,1) once; (8,1,1) .. (1,1,1) twice; (2,1,2) three times; (5,1,1) once more,
    # three times in all: a tie with (2,1,2), broken by x.
    launches = [(9, 1, 1)] + [(g, 1, 1) for g in range(8, 0, -1)] * 2 + [(2, 1, 2)] * 3 + [(5, 1, 1)]
    for i, (gx, gy, gz) in enumerate(launches):
        x.kernel(i, "k", "gemm", 100 * i, 100 * i + 10, grid_x=gx, grid_y=gy, grid_z=gz)
    (row,) = x.db.rows(sql("kernel_summary"), {"trace": T})
    assert row["count"] == len(launches)
    assert row["grids"] == [[2, 1, 2], [5, 1, 1], [1, 1, 1], [2, 1, 1], [3, 1, 1], [4, 1, 1], [6, 1, 1], [7, 1, 1]]


def test_kernel_durations_lists_each_kernels_times_in_start_order_for_the_families_asked() -> None:
    x = _two_steps()
    x.kernel(9, "gemm", "gemm", 500, 530, trace=T)  # an earlier, shorter GEMM: first in the list
    x.kernel(10, "gemm", "gemm", 500, 900, trace=T + 1)  # another trace: not counted
    got = x.rows("kernel_durations", trace=T, families=["gemm", "merge"])
    assert got == [("gemm", "gemm", None, [30, 100, 100]), ("merge_states", "merge", None, [50, 50])]
    assert x.rows("kernel_durations", trace=T, families=["communication"]) == []


def test_gpu_busy_lists_kernels_and_memory_operations_of_the_device_in_time_order() -> None:
    x = _two_steps()
    x.memop(1500, 1900)
    x.memop(1400, 1420)  # starts with the merge kernel and ends before it: after it in the order (start, end)
    x.memop(1950, 2050, device=1)  # another GPU
    step0 = [(1100, 1200), (1200, 1400), (1400, 1420), (1400, 1450), (1500, 1900)]
    step1 = [(2100, 2200), (2200, 2400), (2400, 2450)]
    assert x.rows("gpu_busy", t=T, d=0) == step0 + step1
    assert x.rows("gpu_busy", t=T, d=None) == [*step0, (1950, 2050), *step1]


def test_host_ops_returns_cpu_ranges_then_host_ops_overlapping_any_window() -> None:
    x = _two_steps()
    ops = [("aten::mm", "cpu_op", 1012, 1014, 11), ("aten::empty", "cpu_op", 1005, 1011, 11),  # file order kept
           ("py_sleep", "python_function", 1100, 3000, 12), ("after", "cpu_op", 1020, 1030, 11),  # ends past 1020
           ("other_trace", "cpu_op", 1010, 1020, 11)]
    for i, (name, cat, a, e, thread) in enumerate(ops):
        x.db.sql("INSERT INTO host_ops VALUES ($t, $i, $n, $c, $a, $e, $e - $a, 1, $h)",
                 {"t": T + 1 if name == "other_trace" else T, "i": i, "n": name, "c": cat, "a": a, "e": e, "h": thread})
    got = x.rows("host_ops", trace=T, lo=[1010, 4000], hi=[1020, 4100])
    assert [(r[0], r[1]) for r in got] == [
        ("run", "annotation"), ("ProfilerStep#0", "profiler_step"), ("attn", "annotation"),
        ("aten::mm", "cpu_op"), ("aten::empty", "cpu_op")]
    assert got[3] == ("aten::mm", "cpu_op", 1012, 1014, 1, 11)
    # The second window reaches the Python function and the range around both steps only.
    got = x.rows("host_ops", trace=T, lo=[2950], hi=[2990])
    assert [r[0] for r in got] == ["run", "py_sleep"]


def test_kernel_graph_replay_gives_each_kernel_its_replay_by_correlation_and_process() -> None:
    x = Inline()
    x.launch(1, 900)
    x.kernel(0, "eager_attn", "attention", 1000, 1100, corr=1)
    for i, (a, b) in enumerate(((1200, 1300), (1300, 1350), (1400, 1500))):  # one replay of three kernels (corr 50)
        x.kernel(1 + i, f"graph_k{i}", "gemm", a, b, corr=50)
    x.kernel(4, "other_process", "gemm", 1600, 1700, corr=60)  # corr 60 of process 1; the replay's is process 2's
    x.db.sql("INSERT INTO graph_replays (trace_id, replay_id, correlation_id, name, process_id, gpu_start_ns, "
             "gpu_end_ns, kernel_count, hidden) VALUES ($t, 0, 50, 'cudaGraphLaunch', 1, 1200, 1500, 3, false), "
             "($t, 1, 60, 'cudaGraphLaunch', 2, 1600, 1700, 1, false), (0, 0, 1, 'cudaGraphLaunch', 1, 0, 1, 1, false)",
             {"t": T})
    got = x.rows("kernel_graph_replay", trace=T)
    assert got == [(0, None, None, None, None, None, None),
                   (1, 0, None, 0, 3, 1200, 1500), (2, 0, None, 1, 3, 1200, 1500), (3, 0, None, 2, 3, 1200, 1500),
                   (4, None, None, None, None, None, None)]


def test_trace_gpu_picks_the_device_with_most_kernel_time() -> None:
    x = _two_steps()
    x.kernel(6, "big", "gemm", 3000, 9000, device=1)
    x.db.sql("INSERT INTO devices (trace_id, device_id, name, num_sms) VALUES ($t, 1, 'NVIDIA H200', 132), "
             "($t, 0, 'NVIDIA H100', 132)", {"t": T})
    got = x.db.rows(sql("trace_gpu"), {"trace": T})
    assert (got[0]["device_id"], got[0]["name"], got[0]["kernel_ns"]) == (1, "NVIDIA H200", 6000)


class Fleet:
    """A fleet dataset's tables as inline rows, keyed by `trace` as the Parquet partitions are (docs/SCHEMA.md):
    one summary row per trace, its steps, its findings (supports NULL: a root cause)."""

    def __init__(self) -> None:
        import duckdb

        self.con = duckdb.connect()
        self.con.execute("CREATE TABLE summary (trace VARCHAR, gpu VARCHAR, steps BIGINT, step_p50_ns BIGINT, "
                         "step_p99_ns BIGINT, step_max_ns BIGINT, split_kv_off_share DOUBLE, critical BIGINT, "
                         "warning_findings BIGINT, infos BIGINT, steps_wall_ns BIGINT, between_steps_ns BIGINT)")
        self.con.execute("CREATE TABLE steps (trace VARCHAR, step INTEGER, name VARCHAR, dur_ns BIGINT, "
                         "wall_ns BIGINT, split_kv BOOLEAN)")
        self.con.execute("CREATE TABLE findings (trace VARCHAR, finding INTEGER, rule_id VARCHAR, severity VARCHAR, "
                         "steps INTEGER[], supports VARCHAR, attributed_saving_ns BIGINT, saving_basis VARCHAR)")
        self.n: dict[str, int] = {}

    def trace(self, key: str, durs: list[int], *, gpu: str = "H200", between: int = 0) -> None:
        """A trace whose steps 0.. took `durs` (GPU span; wall time 10 ns more); median: the nearest-rank p50."""
        s = sorted(durs)
        p50 = s[round(0.5 * (len(s) - 1))] if s else None
        self.con.execute("INSERT INTO summary VALUES (?, ?, ?, ?, ?, ?, 0.0, 0, 0, 0, ?, ?)",
                         [key, gpu, len(durs), p50, max(durs, default=None), max(durs, default=None),
                          sum(d + 10 for d in durs), between])
        for i, d in enumerate(durs):
            self.con.execute("INSERT INTO steps VALUES (?, ?, ?, ?, ?, NULL)", [key, i, f"step {i}", d, d + 10])

    def finding(self, key: str, rule: str, steps: list[int], lost: int | None, *, severity: str = "warning",
                supports: str | None = None, basis: str = "steps") -> None:
        n = self.n[key] = self.n.get(key, -1) + 1
        self.con.execute("INSERT INTO findings VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         [key, n, rule, severity, steps, supports, lost, basis])

    def rows(self, query: str, **params: Any) -> list[dict[str, Any]]:
        cur = self.con.execute(sql(query), params)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def _fleet() -> Fleet:
    f = Fleet()
    f.trace("a", [100, 100, 900, 100], between=50)
    f.trace("b", [200, 200, 200])
    f.trace("c", [])  # analyzed, no step
    f.finding("a", "split-kv-off", [2], 700, severity="critical")
    f.finding("a", "latency-spike", [2], None, supports="F1")  # evidence: costs nothing of its own
    f.finding("a", "gpu-idle-gaps", [1, 2, 3], 40, basis="span")
    f.finding("b", "split-kv-off", [0, 1], 30)
    f.finding("b", "split-kv-off", [1, 2], 20)  # a second root cause of the same rule in the same trace
    f.finding("b", "sm-idle", [0], None, supports="F1")
    return f


def test_fleet_traces_totals_each_traces_root_causes_largest_loss_first() -> None:
    got = {r["trace"]: r for r in _fleet().rows("fleet_traces")}
    assert list(got) == ["a", "b", "c"]  # by time lost: 740, 50, 0
    a, b, c = got["a"], got["b"], got["c"]
    assert (a["lost_ns"], a["lost_steps_ns"], a["lost_between_ns"]) == (740, 700, 40)
    assert a["root_causes"] == [{"rule_id": "split-kv-off", "lost_ns": 700},
                                {"rule_id": "gpu-idle-gaps", "lost_ns": 40}]
    assert (b["lost_ns"], b["root_causes"]) == (50, [{"rule_id": "split-kv-off", "lost_ns": 50}])
    assert (c["lost_ns"], c["root_causes"], c["step_p50_ns"]) == (0, [], None)
    assert (a["steps"], a["step_p50_ns"], a["steps_wall_ns"], a["between_steps_ns"]) == (4, 100, 1240, 50)


def test_fleet_root_causes_counts_traces_steps_and_loss_and_keeps_evidence_apart() -> None:
    got = {r["rule_id"]: r for r in _fleet().rows("fleet_root_causes")}
    assert list(got) == ["split-kv-off", "gpu-idle-gaps", "latency-spike", "sm-idle"]
    kv = got["split-kv-off"]
    assert (kv["severity"], kv["traces"], kv["findings"], kv["lost_ns"]) == ("critical", 2, 3, 750)
    assert kv["share_of_traces"] == 2 / 3  # of the three analyzed traces
    assert kv["steps"] == 4  # a:2, b:0,1,2 (step 1 named twice, counted once)
    assert (kv["worst_trace"], kv["worst_trace_lost_ns"]) == ("a", 700)
    idle = got["gpu-idle-gaps"]
    assert (idle["lost_ns"], idle["lost_steps_ns"], idle["lost_between_ns"]) == (40, 0, 40)
    spike = got["latency-spike"]  # only evidence: no trace, no loss, one trace as evidence
    assert (spike["traces"], spike["lost_ns"], spike["evidence_traces"], spike["worst_trace"]) == (0, 0, 1, None)
    assert got["sm-idle"]["evidence_traces"] == 1


def test_fleet_worst_steps_ranks_by_gpu_span_against_the_traces_median_with_the_findings_naming_them() -> None:
    got = _fleet().rows("fleet_worst_steps", top=3)
    assert [(r["trace"], r["step"], r["dur_ns"]) for r in got] == [("a", 2, 900), ("b", 0, 200), ("b", 1, 200)]
    first = got[0]
    assert (first["median_ns"], first["ratio"], first["wall_ns"]) == (100, 9.0, 910)
    assert first["findings"] == ["split-kv-off", "latency-spike", "gpu-idle-gaps"]  # report order
    assert got[1]["findings"] == ["split-kv-off", "sm-idle"] and got[2]["findings"] == ["split-kv-off"]
    every = {(r["trace"], r["step"]): r["findings"] for r in _fleet().rows("fleet_worst_steps", top=100)}
    assert len(every) == 7 and every[("a", 0)] == []  # a step no finding names


def test_step_recovered_choice_makes_gpu_windows_of_the_iterations() -> None:
    """Recovered iterations become GPU-side ranges on their device: each holds the kernels inside its window only."""
    x = _two_steps()
    x.run("step_kernel_launch", trace=T)
    x.run("step_recovered_choice", trace=T, ids=[10, 11], names=["iteration 0", "iteration 1"], lo=[1100, 2100],
          hi=[1450, 2450], device=0)
    x.run("step_members", trace=T)
    got = x.db.rows("SELECT step_key, list(kernel_id ORDER BY kernel_id) AS k FROM _step_members GROUP BY step_key "
                    "ORDER BY step_key")
    assert [(r["step_key"], r["k"]) for r in got] == [(10, [0, 1, 2]), (11, [3, 4, 5])]
    assert {r["kind"] for r in x.db.rows("SELECT kind FROM _step_chosen")} == {"recovered"}


def test_step_graphs_tells_full_from_piecewise() -> None:
    """Step 0's attention kernel ran inside a replay (full graph); step 1's GEMM came from a replay and its attention
    kernel ran eagerly (piecewise)."""
    x = _two_steps()
    _group(x, names=["ProfilerStep#0", "ProfilerStep#1"])
    x.db.sql("CREATE TEMP TABLE _kernel_replay AS SELECT * FROM (VALUES (0, 100), (1, 100), (2, 100), (3, 101), "
             "(4, NULL), (5, NULL)) v(kernel_id, replay_id)")
    got = x.rows("step_graphs", trace=T)
    assert sorted(got) == [(1, 1, 3, 3, 1, 1), (2, 1, 1, 3, 0, 1)]


def test_device_activity_is_one_devices_kernels_and_memops_in_start_order() -> None:
    x = Inline()
    x.kernel(0, "gemm", "gemm", 100, 200)
    x.kernel(1, "attn", "attention", 300, 400)
    x.kernel(2, "other gpu", "gemm", 150, 250, device=1)
    x.memop(50, 90)
    x.memop(220, 260, device=1)
    assert x.rows("device_activity", trace=T, device=0) == [(50, 90, "memop"), (100, 200, "gemm"),
                                                             (300, 400, "attention")]


def test_finding_steps_picks_each_findings_first_and_slowest_known_steps() -> None:
    import duckdb

    from traceinsight.ingest.schema import analysis_schema_sql

    con = duckdb.connect()
    con.execute(analysis_schema_sql())
    walls = {0: 50, 1: 10, 2: 70, 3: 70, 4: 5, 5: 90}  # step -> wall_ns
    for trace in (T, T + 1):  # the other trace's steps and findings must not show
        for step, wall in walls.items():
            con.execute("INSERT INTO steps (trace_id, step, name, source, phase, start_ns, dur_ns, attention_ns, "
                        "kernel_count, wall_ns) VALUES (?, ?, 's', 'launch', 'decode', 0, 1, 1, 1, ?)",
                        [trace, step, wall if trace == T else 1000 + step])
    findings = {0: [4, 9, 1, 0, 1], 1: [3, 2, 5]}  # step 9 is no step of the trace; step 1 listed twice
    for f, steps in findings.items():
        con.execute("INSERT INTO findings (trace_id, finding, rule_id, severity, steps, summary) "
                    "VALUES (?, ?, 'r', 'info', ?, 's')", [T, f, steps])
    con.execute("INSERT INTO findings (trace_id, finding, rule_id, severity, steps, summary) "
                "VALUES (?, 0, 'r', 'info', [5], 's')", [T + 1])
    got = {i for (i,) in con.execute(sql("finding_steps"), {"trace": T, "per": 2}).fetchall()}
    # finding 0: first two known [4, 1], slowest two [0 (50), 1 (10, the first listed)]; finding 1: first [3, 2],
    # slowest [5 (90), 3 (70, listed before 2)]
    assert got == {4, 1, 0, 3, 2, 5}
    got = {i for (i,) in con.execute(sql("finding_steps"), {"trace": T, "per": 1}).fetchall()}
    assert got == {4, 0, 3, 5}  # finding 0: first 4, slowest 0; finding 1: first 3, slowest 5
