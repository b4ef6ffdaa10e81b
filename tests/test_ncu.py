"""Nsight Compute CSV reader, its match to trace kernels, and the SM-activity summary, on the real H200 export.

Expected numbers were read independently from the file with Python's csv module (skip lines before the
`"ID","Process ID"` header; row 2 is the units row) and from the nsys SQLite export with sqlite3.
"""

from __future__ import annotations

import csv
import sqlite3
from pathlib import Path

import pytest

from traceinsight.errors import FormatError
from traceinsight.ingest import TraceDB, detect, load, ncu_cells, ncu_csv, ncu_lines, ncu_match, ncu_sm_active

DECODE = "void BatchDecodeWithPagedKVCacheKernel<0, 2, 1, 8, 16, 8, 1, DefaultAttention<0, 0, 0, 0>, Params>(T9)"
MERGE = (
    "void PersistentVariableLengthMergeStatesKernel<8, 16, 8, 4, __nv_bfloat16, __nv_bfloat16, int>"
    "(T5 *, float *, T7 *, T6 *, float *, unsigned int, unsigned int *, unsigned int)"
)
# ID -> (kernel, grid, innermost NVTX range), as the CSV states them.
EXPECTED = {
    0: (DECODE, (288, 4, 1), "tc=0 dist=uniform bs=32"),
    1: (MERGE, (1056, 1, 1), "tc=0 dist=uniform bs=32"),
    2: (DECODE, (256, 4, 1), "tc=0 dist=uniform bs=128"),
    3: (MERGE, (1584, 1, 1), "tc=0 dist=uniform bs=128"),
    4: (DECODE, (256, 4, 1), "tc=0 dist=uniform bs=256"),
    5: (DECODE, (297, 4, 1), "tc=0 dist=skew80 bs=32"),
    6: (MERGE, (1056, 1, 1), "tc=0 dist=skew80 bs=32"),
    7: (DECODE, (296, 4, 1), "tc=0 dist=skew80 bs=128"),
    8: (MERGE, (1584, 1, 1), "tc=0 dist=skew80 bs=128"),
    9: (DECODE, (297, 4, 1), "tc=0 dist=skew80 bs=256"),
    10: (MERGE, (1584, 1, 1), "tc=0 dist=skew80 bs=256"),
}


@pytest.fixture(scope="module")
def csv_path(h200: Path) -> Path:
    return h200 / "flashinfer_decode.ncu.csv"


@pytest.fixture(scope="module")
def ncu_db(csv_path: Path) -> tuple[TraceDB, int]:
    db = TraceDB()
    return db, db.add(ncu_csv.read(csv_path), csv_path)


def test_detected_as_ncu_csv(csv_path: Path) -> None:
    assert detect(csv_path) == "ncu-csv"


def test_kernels(ncu_db: tuple[TraceDB, int]) -> None:
    db, t = ncu_db
    rows = db.rows("SELECT * FROM ncu_kernels WHERE trace_id = $t ORDER BY ncu_id", {"t": t})
    assert [r["ncu_id"] for r in rows] == list(range(11))
    for r in rows:
        name, grid, nvtx = EXPECTED[r["ncu_id"]]
        assert r["name"] == name
        assert (r["grid_x"], r["grid_y"], r["grid_z"]) == grid
        assert (r["block_x"], r["block_y"], r["block_z"]) == (16, 8, 1)  # "Block Size" is "(16, 8, 1)" in every row
        assert r["nvtx"] == nvtx
        assert (r["device_id"], r["stream_id"]) == (0, 7)
        assert r["kernel_id"] is None


def test_metrics_long_form(ncu_db: tuple[TraceDB, int]) -> None:
    db, t = ncu_db
    # 274 metric columns x 11 rows, less the 11 empty `launch__kernel_name` cells.
    assert db.rows("SELECT count(*) AS n FROM ncu_metrics WHERE trace_id = $t", {"t": t})[0]["n"] == 3003

    def cell(ncu_id: int, metric: str) -> dict:
        return db.rows(
            "SELECT unit, value, text FROM ncu_metrics WHERE trace_id = $t AND ncu_id = $i AND metric = $m",
            {"t": t, "i": ncu_id, "m": metric},
        )[0]

    assert cell(9, "gpu__time_duration.sum") == {"unit": "ns", "value": 519968.0, "text": "519,968"}
    assert cell(9, "sm__cycles_active.avg") == {"unit": "cycle", "value": 797242.58, "text": "797,242.58"}
    assert cell(0, "device__attribute_display_name") == {"unit": None, "value": None, "text": "NVIDIA H200"}
    regs = db.rows(
        "SELECT ncu_id, value FROM ncu_metrics WHERE trace_id = $t AND metric = 'launch__registers_per_thread' "
        "ORDER BY ncu_id",
        {"t": t},
    )
    # 56 registers for the decode kernel (README: limits it to 9 CTAs/SM), 40 for the merge kernel.
    assert [r["value"] for r in regs] == [56.0 if EXPECTED[r["ncu_id"]][0] == DECODE else 40.0 for r in regs]


