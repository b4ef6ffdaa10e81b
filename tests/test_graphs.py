"""CUDA / HIP graph replays (`graph_replays`, queries/kernel_graph_replay.sql) and run context (`traces.rank`, ...)
on real traces: our own CUDA-graph captures (torch and nsys --cuda-graph-trace=node), TraceLens' vLLM and SGLang
ROCm traces (hipGraphLaunch; full and piecewise graphs), and traces without graphs.

Counts were read off the files with gzip/json and sqlite3 (examples/engines/README.md has the engines' own)."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, FOREIGN, H200

from traceinsight.ingest import TraceDB, load
from traceinsight.queries import sql

TRACELENS = Path(__file__).parent / "data" / "foreign" / "tracelens"
# Engine traces collected beside this work (examples/engines/README.md); $ENGINE_TRACES reads them from another
# checkout; a trace missing from it fails the test.
ENGINES = Path(os.environ.get("ENGINE_TRACES", EXAMPLES / "engines"))
COLLECTED = EXAMPLES / "collected"
LOOP = EXAMPLES / "loop"


def _one(path: Path) -> tuple[TraceDB, int]:
    assert path.is_file(), f"{path}: a committed trace is missing (or $ENGINE_TRACES names a folder without it)"
    db, ids = load([path], cache=False)
    return db, ids[0]


def _replays(db: TraceDB, t: int) -> list[dict[str, Any]]:
    return db.rows("SELECT * FROM graph_replays WHERE trace_id = $t ORDER BY replay_id", {"t": t})


def _kernel_replays(db: TraceDB, t: int) -> list[dict[str, Any]]:
    return db.rows(sql("kernel_graph_replay"), {"trace": t})


def test_torch_cuda_graph_capture_every_kernel_is_a_replay_kernel() -> None:
    # The serving replay under CUDA graphs: each step one cudaGraphLaunch replaying the decode kernel and, when
    # split-KV is on, its merge kernel; 400 launches (200 steps x 2 paths) for all 621 kernels.
    db, t = _one(COLLECTED / "serving_q64kv8d128_graph_torch.pt.trace.json.gz")
    replays = _replays(db, t)
    assert len(replays) == 400
    assert {r["name"] for r in replays} == {"cudaGraphLaunch"}
    assert sorted({r["kernel_count"] for r in replays}) == [1, 2] and sum(r["kernel_count"] for r in replays) == 621
    assert not any(r["hidden"] for r in replays)
    assert [r["replay_id"] for r in replays] == list(range(400))
    for r in replays:
        assert r["start_ns"] < r["gpu_start_ns"] <= r["gpu_end_ns"]  # the host call comes first
        assert (r["device_id"], r["stream_id"], r["graph_id"]) == (0, 7, None)  # Kineto names no graph id
    per_kernel = _kernel_replays(db, t)
    assert len(per_kernel) == 621 and all(k["replay_id"] is not None for k in per_kernel)
    # Within a replay the kernels are numbered by start: the decode kernel, then its merge.
    names = {r["kernel_id"]: r["name"] for r in db.rows("SELECT kernel_id, name FROM kernels WHERE trace_id = $t",
                                                       {"t": t})}
    for k in per_kernel:
        if k["replay_kernels"] == 2:
            assert ("MergeStates" in names[k["kernel_id"]]) == (k["replay_kernel"] == 1)


def test_eager_kernels_have_no_replay_and_torch_and_nsys_agree() -> None:
    # The model-like loop with CUDA graphs: 234 replays of 64 kernels each, and 390 eager kernels (prefill steps,
    # warm-up) outside any graph; the nsys capture (--cuda-graph-trace=node) of the same loop finds the same.
    for path in (LOOP / "loop_core_graph_torch.pt.trace.json.gz", LOOP / "loop_core_graph_nsys.sqlite"):
        db, t = _one(path)
        replays = _replays(db, t)
        assert len(replays) == 234 and {r["kernel_count"] for r in replays} == {64}, path
        per_kernel = _kernel_replays(db, t)
        assert len(per_kernel) == 15366
        assert sum(k["replay_id"] is None for k in per_kernel) == 390
        # A replay's kernels are 0..63 in it, and lie inside its GPU span.
        spans = {r["replay_id"]: (r["gpu_start_ns"], r["gpu_end_ns"]) for r in replays}
        starts = {r["kernel_id"]: (r["start_ns"], r["end_ns"]) for r in db.rows(
            "SELECT kernel_id, start_ns, end_ns FROM kernels WHERE trace_id = $t", {"t": t})}
        for k in per_kernel:
            if k["replay_id"] is not None:
                lo, hi = spans[k["replay_id"]]
                assert lo <= starts[k["kernel_id"]][0] and starts[k["kernel_id"]][1] <= hi
                assert 0 <= k["replay_kernel"] < 64


def test_nsys_node_mode_graph_kernels_are_their_launches_replays() -> None:
    # --cuda-graph-trace=node: 121 kernels with a graphNodeId, under 100 cudaGraphLaunch_v10000 calls (name kept
    # without its version suffix); the 2025.3 export has no graphId column, so graph_id stays NULL.
    db, t = _one(COLLECTED / "serving_q64kv8d128_graph_nsys.sqlite")
    replays = _replays(db, t)
    assert len(replays) == 100 and sum(r["kernel_count"] for r in replays) == 121
    assert {r["name"] for r in replays} == {"cudaGraphLaunch"}
    assert all(r["process_id"] is not None and r["thread_id"] is not None for r in replays)
    assert all(r["graph_id"] is None and not r["hidden"] for r in replays)
    graph_kernels = {r["kernel_id"] for r in db.rows(
        "SELECT kernel_id FROM kernels WHERE trace_id = $t AND graph_node_id IS NOT NULL", {"t": t})}
    assert {k["kernel_id"] for k in _kernel_replays(db, t) if k["replay_id"] is not None} == graph_kernels
    assert len(graph_kernels) == 121


@pytest.mark.parametrize(("path", "launches", "counts", "eager"), [
    # vLLM full-graph decode of gpt-oss on an MI300X: one hipGraphLaunch owns 421 of the 425 kernels.
    (TRACELENS / "vllm_mi300x_gptoss_decode_graph_execution.json.gz", 1, [421], 4),
    # SGLang decode of Qwen3-8B: one graph for the whole decode, 544 of 555 kernels.
    (TRACELENS / "sglang_mi300x_Qwen3-8B_decode.json.gz", 1, [544], 11),
    # vLLM piecewise (a mixed step): 25 replays (15 kernels x 23, 12, 4) between 24 eager attention kernels.
    (ENGINES / "tracelens_vllm_prefilldecode_piecewise__graph_execution.json.gz", 25, [4] + [15] * 23 + [12], 52),
])
def test_rocm_hip_graph_launches(path: Path, launches: int, counts: list[int], eager: int) -> None:
    db, t = _one(path)
    replays = _replays(db, t)
    assert len(replays) == launches and {r["name"] for r in replays} == {"hipGraphLaunch"}
    assert [r["kernel_count"] for r in replays] == counts
    assert sum(k["replay_id"] is None for k in _kernel_replays(db, t)) == eager


def test_piecewise_graphs_interleave_with_eager_attention() -> None:
    # What tells piecewise from full graphs: the attention kernels run eagerly between the replays.
    db, t = _one(ENGINES / "tracelens_vllm_prefilldecode_piecewise__graph_execution.json.gz")
    rows = db.rows(f"SELECT k.name, g.replay_id FROM ({sql('kernel_graph_replay')}) g "
                   "JOIN kernels k ON k.trace_id = $trace AND k.kernel_id = g.kernel_id ORDER BY k.start_ns",
                   {"trace": t})
    attention = [r for r in rows if "unified_attention" in r["name"]]
    assert len(attention) == 24 and all(r["replay_id"] is None for r in attention)
    # Every attention kernel lies between two replays.
    order = [r["replay_id"] for r in rows]
    for i, r in enumerate(rows):
        if "unified_attention" in r["name"]:
            assert any(x is not None for x in order[:i]) and any(x is not None for x in order[i + 1:])


@pytest.mark.parametrize("path", [
    H200 / "flashinfer_decode_sweep.pt.trace.json.gz",
    H200 / "flashinfer_decode.sqlite",
    FOREIGN / "tracelens_h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",  # 436 kernels without a launch event
    FOREIGN / "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
    ENGINES / "tracelens_sglang_decode__capture_bs_32_rank0.json.gz",  # a capture: launches made no kernel
])
def test_traces_without_graph_replays(path: Path) -> None:
    db, t = _one(path)
    assert _replays(db, t) == []
    assert all(k["replay_id"] is None for k in _kernel_replays(db, t))


def _graph_level_export(src: Path, dest: Path) -> None:
    """`src` (a --cuda-graph-trace=node export) as --cuda-graph-trace=graph records it: each graph launch one row of
    CUPTI_ACTIVITY_KIND_GRAPH_TRACE (its kernels' span, device, stream, context, process and correlation id; the
    graph id from the node ids' upper half), and the graph's kernels gone from the kernel table."""
    shutil.copy(src, dest)
    con = sqlite3.connect(dest)
    con.executescript("""
        CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER NOT NULL, "end" INTEGER NOT NULL,
            deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,
            correlationId INTEGER, globalPid INTEGER, graphId INTEGER NOT NULL, graphExecId INTEGER NOT NULL);
        INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE
            SELECT min(start), max("end"), min(deviceId), min(contextId), NULL, min(streamId), correlationId,
                   min(globalPid), min(graphNodeId) >> 32, 1
            FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT NULL GROUP BY correlationId;
        DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT NULL;
    """)
    con.commit()
    con.close()


def test_graph_level_replays_are_hidden_and_say_how_to_see_inside(tmp_path: Path) -> None:
    src = COLLECTED / "serving_q64kv8d128_graph_nsys.sqlite"
    dest = tmp_path / "graph_level.sqlite"
    _graph_level_export(src, dest)
    db, ids = load([dest], cache=False)
    t = ids[0]
    replays = _replays(db, t)
    assert len(replays) == 100 and all(r["hidden"] and r["kernel_count"] == 0 for r in replays)
    # The host call is still there (its correlation id launched a graph-level record), and the graph's identity.
    assert {r["name"] for r in replays} == {"cudaGraphLaunch"} and all(r["start_ns"] is not None for r in replays)
    assert {r["graph_id"] for r in replays} <= {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}
    assert all(r["graph_exec_id"] == 1 and r["stream_id"] is not None for r in replays)
    # The same GPU spans as the kernels had in the node-mode export.
    node_db, node_ids = load([src], cache=False)
    node = _replays(node_db, node_ids[0])
    assert [(r["gpu_start_ns"], r["gpu_end_ns"]) for r in replays] == [
        (r["gpu_start_ns"], r["gpu_end_ns"]) for r in node]
    trace = db.rows("SELECT start_ns, end_ns, warnings FROM traces WHERE trace_id = $t", {"t": t})[0]
    assert any("--cuda-graph-trace=node" in w and "100 CUDA graph replays" in w for w in trace["warnings"])
    # The trace's GPU span counts the hidden work: it is the node-mode export's.
    assert (trace["start_ns"], trace["end_ns"]) == tuple(node_db.rows(
        "SELECT start_ns, end_ns FROM traces WHERE trace_id = $t", {"t": node_ids[0]})[0].values())
    assert _kernel_replays(db, t) == []  # every kernel of this capture ran inside a graph: none is left


def test_graph_level_records_without_timing_or_a_host_call(tmp_path: Path) -> None:
    # CUPTI writes start = end = 0 when it could not time a graph; a record whose launch call is not in the runtime
    # table still makes a replay (host columns NULL).
    dest = tmp_path / "graph_level.sqlite"
    _graph_level_export(COLLECTED / "serving_q64kv8d128_graph_nsys.sqlite", dest)
    con = sqlite3.connect(dest)
    first = con.execute("SELECT min(correlationId) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE").fetchone()[0]
    con.execute('UPDATE CUPTI_ACTIVITY_KIND_GRAPH_TRACE SET start = 0, "end" = 0 WHERE correlationId = ?', [first])
    con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId = ?", [first + 0])
    con.commit()
    con.close()
    db, ids = load([dest], cache=False)
    row = db.rows("SELECT * FROM graph_replays WHERE trace_id = $t AND correlation_id = $c",
                  {"t": ids[0], "c": first})[0]
    assert row["hidden"] and row["gpu_start_ns"] is None and row["name"] is None and row["start_ns"] is None


@pytest.mark.parametrize(("path", "rank", "world", "backend", "groups"), [
    (TRACELENS / "vllm_mi300x_gptoss_decode_graph_execution.json.gz", 0, 1, "nccl", 15),
    (TRACELENS / "sglang_mi300x_Qwen3-8B_decode.json.gz", 0, 1, "nccl", 7),
    (ENGINES / "tracelens_b200_vllm_gptoss_eager_trace.json.gz", 0, 8, "nccl", None),  # TP=8, rank 0
    (FOREIGN / "hta_a100_alexnet_critical_path_trace.json.gz", 0, None, None, None),  # distributedInfo: {rank: 0}
    (H200 / "flashinfer_decode_sweep.pt.trace.json.gz", None, None, None, None),  # no distributedInfo
    (FOREIGN / "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite", 0, None, "mpi", None),  # thread named 'MPI Rank 0'
    (H200 / "flashinfer_decode.sqlite", None, None, None, None),
])
def test_run_context(path: Path, rank: int | None, world: int | None, backend: str | None,
                     groups: int | None) -> None:
    import json

    db, t = _one(path)
    row = db.rows("SELECT rank, world_size, dist_backend, process_groups FROM traces WHERE trace_id = $t",
                  {"t": t})[0]
    assert (row["rank"], row["world_size"], row["dist_backend"]) == (rank, world, backend)
    if groups is not None:
        pg = json.loads(row["process_groups"])
        assert len(pg) == groups and pg[0]["pg_desc"] == "default_pg" and pg[0]["ranks"] == [0]
    elif backend != "nccl":
        assert row["process_groups"] is None


def test_b200_process_groups_name_the_tp_group() -> None:
    import json

    db, t = _one(ENGINES / "tracelens_b200_vllm_gptoss_eager_trace.json.gz")
    pg = json.loads(db.rows("SELECT process_groups FROM traces WHERE trace_id = $t", {"t": t})[0]["process_groups"])
    assert any(g["pg_size"] == 8 and g["ranks"] == list(range(8)) for g in pg)


def test_nsys_kernel_graph_id_where_the_export_has_it(tmp_path: Path) -> None:
    # Exports of other nsys versions carry the kernel's graphId (0: not launched from a graph). The loop's export
    # with that column added (the graph id from the node ids' upper half): 6 graphs, replayed 66, 65, 21, 18, 22 and
    # 42 times.
    dest = tmp_path / "graph_id.sqlite"
    shutil.copy(LOOP / "loop_core_graph_nsys.sqlite", dest)
    con = sqlite3.connect(dest)
    con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL ADD COLUMN graphId INTEGER")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET graphId = coalesce(graphNodeId >> 32, 0)")
    con.commit()
    con.close()
    db, ids = load([dest], cache=False)
    t = ids[0]
    got = db.rows("SELECT count(graph_id) AS n, count(DISTINCT graph_id) AS graphs FROM kernels WHERE trace_id = $t",
                  {"t": t})[0]
    assert (got["n"], got["graphs"]) == (14976, 6)  # the 390 eager kernels' 0 reads as NULL
    replays = _replays(db, t)
    counts = {g: sum(r["graph_id"] == g for r in replays) for g in {r["graph_id"] for r in replays}}
    assert counts == {2: 66, 5: 65, 8: 21, 11: 18, 14: 22, 17: 42}
    assert all(k["graph_id"] is not None for k in _kernel_replays(db, t) if k["replay_id"] is not None)
