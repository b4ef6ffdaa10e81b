"""Nsight Compute's default CSV layout (the details page, `ncu --csv`): read, normalized and matched like the raw page.

Real input: microsoft/superbenchmark's `tests/data/cublaslt_ncu.log` (ncu 2025 details page of one cuBLASLt GEMM on
an sm_100 GPU, with the SpeedOfLight, LaunchStats, Occupancy and WorkloadDistribution sections and rule rows; copied
to tests/data/foreign/ncu/, MIT licence). Expected values were read from the file with Python's csv module. The
shared H200 raw-page export is also re-laid out as a details page (what ncu prints for `--metrics` metrics: section
"Command line profiler metrics", the raw metric name as "Metric Name") to check that both layouts give the same
tables and the same match to the trace.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from traceinsight.errors import FormatError
from traceinsight.ingest import TraceDB, detect, load, ncu_cells, ncu_csv, ncu_details, ncu_sm_active

DETAILS = Path(__file__).parent / "data" / "foreign" / "ncu" / "superbench_cublaslt_ncu_details.csv"
GEMM = ("cutlass3x_sm100_tensorop_s64x256x32gemm_f8_f8_f32_f16_f16_64x256x128_1x1x1_0_tnn_align4_1sm_bias_f16_relu_aux"
        "_scalemax")
DETAILS_HEADER = ['ID', 'Process ID', 'Process Name', 'Host Name', 'Kernel Name', 'Context', 'Stream', 'Block Size',
                  'Grid Size', 'Device', 'CC', 'Section Name', 'Metric Name', 'Metric Unit', 'Metric Value']


@pytest.fixture(scope="module")
def details_db() -> tuple[TraceDB, int]:
    db = TraceDB()
    return db, db.add(ncu_csv.read(DETAILS), DETAILS)


def _metric(db: TraceDB, t: int, metric: str) -> dict[str, object]:
    rows = db.rows("SELECT unit, value, text FROM ncu_metrics WHERE trace_id = $t AND metric = $m",
                   {"t": t, "m": metric})
    assert len(rows) == 1, (metric, rows)
    return rows[0]


def test_detected(details_db: tuple[TraceDB, int]) -> None:
    assert detect(DETAILS) == "ncu-csv"


def test_kernel_row(details_db: tuple[TraceDB, int]) -> None:
    db, t = details_db
    rows = db.rows("SELECT * FROM ncu_kernels WHERE trace_id = $t", {"t": t})
    assert len(rows) == 1  # 58 rows, all of ID "0"
    r = rows[0]
    assert (r["ncu_id"], r["name"], r["device_id"], r["stream_id"]) == (0, GEMM, 0, 7)
    # "Block Size" "(384, 1, 1)", "Grid Size" "(9, 32, 1)" (Launch Statistics agrees: Block Size 384, Grid Size 288).
    assert (r["grid_x"], r["grid_y"], r["grid_z"], r["block_x"], r["block_y"], r["block_z"]) == (9, 32, 1, 384, 1, 1)


def test_metrics_named_as_on_the_raw_page(details_db: tuple[TraceDB, int]) -> None:
    db, t = details_db
    assert _metric(db, t, "gpu__time_duration.sum") == {"unit": "ns", "value": 406240.0, "text": "406240"}
    assert _metric(db, t, "launch__registers_per_thread")["value"] == 168.0
    assert _metric(db, t, "launch__sm_count") == {"unit": "SM", "value": 152.0, "text": "152"}
    assert _metric(db, t, "launch__occupancy_limit_registers")["value"] == 1.0
    assert _metric(db, t, "sm__maximum_warps_per_active_cycle_pct") == {"unit": "%", "value": 18.75, "text": "18.75"}
    assert _metric(db, t, "gpc__cycles_elapsed.avg.per_second")["unit"] == "hz"
    # SM Active Cycles appears in two sections (Speed Of Light, Workload Distribution) with one value: stored once.
    assert _metric(db, t, "sm__cycles_active.avg")["value"] == 462061.91
    # A display name the sections table does not map keeps its section.
    assert _metric(db, t, "Launch Statistics: Enabled TPC IDs") == {"unit": None, "value": None, "text": "all"}
    # 50 metric rows with a Metric Name, one duplicate, plus the two values derived from the imbalance rule.
    n = db.rows("SELECT count(*) AS n FROM ncu_metrics WHERE trace_id = $t", {"t": t})[0]["n"]
    assert n == 50 - 1 + 2


def test_reference_parse_agrees() -> None:
    """Every metric row of the file (plain csv), against the stored text and value."""
    text = DETAILS.read_text()
    rows = list(csv.reader(io.StringIO(text[text.index('"ID"'):])))
    header, data = rows[0], rows[1:]
    name_i, value_i = header.index("Metric Name"), header.index("Metric Value")
    metric_rows = [r for r in data if r[name_i]]
    assert len(metric_rows) == 50 and len(data) == 58  # 8 rule rows
    ingest = ncu_csv.read(DETAILS)
    stored = dict(zip(ingest.tables["ncu_metrics"]["metric"], ingest.tables["ncu_metrics"]["text"], strict=True))
    sec_i = header.index("Section Name")
    for r in metric_rows:
        assert stored[ncu_details.details_metric_name(r[sec_i], r[name_i])] == r[value_i]


def test_sm_imbalance_from_the_rule(details_db: tuple[TraceDB, int]) -> None:
    # WorkloadImbalance: "Maximum instance value is 6.23% above the average, while the minimum instance value is
    # 40.85% below the average" of Average SM Active Cycles 462061.91. The first percentage is of the maximum,
    # the second of the average (checked against the raw page in tests/test_ncu_h200_pair.py).
    db, t = details_db
    (r,) = ncu_sm_active.sm_active(db, t)
    assert r["sm_active_avg"] == 462061.91
    assert r["sm_active_max"] == pytest.approx(462061.91 / (1 - 0.0623))
    assert r["sm_active_min"] == pytest.approx(462061.91 * (1 - 0.4085))
    assert r["sm_idle_fraction"] == pytest.approx(0.0623)
    assert "WorkloadImbalance" in str(_metric(db, t, "sm__cycles_active.max")["text"])


@pytest.mark.parametrize(("unit", "value", "expected"), [
    ("usecond", 12.5, ("ns", 12500.0)),
    ("msecond", 1.0, ("ns", 1e6)),
    ("nsecond", 7.0, ("ns", 7.0)),
    ("ns", 7.0, ("ns", 7.0)),
    ("Gbyte/second", 2.5, ("byte/second", 2.5e9)),
    ("Kbyte", 3.0, ("byte", 3000.0)),
    ("cycle/nsecond", 1.98, ("hz", 1.98e9)),
    ("cycle/usecond", 1.0, ("hz", 1e6)),
    ("Ghz", 1.2, ("hz", 1.2e9)),
    ("hz", 5.0, ("hz", 5.0)),
    ("Mcycle", 2.0, ("cycle", 2e6)),
    ("%", 50.0, ("%", 50.0)),
    ("register/thread", 168.0, ("register/thread", 168.0)),
    ("", 3.0, (None, 3.0)),
    ("usecond", None, ("ns", None)),
])
def test_normalize_unit(unit: str, value: float | None, expected: tuple[str | None, float | None]) -> None:
    got = ncu_cells.normalize_unit(unit, value)
    assert got[0] == expected[0]
    assert got[1] == pytest.approx(expected[1]) if expected[1] is not None else got[1] is None


# ---------------------------------------------------------------------------------------------- both layouts agree
def _as_details(raw: Path, out: Path, units: bool = True) -> Path:
    """The shared raw page re-laid out as ncu's details page prints `--metrics` metrics (one row per metric)."""
    lines = raw.read_text().splitlines(keepends=True)
    start = next(i for i, x in enumerate(lines) if x.startswith('"ID"'))
    rows = list(csv.reader(lines[start:]))
    header, unit_row, data = rows[0], rows[1], rows[2:]
    ident = [c for c in DETAILS_HEADER[:11]]
    nvtx = [c for c in header if c.startswith(("thread Domain", "Id:Domain"))]
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(DETAILS_HEADER[:4] + nvtx + DETAILS_HEADER[4:])
    for r in data:
        for i, metric in enumerate(header):
            if metric in ident or metric in nvtx or not r[i]:
                continue
            w.writerow([r[header.index(c)] for c in DETAILS_HEADER[:4]] + [r[header.index(c)] for c in nvtx]
                       + [r[header.index(c)] for c in DETAILS_HEADER[4:11]]
                       + ["Command line profiler metrics", metric, unit_row[i] if units else "", r[i]])
    out.write_text("==PROF== Connected to process 1\n" + buf.getvalue())
    return out