def test_sm_active(ncu_db: tuple[TraceDB, int]) -> None:
    db, t = ncu_db
    rows = {r["ncu_id"]: r for r in ncu_sm_active.sm_active(db, t)}
    assert len(rows) == 11
    skew = rows[9]  # skew80, B=256: min "155,030", avg "797,242.58", max "1,020,054" cycles
    assert (skew["sm_active_min"], skew["sm_active_avg"], skew["sm_active_max"]) == (155030.0, 797242.58, 1020054.0)
    assert skew["sm_active_avg_over_max"] == pytest.approx(797242.58 / 1020054)
    assert round(skew["sm_active_avg_over_max"], 2) == 0.78  # the README's figure
    assert skew["sm_idle_fraction"] == pytest.approx(1 - 797242.58 / 1020054)
    assert (skew["grid"], skew["nvtx"], skew["kernel_id"]) == ((297, 4, 1), "tc=0 dist=skew80 bs=256", None)
    uniform = rows[4]  # uniform, B=256: avg "643,358.36", max "665,282"
    assert uniform["sm_active_avg_over_max"] == pytest.approx(643358.36 / 665282)
    # Every decode kernel except skew80 at B=128/256 is balanced within 4 %.
    balanced = {i for i, r in rows.items() if EXPECTED[i][0] == DECODE and r["sm_active_avg_over_max"] > 0.96}
    assert balanced == {0, 2, 4, 5}


def _nsys_kernels_by_range(sqlite_path: Path) -> dict[tuple[str, int], list[int]]:
    """(NVTX text, grid x) -> kernel start times, in order, of kernels launched inside that push/pop range."""
    con = sqlite3.connect(f"file:{sqlite_path}?mode=ro&immutable=1", uri=True)
    try:
        rows = con.execute(
            "SELECT n.text, k.gridX, k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
            "JOIN NVTX_EVENTS n ON n.eventType = 59 AND n.start <= r.start AND r.start <= n.end "
            "ORDER BY k.start"
        ).fetchall()
    finally:
        con.close()
    out: dict[tuple[str, int], list[int]] = {}
    for text, grid_x, start in rows:
        out.setdefault((text, grid_x), []).append(start)
    return out


def test_match_nsys_sqlite(h200: Path, csv_path: Path) -> None:
    # Separate runs of the same sweep: the ncu NVTX texts are the nsys NVTX texts ("tc=0 dist=skew80 bs=128").
    sqlite_path = h200 / "flashinfer_decode.sqlite"
    db, ids = load([sqlite_path], ncu=[csv_path])  # load() calls match()
    t = ids[0]
    assert ncu_match.match(db, t) == 11  # idempotent
    expected = _nsys_kernels_by_range(sqlite_path)
    rows = db.rows(
        "SELECT n.ncu_id, n.nvtx, k.start_ns, k.grid_x, k.grid_y, k.block_x, k.name FROM ncu_kernels n "
        "JOIN kernels k ON k.trace_id = n.trace_id AND k.kernel_id = n.kernel_id WHERE n.trace_id = $t "
        "ORDER BY n.ncu_id",
        {"t": t},
    )
    assert len(rows) == 11
    for r in rows:
        _, grid, nvtx = EXPECTED[r["ncu_id"]]
        assert (r["grid_x"], r["grid_y"], r["block_x"]) == (grid[0], grid[1], 16)
        assert r["start_ns"] == expected[(nvtx, grid[0])][0]  # one kernel of each grid per NVTX range
        assert ("BatchDecode" in r["name"]) == (EXPECTED[r["ncu_id"]][0] == DECODE)
    assert all(r["kernel_id"] is not None for r in ncu_sm_active.sm_active(db, t))


def test_match_kineto_by_range_tokens(h200: Path, csv_path: Path) -> None:
    # The Kineto sweep names its steps "decode tc=0 dist=uniform bs=32 step=S" (3 steps per case): every ncu
    # kernel matches the kernel of step 0 of its case, by name (Kineto prints `8u`, `false`, `(Params)`).
    db, ids = load([h200 / "flashinfer_decode_sweep.pt.trace.json.gz"], ncu=[csv_path])
    t = ids[0]
    rows = db.rows(
        """
        SELECT n.ncu_id, n.nvtx, k.grid_x,
               (SELECT arg_max(r.name, r.start_ns) FROM ranges r
                WHERE r.trace_id = $t AND r.side = 'cpu' AND r.start_ns <= l.start_ns AND l.start_ns <= r.end_ns)
                   AS step
        FROM ncu_kernels n
        JOIN kernels k ON k.trace_id = n.trace_id AND k.kernel_id = n.kernel_id
        JOIN launches l ON l.trace_id = k.trace_id AND l.correlation_id = k.correlation_id
        WHERE n.trace_id = $t ORDER BY n.ncu_id
        """,
        {"t": t},
    )
    assert len(rows) == 11
    for r in rows:
        assert r["step"] == f"decode {r['nvtx']} step=0"
        assert r["grid_x"] == EXPECTED[r["ncu_id"]][1][0]


