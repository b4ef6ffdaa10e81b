"""Fuzzing the Nsight Compute CSV reader (alone, and matched to the real Nsight Systems trace), and its reading
of exports cut short. Every input analyzes or fails with a one-line TraceInsightError."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzz_corpus import (
    NCU_REAL,
    NSYS_REAL,
    check_bytes,
    check_input,
    cut_ncu,
    fuzz_settings,
    ncu_csv,
    ncu_real_lines,
    scratch,
)
from hypothesis import given

from traceinsight.errors import FormatError
from traceinsight.ingest import ncu_csv as reader


@fuzz_settings(20)
@given(ncu_csv())
def test_generated_ncu_exports_analyze(case: tuple[bytes, list[str]]) -> None:
    data, _ = case
    n = data.count(b"\n") - 3  # one line per kernel after the ==PROF== line, the header and the units row
    out = check_bytes(data, "gen.ncu.csv")
    assert out.kind == "ok", out.message
    with scratch("gen.ncu.csv") as path:
        path.write_bytes(data)
        assert len(reader.read(path).tables["ncu_kernels"]["ncu_id"]) == n


@fuzz_settings(100)
@given(ncu_csv(mutate=True))
def test_mutated_ncu_exports_alone_and_matched(case: tuple[bytes, list[str]]) -> None:
    data, _ = case
    with scratch("mut.ncu.csv") as path:
        path.write_bytes(data)
        check_input(path)
        check_input(NSYS_REAL, ncu=[path])  # matched against the real trace's kernels


@fuzz_settings(60)
@given(cut_ncu())
def test_real_ncu_export_cut(case: tuple[bytes, str]) -> None:
    data, _ = case
    check_bytes(data, "cut.ncu.csv")


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cut.ncu.csv"
    path.write_text(text, encoding="utf-8")
    return path


def test_export_cut_inside_the_last_row_keeps_the_rows_before(tmp_path: Path) -> None:
    """The real export has 11 kernels (IDs 0-10) on lines 6-16; cut inside the last one's NVTX cell (an open
    quote), or after its 101st cell: the first 10 kernels are read, the warning names the line where data ends."""
    lines = ncu_real_lines()
    last = lines[-1]
    inside_quote = _write(tmp_path, "".join(lines[:-1]) + last[: last.index("dist=skew80")])
    ingest = reader.read(inside_quote)
    assert ingest.tables["ncu_kernels"]["ncu_id"] == list(range(10))
    assert ingest.warnings == [
        "cut.ncu.csv is truncated: line 13 ends inside a quoted cell (unexpected end of data); "
        "read the 10 kernels before it (the last is ID 9)"
    ]
    boundary = [i for i in range(len(last)) if last.startswith('","', i)][100]
    cells = _write(tmp_path, "".join(lines[:-1]) + last[: boundary + 1])
    assert reader.read(cells).warnings == [
        "cut.ncu.csv is truncated: line 13 stops after 101 of 287 cells; "
        "read the 10 kernels before it (the last is ID 9)"
    ]


def test_damage_that_is_not_a_cut_still_fails(tmp_path: Path) -> None:
    """A short row followed by more data (or by a newline) is damage, not truncation. (Line numbers count from
    the CSV header, ncu's ==PROF== lines left out, as the reader has always numbered them.)"""
    lines = ncu_real_lines()
    boundary = [i for i in range(len(lines[6])) if lines[6].startswith('","', i)][20]
    damaged = _write(tmp_path, "".join(lines[:6]) + lines[6][: boundary + 1] + "\n" + "".join(lines[7:]))
    with pytest.raises(FormatError, match=r"line 4 has 21 cells, the header 287"):
        reader.read(damaged)


def test_export_cut_before_the_first_kernel(tmp_path: Path) -> None:
    lines = ncu_real_lines()
    cut = _write(tmp_path, "".join(lines[:4]) + lines[4][:31])  # inside the units row (line 2 from the header)
    with pytest.raises(FormatError) as info:
        reader.read(cut)
    assert str(info.value) == (
        f"{cut}: Nsight Compute CSV cut short before its first kernel row (line 2 ends inside a quoted cell "
        "(unexpected end of data))"
    )


def test_huge_grid_and_device_cells_read_as_unknown(tmp_path: Path) -> None:
    """Cells beyond int32 (a grid of 2^31 CTAs, device 10^20) are NULL, not an overflow in the database."""
    text = NCU_REAL.read_text(encoding="utf-8")
    text = text.replace('"(288, 4, 1)"', '"(2147483648, 4, 1)"', 1).replace(
        '","0","9.0"', '","100000000000000000000","9.0"', 1
    )
    out = check_bytes(text.encode(), "big.ncu.csv")
    assert out.kind == "ok", out.message
    ingest = reader.read(_write(tmp_path, text))
    assert ingest.tables["ncu_kernels"]["grid_x"][0] is None and ingest.tables["ncu_kernels"]["device_id"][0] is None