def test_same_tables_from_both_layouts(h200: Path, tmp_path: Path) -> None:
    raw = h200 / "flashinfer_decode.ncu.csv"
    a, b = ncu_csv.read(raw), ncu_csv.read(_as_details(raw, tmp_path / "d.csv"))
    assert a.tables["ncu_kernels"] == b.tables["ncu_kernels"]
    key = ("ncu_id", "metric", "unit", "value", "text")
    rows_a = sorted(zip(*(a.tables["ncu_metrics"][k] for k in key), strict=True), key=str)
    rows_b = sorted(zip(*(b.tables["ncu_metrics"][k] for k in key), strict=True), key=str)
    assert rows_a == rows_b and len(rows_a) == 3003


def test_details_page_beside_a_trace(h200: Path, tmp_path: Path) -> None:
    """--ncu with a details-page CSV: the 11 kernels match the nsys export's as the raw page's do."""
    details = _as_details(h200 / "flashinfer_decode.ncu.csv", tmp_path / "d.csv")
    db, ids = load([h200 / "flashinfer_decode.sqlite"], ncu=[details], cache=False)
    rows = ncu_sm_active.sm_active(db, ids[0])
    assert len(rows) == 11 and all(r["kernel_id"] is not None for r in rows)
    raw_db, raw_ids = load([h200 / "flashinfer_decode.sqlite"], ncu=[h200 / "flashinfer_decode.ncu.csv"], cache=False)
    assert [(r["kernel_id"], r["sm_active_avg_over_max"]) for r in rows] == [
        (r["kernel_id"], r["sm_active_avg_over_max"]) for r in ncu_sm_active.sm_active(raw_db, raw_ids[0])]