def test_match_without_common_cases(h200: Path, csv_path: Path) -> None:
    # The small Kineto trace holds uniform B=128 and skew80 B=32/128 only: 6 of the 11 ncu kernels.
    db, ids = load([h200 / "flashinfer_decode_small.pt.trace.json.gz"], ncu=[csv_path])
    matched = db.rows("SELECT ncu_id FROM ncu_kernels WHERE kernel_id IS NOT NULL ORDER BY ncu_id")
    assert [r["ncu_id"] for r in matched] == [2, 3, 5, 6, 7, 8]


# ---------------------------------------------------------------------------------------------- cells
def test_parse_number() -> None:
    assert ncu_cells.parse_number("1,020,054") == 1020054.0
    assert ncu_cells.parse_number("643,510.05") == 643510.05
    assert ncu_cells.parse_number("9.0") == 9.0
    assert ncu_cells.parse_number("-1.5e3") == -1500.0
    for text in ("", "n/a", "NVIDIA H200", "(16, 8, 1)", "1,2", "-", "."):
        assert ncu_cells.parse_number(text) is None


def test_innermost_nvtx() -> None:
    real = '911  "<default domain>:tc=0 dist=uniform bs=32:none:none:none:none:none:none" '
    assert ncu_cells.innermost_nvtx(real) == "tc=0 dist=uniform bs=32"
    fields = ":none:none:none:none:none:none"
    nested = f'7  "<default domain>:outer{fields}"  "mydomain:inner a:b{fields}" '
    assert ncu_cells.innermost_nvtx(nested) == "inner a:b"
    assert ncu_cells.innermost_nvtx(f'"3:<default domain>:region{fields}"', start_stop=True) == "region"
    assert ncu_cells.innermost_nvtx("") is None


# ---------------------------------------------------------------------------------------------- damaged files
def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    out = tmp_path / name
    out.write_text(text)
    return out


def _expect_error(path: Path, fragment: str) -> None:
    with pytest.raises(FormatError) as info:
        ncu_csv.read(path)
    message = str(info.value)
    assert message.startswith(str(path)) and "\n" not in message and fragment in message


def test_truncated_row(tmp_path: Path, csv_path: Path) -> None:
    lines = _lines(csv_path)
    last = lines[-1]
    boundary = [i for i in range(len(last)) if last.startswith('","', i)][100]  # after the 101st cell
    cut = _write(tmp_path, "cut.csv", "".join(lines[:-1]) + last[: boundary + 1] + "\n")
    _expect_error(cut, "line 13 has 101 cells, the header 287 (truncated or damaged CSV)")


def test_unterminated_quote(tmp_path: Path, csv_path: Path) -> None:
    lines = _lines(csv_path)
    last = lines[-1]
    cut_at = last.index("dist=skew80")  # inside the quoted NVTX cell
    damaged = _write(tmp_path, "quote.csv", "".join(lines[:-1]) + last[:cut_at])
    # A file cut inside its last row keeps the kernels before the cut, with a warning naming the line.
    ingest = ncu_csv.read(damaged)
    assert ingest.tables["ncu_kernels"]["ncu_id"] == list(range(10))
    assert "line 13 ends inside a quoted cell" in ingest.warnings[0]


def test_header_only_and_no_header(tmp_path: Path, csv_path: Path) -> None:
    lines = _lines(csv_path)
    header_at = next(i for i, line in enumerate(lines) if line.startswith(ncu_lines.HEADER_PREFIX))
    _expect_error(_write(tmp_path, "header.csv", "".join(lines[: header_at + 2])), "without any profiled kernel")
    _expect_error(_write(tmp_path, "prof.csv", "".join(lines[:header_at])), "no Nsight Compute CSV header")


def test_details_page_header_only(tmp_path: Path) -> None:
    # The header `ncu --csv` (details page) writes, and no rows: read since issue 15 (tests/test_ncu_details.py),
    # so the error is the one of any export without kernels.
    header = (
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
        '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"\n'
    )
    _expect_error(_write(tmp_path, "details.csv", header), "without any profiled kernel")


def test_bad_id(tmp_path: Path, csv_path: Path) -> None:
    lines = _lines(csv_path)
    lines[-1] = '"x' + lines[-1][lines[-1].index('"', 1) :]
    _expect_error(_write(tmp_path, "id.csv", "".join(lines)), "is not an integer")


def test_reference_parse_agrees(csv_path: Path) -> None:
    # Cross-check against a plain csv parse: one ncu_kernels row per data row, grids as printed.
    lines = _lines(csv_path)
    rows = list(csv.reader(lines[next(i for i, x in enumerate(lines) if x.startswith('"ID"')) :]))
    header, data = rows[0], rows[2:]
    ingest = ncu_csv.read(csv_path)
    grids = list(zip(*(ingest.tables["ncu_kernels"][f"grid_{a}"] for a in "xyz"), strict=True))
    assert [f"({x}, {y}, {z})" for x, y, z in grids] == [r[header.index("Grid Size")] for r in data]
