"""Nsight Systems readers: SQLite exports of three schema versions and .nsys-rep reports.

Expected values come from the sqlite3 CLI on the files themselves, run in ../shared/traces, e.g.

    q() { sqlite3 -header "file:$1?mode=ro&immutable=1" "$2"; }
    q h200/flashinfer_decode.sqlite "SELECT count(*), sum(end-start), min(start), max(end)
                                     FROM CUPTI_ACTIVITY_KIND_KERNEL"                   -- 70|34071869|4065797464|...
    q h200/flashinfer_decode.sqlite "SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r
        JOIN StringIds s ON s.id = r.nameId WHERE correlationId IN (SELECT correlationId FROM
        CUPTI_ACTIVITY_KIND_KERNEL UNION SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY) GROUP BY 1"

Each expectation below names the query it came from.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from conftest import FOREIGN, H200, sha256

from traceinsight.errors import FormatError, ToolMissingError
from traceinsight.ingest import Ingest, load, nsys_activity, nsys_devices, nsys_nvtx, nsys_query, nsys_rep, nsys_sqlite

FLASHINFER = H200 / "flashinfer_decode.sqlite"
FUSER = FOREIGN / "fuser_h200_report1.sqlite"
PIPIT = FOREIGN / "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
FLASHINFER_REP = H200 / "flashinfer_decode.nsys-rep"
FUSER_REP = FOREIGN / "fuser_h200_report1.nsys-rep"

# SELECT text FROM NVTX_EVENTS ORDER BY start   (all 16 are eventType 59, domainId 0)
FLASHINFER_RANGES = [
    f"tc={tc} dist={dist} bs={bs}" for tc in (0, 1) for dist in ("uniform", "skew80") for bs in (32, 128, 256, 384)
]


def _one(db, sql: str, params=None) -> dict:
    rows = db.rows(sql, params)
    assert len(rows) == 1, rows
    return rows[0]


def _count(db, table: str) -> int:
    return _one(db, f"SELECT count(*) AS n FROM {table}")["n"]


# ---------------------------------------------------------------------------------------------- flashinfer (3.20.3)
@pytest.fixture(scope="module")
def flashinfer(h200: Path):
    db, ids = load([FLASHINFER])
    assert ids == [0]
    return db


def test_flashinfer_trace_row(flashinfer) -> None:
    # SELECT * FROM META_DATA_EXPORT  -> EXPORT_SCHEMA_VERSION 3.20.3, EXPORT_PRODUCT_VERSION 2025.3.2.0
    t = _one(flashinfer, "SELECT * FROM traces")
    assert (t["format"], t["format_version"], t["tool_version"]) == ("nsys-sqlite", "3.20.3", "nsys 2025.3.2.0")
    assert t["warnings"] == []
    # min(start), max(end) over kernels and memcpys: 4065797464 (a kernel), 4227508880 (a kernel)
    assert (t["start_ns"], t["end_ns"]) == (4_065_797_464, 4_227_508_880)


def test_flashinfer_kernels(flashinfer) -> None:
    # SELECT count(*), sum(end-start), min(start), max(end) FROM CUPTI_ACTIVITY_KIND_KERNEL
    k = _one(flashinfer, "SELECT count(*) AS n, sum(dur_ns) AS d, min(start_ns) AS s, max(end_ns) AS e FROM kernels")
    assert (k["n"], k["d"], k["s"], k["e"]) == (70, 34_071_869, 4_065_797_464, 4_227_508_880)
    # SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName GROUP BY 1
    by_family = Counter(
        {
            r["short"]: r["n"]
            for r in flashinfer.rows(
                "SELECT regexp_extract(name, '(\\w+)(<|\\()', 1) AS short, count(*) AS n FROM kernels GROUP BY 1"
            )
        }
    )
    assert by_family["BatchDecodeWithPagedKVCacheKernel"] == 8
    assert by_family["PersistentVariableLengthMergeStatesKernel"] == 5
    assert by_family["PrefillWithKVCacheKernel"] == 8
    assert sum(by_family.values()) == 70
    # The longest kernel: SELECT s.value, gridX.., blockX.., registersPerThread, staticSharedMemory,
    # dynamicSharedMemory, end-start, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s
    # ON s.id = k.demangledName WHERE end-start = (SELECT max(end-start) FROM CUPTI_ACTIVITY_KIND_KERNEL)
    k = _one(flashinfer, "SELECT * FROM kernels ORDER BY dur_ns DESC LIMIT 1")
    assert k["name"].startswith("void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0,")
    assert k["mangled_name"].startswith("_Z")
    assert (k["grid_x"], k["grid_y"], k["grid_z"], k["block_x"], k["block_y"], k["block_z"]) == (384, 4, 1, 16, 8, 1)
    assert (k["registers_per_thread"], k["static_smem_bytes"], k["dynamic_smem_bytes"], k["smem_bytes"]) == (
        56,
        0,
        9216,
        9216,
    )
    assert (k["dur_ns"], k["correlation_id"], k["device_id"], k["stream_id"]) == (13_536_223, 1565, 0, 7)
    assert k["graph_node_id"] is None  # graphNodeId is NULL for all 70 (no CUDA graphs)
    # The SM90 tensor-core path: SELECT DISTINCT gridX, blockX, registersPerThread, dynamicSharedMemory FROM
    # CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName WHERE s.value = 'PrefillWithKVCacheKernel'
    rows = flashinfer.rows(
        "SELECT DISTINCT grid_x, block_x, registers_per_thread, dynamic_smem_bytes FROM kernels "
        "WHERE name LIKE '%PrefillWithKVCacheKernel<%'"
    )
    assert rows == [{"grid_x": 132, "block_x": 384, "registers_per_thread": 168, "dynamic_smem_bytes": 131152}]


def test_flashinfer_launches_and_memops(flashinfer) -> None:
    # Launch calls of kernels and memcpys (the query in the module docstring):
    # cudaLaunchKernel_v7000 57, cudaLaunchKernelExC_v11060 13, cudaMemcpyAsync_v3020 113
    rows = flashinfer.rows("SELECT name, count(*) AS n FROM launches GROUP BY 1")
    assert {r["name"]: r["n"] for r in rows} == {
        "cudaLaunchKernel": 57,
        "cudaLaunchKernelExC": 13,
        "cudaMemcpyAsync": 113,
    }
    # globalTid 281501484713516 -> pid 1580, tid 1580; ThreadNames names it 'python3', PROCESSES has no row
    # for it but TARGET_INFO_CUDA_DEVICE has pid 1580.
    assert flashinfer.rows("SELECT DISTINCT process_id, thread_id FROM launches") == [
        {"process_id": 1580, "thread_id": 1580}
    ]
    # Every kernel has its launch: 70 kernels, 70 distinct correlation ids, all in launches.
    assert (
        _one(
            flashinfer,
            "SELECT count(*) AS n FROM kernels k JOIN launches l USING (trace_id, correlation_id)",
        )["n"]
        == 70
    )
    # SELECT copyKind, count(*), sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY 1 -> 1|65|1507682, 2|48|25728
    rows = flashinfer.rows("SELECT kind, name, count(*) AS n, sum(bytes) AS b FROM memops GROUP BY 1, 2 ORDER BY 2")
    assert rows == [
        {"kind": "memcpy", "name": "[CUDA memcpy Device-to-Host]", "n": 48, "b": 25728},
        {"kind": "memcpy", "name": "[CUDA memcpy Host-to-Device]", "n": 65, "b": 1507682},
    ]


def test_flashinfer_ranges_and_device(flashinfer) -> None:
    # SELECT start, end, text, domainId, globalTid FROM NVTX_EVENTS ORDER BY start   (16 rows, eventType 59)
    rows = flashinfer.rows("SELECT * FROM ranges ORDER BY range_id")
    assert [r["name"] for r in rows] == FLASHINFER_RANGES
    assert {(r["kind"], r["side"], r["process_id"], r["thread_id"], r["domain"]) for r in rows} == {
        ("nvtx", "cpu", 1580, 1580, None)
    }
    skew384 = rows[FLASHINFER_RANGES.index("tc=0 dist=skew80 bs=384")]
    assert (skew384["start_ns"], skew384["end_ns"]) == (4_146_503_281, 4_160_201_254)
    # SELECT id, name, cuDevice, smCount, ... FROM TARGET_INFO_GPU
    d = _one(flashinfer, "SELECT * FROM devices")
    assert (d["device_id"], d["name"], d["num_sms"], d["compute_major"], d["compute_minor"]) == (
        0,
        "NVIDIA H200",
        132,
        9,
        0,
    )
    assert (d["regs_per_sm"], d["regs_per_block"], d["smem_per_sm_bytes"], d["smem_per_block_optin_bytes"]) == (
        65536,
        65536,
        233472,
        232448,
    )
    # maxWarpsPerSm 64 x threadsPerWarp 32
    assert (d["max_threads_per_sm"], d["max_warps_per_sm"], d["warp_size"], d["max_blocks_per_sm"]) == (
        2048,
        64,
        32,
        32,
    )
    assert (d["mem_bandwidth_bytes_per_s"], d["clock_hz"], d["l2_bytes"], d["total_mem_bytes"]) == (
        4_814_304_000_000,
        1_980_000_000,
        62_914_560,
        150_109_880_320,
    )


def test_flashinfer_kernels_attributable_to_ranges(flashinfer) -> None:
    # Each FlashInfer kernel's launch call (correlation id) starts inside exactly one NVTX range of the same
    # thread. Checked with: SELECT n.text, s.value, k.gridX, k.end-k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k
    # JOIN StringIds s ON s.id = k.shortName JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId
    # JOIN NVTX_EVENTS n ON r.start BETWEEN n.start AND n.end AND r.globalTid = n.globalTid ORDER BY k.start
    # -> 21 rows, all flashinfer kernels (8 decode, 5 merge, 8 prefill); the 49 PyTorch kernels lie outside.
    rows = flashinfer.rows(
        """
        SELECT k.kernel_id, k.name, k.grid_x, k.dur_ns, list(r.name) AS ranges
        FROM kernels k
        JOIN launches l ON l.trace_id = k.trace_id AND l.correlation_id = k.correlation_id
        LEFT JOIN ranges r ON r.trace_id = k.trace_id AND l.start_ns BETWEEN r.start_ns AND r.end_ns
             AND r.thread_id = l.thread_id AND r.process_id = l.process_id
        WHERE k.name LIKE '%flashinfer::%'
        GROUP BY ALL ORDER BY k.kernel_id
        """
    )
    assert len(rows) == 21
    assert all(len(r["ranges"]) == 1 and r["ranges"][0] is not None for r in rows)
    per_range = Counter(r["ranges"][0] for r in rows)
    assert set(per_range) == set(FLASHINFER_RANGES)
    # decode + merge while split-KV is on; decode alone at B=256 uniform and B=384; one prefill per tc=1 case
    assert per_range["tc=0 dist=skew80 bs=256"] == 2
    assert per_range["tc=0 dist=uniform bs=384"] == 1
    assert per_range["tc=1 dist=skew80 bs=32"] == 1
    slow = [r for r in rows if r["ranges"][0] == "tc=0 dist=skew80 bs=384"]
    assert [(r["grid_x"], r["dur_ns"]) for r in slow] == [(384, 13_536_223)]


# -------------------------------------------------------------------------------------------------- fuser (3.16.1)
def test_fuser_2024_export(foreign: Path) -> None:
    db, _ = load([FUSER])
    t = _one(db, "SELECT format_version, tool_version, warnings FROM traces")
    assert (t["format_version"], t["tool_version"], t["warnings"]) == ("3.16.1", "nsys 2024.6.2.25", [])
    # SELECT s.value, count(*), sum(end-start), gridX, gridY, gridZ, blockX, blockY, blockZ
    # FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName GROUP BY 1, 4, 5, 6, 7, 8, 9
    assert _count(db, "kernels") == 19
    # The hand-launched kernels, with their launch API (join RUNTIME on correlationId, StringIds on nameId):
    rows = db.rows(
        "SELECT k.*, l.name AS api FROM kernels k JOIN launches l USING (trace_id, correlation_id) "
        "WHERE k.name NOT LIKE '%elementwise%' ORDER BY k.name"
    )
    assert len(rows) == 3
    nvf, nvjet, reduce = rows
    assert nvf["name"].startswith("<unnamed>::nvfuser_none_f0_c0_r0_g0(<unnamed>::Tensor<<unnamed>::__half, (int)3")
    assert (nvf["grid_x"], nvf["grid_y"], nvf["grid_z"], nvf["block_x"], nvf["block_y"], nvf["block_z"]) == (
        8,
        16,
        1,
        128,
        3,
        1,
    )
    assert (nvf["registers_per_thread"], nvf["smem_bytes"], nvf["dur_ns"], nvf["api"]) == (
        156,
        114816,
        135137,
        "cuLaunchKernel",
    )
    assert nvf["mangled_name"].startswith("_ZN71_GLOBAL__N__00000000_32___tmp_kernel_none_f0_c0_r0_g0")
    # cuBLAS nvjet kernel: demangled, short and mangled names are all the same plain string
    assert nvjet["name"] == nvjet["mangled_name"] == "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT"
    assert (nvjet["grid_x"], nvjet["grid_y"], nvjet["block_x"], nvjet["dur_ns"], nvjet["api"]) == (
        2,
        64,
        384,
        87521,
        "cuLaunchKernelEx",
    )
    assert reduce["name"].startswith("void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<bool,")
    assert reduce["api"] == "cudaLaunchKernel"
    assert (reduce["static_smem_bytes"], reduce["dynamic_smem_bytes"], reduce["smem_bytes"]) == (16, 512, 528)
    # SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId IN (kernels ∪ memcpy ∪ memset) -> 21
    assert _count(db, "launches") == 21
    assert db.rows("SELECT kind, bytes FROM memops ORDER BY kind") == [
        {"kind": "memcpy", "bytes": 1},
        {"kind": "memset", "bytes": 4},
    ]
    # SELECT count(*), count(DISTINCT text) FROM NVTX_EVENTS WHERE eventType IN (59, 60) -> 652|75
    r = _one(db, "SELECT count(*) AS n, count(DISTINCT name) AS names, count(domain) AS domains FROM ranges")
    assert (r["n"], r["names"], r["domains"]) == (652, 75, 0)
    # SELECT text, count(*) FROM NVTX_EVENTS GROUP BY 1 ORDER BY 2 DESC LIMIT 1 -> ExpressionEvaluator::evaluate|430
    assert _one(db, "SELECT count(*) AS n FROM ranges WHERE name = 'ExpressionEvaluator::evaluate'")["n"] == 430
    d = _one(db, "SELECT name, num_sms, mem_bandwidth_bytes_per_s FROM devices")
    assert (d["name"], d["num_sms"], d["mem_bandwidth_bytes_per_s"]) == ("NVIDIA H200", 132, 4_916_736_000_000)


# ------------------------------------------------------------------------------------------------- pipit (2.9.1)
def test_pipit_2022_export(foreign: Path) -> None:
    db, _ = load([PIPIT])
    # SELECT * FROM EXPORT_META_DATA (the 2.x name of META_DATA_EXPORT)
    t = _one(db, "SELECT format_version, tool_version FROM traces")
    assert (t["format_version"], t["tool_version"]) == ("2.9.1", "nsys 2022.2.1.31")
    # SELECT s.value, gridX, gridY, gridZ, blockX, blockY, blockZ, end-start FROM CUPTI_ACTIVITY_KIND_KERNEL k
    # JOIN StringIds s ON s.id = k.demangledName ORDER BY start
    rows = db.rows("SELECT * FROM kernels ORDER BY kernel_id")
    assert [r["dur_ns"] for r in rows] == [17_704_808, 17_733_416, 17_700_808, 17_720_488, 17_713_960]
    assert {
        (r["name"], r["mangled_name"], r["grid_x"], r["grid_y"], r["grid_z"], r["block_x"], r["block_y"], r["block_z"])
        for r in rows
    } == {("saxpy(double *, double *, double *, double, int)", "_Z5saxpyPdS_S_di", 2, 1, 1, 512, 1, 1)}
    # The runtime table repeats each call as an eventClass 67 (CUDA backtrace) row under the same correlation id:
    # SELECT count(*), count(DISTINCT correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME -> 95|57; of the 40 rows of
    # launched correlation ids, 20 are not backtraces -> one launch per correlation id.
    r = _one(db, "SELECT count(*) AS n, count(DISTINCT correlation_id) AS ids FROM launches")
    assert (r["n"], r["ids"]) == (20, 20)
    assert {r["name"]: r["n"] for r in db.rows("SELECT name, count(*) AS n FROM launches GROUP BY 1")} == {
        "cudaLaunchKernel": 5,
        "cudaMemcpy": 15,
    }
    # globalTid 302119224788637 -> pid 1230493 (PROCESSES: './saxpy-mpi-cuda'), tid 1230493 ('MPI Rank 0')
    assert db.rows("SELECT DISTINCT process_id, thread_id FROM launches") == [
        {"process_id": 1230493, "thread_id": 1230493}
    ]
    # SELECT count(*), sum(bytes), sum(copyKind = 1), sum(copyKind = 2) FROM CUPTI_ACTIVITY_KIND_MEMCPY
    # -> 15|3932160000|10|5 (no ENUM_CUDA_MEMCPY_OPER table in 2.x: the built-in labels apply)
    assert {r["name"]: r["n"] for r in db.rows("SELECT name, count(*) AS n FROM memops GROUP BY 1")} == {
        "[CUDA memcpy Host-to-Device]": 10,
        "[CUDA memcpy Device-to-Host]": 5,
    }
    assert _one(db, "SELECT sum(bytes) AS b FROM memops")["b"] == 3_932_160_000
    # SELECT coalesce(n.text, s.value), n.domainId, count(*) FROM NVTX_EVENTS n LEFT JOIN StringIds s
    # ON s.id = n.textId WHERE eventType = 59 GROUP BY 1, 2; domain 1 is created by the eventType 75 row 'MPI'
    rows = db.rows("SELECT name, domain, count(*) AS n FROM ranges GROUP BY 1, 2")
    assert {(r["name"], r["domain"]): r["n"] for r in rows} == {
        ("MPI_Init", "MPI"): 1,
        ("MPI_Send", "MPI"): 10,
        ("MPI_Recv", "MPI"): 5,
        ("MPI_Finalize", "MPI"): 1,
        ("saxpy", None): 5,
    }
    d = _one(db, "SELECT * FROM devices")
    assert (d["name"], d["num_sms"], d["compute_major"], d["smem_per_sm_bytes"], d["max_threads_per_sm"]) == (
        "NVIDIA A100-SXM4-40GB",
        108,
        8,
        167936,
        2048,
    )


def test_arrow_json_and_row_fetch_agree() -> None:
    # The three routes of the large tables: the Arrow driver (the usual one), and through sqlite3 the
    # JSON-aggregate fetch and the row-by-row fetch (SQLite builds without JSON1).
    for path in (FLASHINFER, FUSER, PIPIT):
        results = []
        for arrow_path, use_json in ((path, True), (None, True), (None, False)):
            con = nsys_sqlite.connect(path)
            try:
                tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                ingest = Ingest(format="nsys-sqlite")
                reader = nsys_query.ExportReader(con, tables, ingest, arrow_path, use_json=use_json)
                for step in (nsys_activity.kernels, nsys_activity.memops, nsys_activity.launches, nsys_nvtx.ranges,
                             nsys_devices.devices):
                    step(reader)
            finally:
                con.close()
            assert reader.arrow_path == arrow_path  # the Arrow route was taken where offered
            results.append(({t: ingest.lists(t) for t in ingest.tables}, ingest.warnings))
        assert results[0] == results[1] == results[2]


# ------------------------------------------------------------------------------------------ inputs left untouched
@pytest.mark.parametrize("path", [FLASHINFER, FUSER, PIPIT], ids=lambda p: p.name)
def test_export_is_not_modified(path: Path) -> None:
    before = (sha256(path), path.stat().st_mtime_ns, sorted(os.listdir(path.parent)))
    nsys_sqlite.read(path)
    load([path])
    assert (sha256(path), path.stat().st_mtime_ns, sorted(os.listdir(path.parent))) == before
    for suffix in ("-wal", "-shm", "-journal"):
        assert not path.with_name(path.name + suffix).exists()


def test_path_needing_uri_quoting(tmp_path: Path) -> None:
    # '#', '?' and '%' would end or alter a file: URI if the path were pasted in unquoted.
    odd = tmp_path / "a b#?%20" / "saxpy.sqlite"
    odd.parent.mkdir()
    shutil.copyfile(PIPIT, odd)
    assert len(nsys_sqlite.read(odd).tables["kernels"]["name"]) == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a b#?%20"]


# -------------------------------------------------------------------------------------------------- bad exports
def test_truncated_export_is_one_line_format_error(tmp_path: Path) -> None:
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(FLASHINFER.read_bytes()[:8192])
    for read in (lambda p: load([p]), nsys_sqlite.read):
        with pytest.raises(FormatError) as err:
            read(cut)
        msg = str(err.value)
        assert msg.startswith(f"{cut}: ") and "\n" not in msg
        assert "malformed" in msg


def _altered(export: Path, copy: Path, statement: str) -> Path:
    """A copy of a real export with SQL statements applied."""
    shutil.copyfile(export, copy)
    con = sqlite3.connect(copy)
    con.executescript(statement)
    con.commit()
    con.close()
    return copy


def test_export_without_kernel_table(tmp_path: Path) -> None:
    # A real export with the kernel table dropped from a copy: a capture without `-t cuda` looks like this.
    copy = _altered(FUSER, tmp_path / "nocuda.sqlite", "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    with pytest.raises(FormatError) as err:
        load([copy])
    assert str(err.value) == (
        f"{copy}: Nsight Systems export without CUDA kernel activity (CUPTI_ACTIVITY_KIND_KERNEL); "
        "capture with `nsys profile -t cuda`"
    )


def test_nvtx_text_that_is_not_utf8(tmp_path: Path) -> None:
    # NVTX strings come from C code and need not be UTF-8; one such text must not fail the whole read.
    copy = _altered(PIPIT, tmp_path / "latin1.sqlite",
                    "UPDATE NVTX_EVENTS SET text = CAST(X'73617870FF' AS TEXT) WHERE text = 'saxpy'")
    db, _ = load([copy])
    assert _one(db, "SELECT count(*) AS n FROM ranges WHERE name = 'saxp\ufffd'")["n"] == 5


# ---------------------------------------------------------------------------------------------------- .nsys-rep
@pytest.fixture
def no_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An environment without nsys on PATH or $NSYS and an empty cache folder; returns the cache folder."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.setenv("TRACEINSIGHT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_rep_without_nsys_is_one_line_tool_missing(no_nsys: Path, h200: Path) -> None:
    if nsys_rep.find_nsys() is not None:
        pytest.skip(f"nsys is installed at {nsys_rep.find_nsys()}, so it cannot be missing")
    with pytest.raises(ToolMissingError) as err:
        load([FLASHINFER_REP])
    assert str(err.value) == (
        f"{FLASHINFER_REP}: reading an .nsys-rep needs Nsight Systems' `nsys` (not found on PATH, $NSYS or "
        f"/opt/nvidia); install it or export on a machine that has it: nsys export --type sqlite -o "
        f"flashinfer_decode.sqlite {FLASHINFER_REP}, then pass the .sqlite"
    )
    assert not no_nsys.exists()  # nothing written when nothing was exported


def test_rep_with_nsys_env_pointing_nowhere(no_nsys: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "no-such-nsys"
    monkeypatch.setenv("NSYS", str(missing))
    with pytest.raises(ToolMissingError) as err:
        load([FUSER_REP])
    msg = str(err.value)
    assert msg.startswith(f"{FUSER_REP}: $NSYS={missing} is not a runnable `nsys`") and "\n" not in msg


def test_rep_reuses_cached_export(no_nsys: Path) -> None:
    # The shipped .sqlite is `nsys export --type sqlite` of the shipped report: placed where an earlier export
    # would have been cached, it is read without nsys.
    cached = nsys_rep.cached_export_path(FLASHINFER_REP)
    assert cached.parent == no_nsys / "nsys"
    assert cached.name.startswith("flashinfer_decode-") and cached.name.endswith("-82828.sqlite")
    cached.parent.mkdir(parents=True)
    shutil.copyfile(FLASHINFER, cached)
    db, _ = load([FLASHINFER_REP])
    t = _one(db, "SELECT format, path, source_path FROM traces")
    assert (t["format"], t["path"], t["source_path"]) == ("nsys-rep", str(FLASHINFER_REP), str(cached))
    assert _count(db, "kernels") == 70 and _count(db, "ranges") == 16


def test_rep_ignores_damaged_cache_entry(no_nsys: Path) -> None:
    cached = nsys_rep.cached_export_path(FUSER_REP)
    cached.parent.mkdir(parents=True)
    cached.write_bytes(FUSER.read_bytes()[:8192])
    if nsys_rep.find_nsys() is not None:
        pytest.skip("nsys is installed: the damaged entry would be replaced by a fresh export")
    with pytest.raises(ToolMissingError):
        nsys_rep.export(FUSER_REP)


def test_rep_failing_export_leaves_nothing(no_nsys: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # /bin/false stands for an nsys that exits non-zero without output (a crash, an unreadable report).
    false = shutil.which("false", path="/usr/bin:/bin")
    if false is None:
        pytest.skip("no `false` program")
    monkeypatch.setenv("NSYS", false)
    with pytest.raises(FormatError) as err:
        load([FUSER_REP])
    assert str(err.value) == f"{FUSER_REP}: `nsys export` failed: exit status 1"
    assert list((no_nsys / "nsys").iterdir()) == []  # no partial or temporary file left


@pytest.mark.parametrize("rep,shipped", [(FLASHINFER_REP, FLASHINFER), (FUSER_REP, FUSER)], ids=["flashinfer", "fuser"])
def test_rep_real_export_matches_shipped_sqlite(
    rep: Path, shipped: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if nsys_rep.find_nsys() is None:
        pytest.skip("Nsight Systems `nsys` not found on PATH, $NSYS or the usual install folders")
    monkeypatch.setenv("TRACEINSIGHT_CACHE_DIR", str(tmp_path / "cache"))
    before = sha256(rep)
    exported = nsys_rep.export(rep)
    assert exported == nsys_rep.cached_export_path(rep) and exported.is_file()
    assert nsys_rep.export(rep) == exported  # second call: the cached export
    assert sha256(rep) == before
    assert [p.name for p in exported.parent.iterdir()] == [exported.name]
    fresh, ref = nsys_sqlite.read(exported), nsys_sqlite.read(shipped)
    for table, cols in (
        ("kernels", ["name", "start_ns", "end_ns", "grid_x", "grid_y", "grid_z", "block_x", "registers_per_thread"]),
        ("ranges", ["name", "start_ns", "end_ns", "thread_id"]),
        ("launches", ["correlation_id", "name", "start_ns"]),
    ):
        a, b = fresh.lists(table), ref.lists(table)
        assert sorted(zip(*(a[c] for c in cols), strict=True)) == sorted(zip(*(b[c] for c in cols), strict=True))