def test_details_page_without_launch_dimensions(h200: Path, tmp_path: Path) -> None:
    """Older ncu details pages have no Block/Grid Size columns: kernels still match, by name, NVTX range and order."""
    details = _as_details(h200 / "flashinfer_decode.ncu.csv", tmp_path / "d.csv")
    text = details.read_text()
    rows = list(csv.reader(io.StringIO(text[text.index('"ID"'):])))
    drop = {rows[0].index("Block Size"), rows[0].index("Grid Size")}
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(
        [c for i, c in enumerate(r) if i not in drop] for r in rows)
    old = tmp_path / "old.csv"
    old.write_text(buf.getvalue())
    db, ids = load([h200 / "flashinfer_decode.sqlite"], ncu=[old], cache=False)
    got = db.rows("SELECT count(kernel_id) AS n, count(grid_x) AS g FROM ncu_kernels WHERE trace_id = $t",
                  {"t": ids[0]})[0]
    assert got == {"n": 11, "g": 0}


# ---------------------------------------------------------------------------------------------- damaged files
def test_truncated_details_page_keeps_the_rows_before_the_cut(tmp_path: Path) -> None:
    text = DETAILS.read_text()
    cut = tmp_path / "cut.csv"
    cut.write_text(text[: text.rindex("One or more L2 Slices")])  # inside the last rule row's quoted description
    ingest = ncu_csv.read(cut)
    assert ingest.tables["ncu_kernels"]["ncu_id"] == [0]
    assert "ends inside a quoted cell" in ingest.warnings[0]


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t.replace('"0","371693"', '"x","371693"', 1), "ID 'x' is not an integer"),
    (lambda t: t.replace('"0","371693","cublaslt_gemm"', '"","371693","cublaslt_gemm"', 1), "without an ID"),
    (lambda t: t.replace('"GPU Speed Of Light Throughput","DRAM Frequency","hz","3995313115.40",',
                         '"GPU Speed Of Light Throughput","DRAM Frequency"', 1), "cells, the header 20"),
])
def test_damaged_details_page_is_one_line_error(tmp_path: Path, edit: object, message: str) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(edit(DETAILS.read_text()))  # type: ignore[operator]
    with pytest.raises(FormatError) as info:
        ncu_csv.read(bad)
    assert str(info.value).startswith(str(bad)) and "\n" not in str(info.value) and message in str(info.value)
