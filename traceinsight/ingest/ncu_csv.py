"""Nsight Compute CSV exports (`ncu --csv`, details or raw page, [--nvtx]): per-kernel metrics, and their match
to trace kernels.

The details page (ncu's default) is one row per kernel and metric (see `read`). The raw page is one row per
profiled kernel: fixed identity columns ("ID", "Kernel Name", "Grid Size", the NVTX stack columns, ...) followed by
one column per metric. ncu prints `==PROF==`/`==WARNING==` lines (and the
application's own output) before the header, and the row after the header holds each metric's unit.

`read()` fills `ncu_kernels` (one row per kernel) and `ncu_metrics` (long form: one row per kernel and metric);
the lines come from ncu_lines, the cells are parsed by ncu_cells, the details page by ncu_details.
`ncu_match.match()` links each ncu kernel to the trace kernel it measured (same kernel, grid, block, NVTX range,
order); `ncu_sm_active.sm_active()` reads the measured per-SM load imbalance of each kernel.

A file cut short (a crashed or killed ncu, a full disk) keeps the kernels before the cut: ncu quotes every cell,
so a cut inside the last row leaves an unterminated quote or too few cells there, and only that row is dropped,
with a warning naming the line where the data ends.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from traceinsight.errors import FormatError
from traceinsight.ingest.base import Ingest
from traceinsight.ingest.limits import clip_name, max_name_chars
from traceinsight.ingest.ncu_cells import I32, I64, innermost_nvtx, int_cell, normalize_unit, parse_dim3, parse_number
from traceinsight.ingest.ncu_details import add_details_metric, add_imbalance
from traceinsight.ingest.ncu_lines import HEADER_PREFIX, ExportLines

PUSH_POP_PREFIX = "thread Domain:Push/Pop_Range"
START_STOP_PREFIX = "Id:Domain:Start/Stop_Range"
# Identity columns of the raw page; every other column is a metric.
IDENTITY_COLUMNS = frozenset(
    {
        "ID",
        "Process ID",
        "Process Name",
        "Host Name",
        "Kernel Name",
        "Context",
        "Stream",
        "Block Size",
        "Grid Size",
        "Device",
        "CC",
    }
)
# The details page (ncu --csv without --page raw): one row per kernel and metric, named for display.
_DETAILS_COLUMNS = {"Section Name", "Metric Name", "Metric Value"}
# Characters one CSV cell may hold (Python's csv module stops at 131,072 by default; kernel names with long
# template argument lists come close, and the name limit applies after reading).
_FIELD_CHARS = 1 << 26


def read(path: Path) -> Ingest:
    """Parse an Nsight Compute CSV export into `ncu_kernels` and `ncu_metrics` (long form).

    Both of ncu's layouts are read: the raw page (`ncu --csv --page raw`: one row per kernel, one column per metric,
    a units row) and the details page (`ncu --csv`, ncu's default: one row per kernel and metric, with "Section
    Name", "Metric Name", "Metric Unit", "Metric Value" and, in newer versions, rule columns). Details-page metrics
    are stored under their raw metric names where ncu's sections define them (`DETAILS_METRICS`), else as
    "<Section Name>: <Metric Name>". Units are normalized to base units (`normalize_unit`: ns, byte, byte/second,
    hz, unprefixed counts); `text` keeps the cell as ncu printed it.

    Empty metric cells (a metric not collected for that kernel) are left out of `ncu_metrics`; a cell that is
    not a number keeps its text with `value` NULL.
    """
    ingest = Ingest(format="ncu-csv")
    kernels = ingest.columns(
        "ncu_kernels",
        [
            "ncu_id",
            "name",
            "device_id",
            "stream_id",
            "grid_x",
            "grid_y",
            "grid_z",
            "block_x",
            "block_y",
            "block_z",
            "nvtx",
        ],
    )
    metrics = ingest.columns("ncu_metrics", ["ncu_id", "metric", "unit", "value", "text"])
    lines = ExportLines(path)
    reader = csv.reader(lines, strict=True)
    names_limit = max_name_chars()
    clipped = 0
    cut: str | None = None  # where a truncated file's data ends
    field_limit = csv.field_size_limit(max(csv.field_size_limit(), _FIELD_CHARS))
    try:
        try:
            header = next(reader, None)
        except csv.Error:
            if not lines.at_end():
                raise
            raise FormatError(f"{path}: Nsight Compute CSV cut short inside its header line") from None
        if header is None:
            raise FormatError(f"{path}: no Nsight Compute CSV header ({HEADER_PREFIX}...) found")
        details = _DETAILS_COLUMNS <= set(header)
        col = {name: i for i, name in enumerate(header)}
        for required in ("ID", "Kernel Name"):
            if required not in col:
                raise FormatError(f"{path}: Nsight Compute CSV without a {required!r} column")
        push_pop = next((i for i, n in enumerate(header) if n.startswith(PUSH_POP_PREFIX)), None)
        start_stop = next((i for i, n in enumerate(header) if n.startswith(START_STOP_PREFIX)), None)
        metric_cols = [
            i
            for i, n in enumerate(header)
            if n not in IDENTITY_COLUMNS and i not in (push_pop, start_stop) and n.strip()
        ]
        # The details page: the cells a metric row needs; newer ncu leaves a metric row's empty rule cells out.
        needed = max(col[c] for c in _DETAILS_COLUMNS | {"ID", "Kernel Name"}) + 1 if details else len(header)
        units = [""] * len(header)
        seen: set[int] = set()
        imbalance: dict[int, dict[str, float]] = {}  # details page: SM active cycles and the imbalance rule
        stored: set[tuple[int, str]] = set()  # details page: (kernel, metric) already stored
        while True:
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                if not lines.at_end():
                    raise
                cut = f"line {reader.line_num} ends inside a quoted cell ({exc})"
                break
            line = reader.line_num
            if len(row) != len(header) and not (details and needed <= len(row) < len(header)):
                if len(row) < len(header) and lines.at_end() and not lines.last.endswith("\n"):
                    cut = f"line {line} stops after {len(row)} of {len(header)} cells"
                    break
                raise FormatError(
                    f"{path}: line {line} has {len(row)} cells, the header {len(header)} (truncated or damaged CSV)"
                )
            row = row + [""] * (len(header) - len(row))
            if not row[col["ID"]].strip():
                if details:
                    raise FormatError(f"{path}: line {line}: a details-page row without an ID")
                units = row  # the units row: no ID, one unit per metric column
                continue
            try:
                ncu_id = int(row[col["ID"]])
            except ValueError:
                raise FormatError(f"{path}: line {line}: ID {row[col['ID']]!r} is not an integer") from None
            if not 0 <= ncu_id <= I32[1]:
                raise FormatError(f"{path}: line {line}: ID {ncu_id} is out of range (0 to {I32[1]})")
            if ncu_id not in seen:
                seen.add(ncu_id)
                clipped += _add_kernel(kernels, ncu_id, row, col, push_pop, start_stop, names_limit)
            if details:
                add_details_metric(metrics, imbalance, stored, ncu_id, row, col)
                continue
            for i in metric_cols:
                text = row[i]
                if not text.strip():
                    continue
                unit, value = normalize_unit(units[i], parse_number(text))
                metrics["ncu_id"].append(ncu_id)
                metrics["metric"].append(header[i])
                metrics["unit"].append(unit)
                metrics["value"].append(value)
                metrics["text"].append(text)
    except csv.Error as exc:
        raise FormatError(f"{path}: damaged Nsight Compute CSV near line {reader.line_num} ({exc})") from None
    finally:
        csv.field_size_limit(field_limit)
    if not kernels["ncu_id"]:
        if cut is not None:
            raise FormatError(f"{path}: Nsight Compute CSV cut short before its first kernel row ({cut})")
        raise FormatError(f"{path}: Nsight Compute CSV without any profiled kernel")
    add_imbalance(metrics, imbalance)
    if cut is not None:
        ingest.warnings.append(
            f"{path.name} is truncated: {cut}; read the {len(kernels['ncu_id'])} kernels before it "
            f"(the last is ID {kernels['ncu_id'][-1]})"
        )
    if clipped:
        ingest.warnings.append(
            f"{clipped} kernel or NVTX names longer than the limit were cut (TRACEINSIGHT_MAX_NAME_CHARS)"
        )
    return ingest


def _add_kernel(
    kernels: dict[str, list[Any]],
    ncu_id: int,
    row: list[str],
    col: dict[str, int],
    push_pop: int | None,
    start_stop: int | None,
    names_limit: int,
) -> int:
    """Append one `ncu_kernels` row; return how many names were clipped (0-2)."""
    clipped = 0
    name = row[col["Kernel Name"]]
    if len(name) > names_limit:
        name = clip_name(name, names_limit)
        clipped += 1
    grid = parse_dim3(row[col["Grid Size"]]) if "Grid Size" in col else None
    block = parse_dim3(row[col["Block Size"]]) if "Block Size" in col else None
    nvtx = innermost_nvtx(row[push_pop]) if push_pop is not None else None
    if nvtx is None and start_stop is not None:
        nvtx = innermost_nvtx(row[start_stop], start_stop=True)
    if nvtx is not None and len(nvtx) > names_limit:
        nvtx = clip_name(nvtx, names_limit)
        clipped += 1
    kernels["ncu_id"].append(ncu_id)
    kernels["name"].append(name)
    kernels["device_id"].append(int_cell(row, col.get("Device"), I32))
    kernels["stream_id"].append(int_cell(row, col.get("Stream"), I64))
    for axis, dims in (("grid", grid), ("block", block)):
        for k, v in zip("xyz", dims or (None, None, None), strict=True):
            kernels[f"{axis}_{k}"].append(v)
    kernels["nvtx"].append(nvtx)
    return clipped
