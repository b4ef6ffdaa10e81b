"""Nsight Compute CSV exports (`ncu --csv`, details or raw page, [--nvtx]): per-kernel metrics, and their match
to trace kernels.

The details page (ncu's default) is one row per kernel and metric (see `read`). The raw page is one row per
profiled kernel: fixed identity columns ("ID", "Kernel Name", "Grid Size", the NVTX stack columns, ...) followed by
one column per metric. ncu prints `==PROF==`/`==WARNING==` lines (and the
application's own output) before the header, and the row after the header holds each metric's unit.

`read()` fills `ncu_kernels` (one row per kernel) and `ncu_metrics` (long form: one row per kernel and metric).
`match()` links each ncu kernel to the trace kernel it measured (same kernel, grid, block, NVTX range, order).
`sm_active()` reads `sm__cycles_active.{min,avg,max}`: the measured per-SM load imbalance of each kernel.

A file cut short (a crashed or killed ncu, a full disk) keeps the kernels before the cut: ncu quotes every cell,
so a cut inside the last row leaves an unterminated quote or too few cells there, and only that row is dropped,
with a warning naming the line where the data ends.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from traceinsight.errors import FormatError
from traceinsight.ingest.base import Ingest
from traceinsight.ingest.limits import clip_name, max_name_chars
from traceinsight.ingest.sidecar import key_matches_sql
from traceinsight.ingest.store import TraceDB

HEADER_PREFIX = '"ID","Process ID","Process Name"'
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

_TOOL_LINE = re.compile(r"^==[A-Z]+==")
_DIM3 = re.compile(r"^\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)$")
# A number as ncu prints it: optional thousands separators ("1,020,054", "643,510.05"), decimals, exponent.
_NUMBER = re.compile(r"^[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][-+]?\d+)?$")
# One entry of an NVTX stack cell: `"Domain:Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"`.
_NVTX_ENTRY = re.compile(r'"([^"]*)"')
_NVTX_TRAILING_FIELDS = 6  # PL_Type, PL_Value, CLR_Type, Color, Msg_Type, Msg

SM_ACTIVE_METRICS = ("sm__cycles_active.min", "sm__cycles_active.avg", "sm__cycles_active.max")

# Value ranges of the normalized columns (INTEGER is int32, BIGINT int64).
_I32 = (-(2**31), 2**31 - 1)
_I64 = (-(2**63), 2**63 - 1)
# Characters one CSV cell may hold (Python's csv module stops at 131,072 by default; kernel names with long
# template argument lists come close, and the name limit applies after reading).
_FIELD_CHARS = 1 << 26


# ---------------------------------------------------------------------------------------------- cell parsers
def parse_number(text: str) -> float | None:
    """The float value of an ncu cell ("1,234.5" -> 1234.5), or None when it is not a number ("n/a", "")."""
    s = text.strip()
    if not s or s in {"+", "-", "."} or not _NUMBER.match(s) or not any(c.isdigit() for c in s):
        return None
    return float(s.replace(",", ""))


def parse_dim3(text: str) -> tuple[int, int, int] | None:
    """ "(288, 4, 1)" -> (288, 4, 1); None for an empty or malformed cell, or a size beyond int32."""
    m = _DIM3.match(text.strip())
    if not m:
        return None
    dims = (int(m[1]), int(m[2]), int(m[3]))
    return dims if all(d <= _I32[1] for d in dims) else None


def _entry_range_text(entry: str, start_stop: bool) -> str | None:
    """The range text of one NVTX stack entry, without domain, payload and colour fields."""
    head = entry.rsplit(":", _NVTX_TRAILING_FIELDS)[0] if entry.count(":") >= _NVTX_TRAILING_FIELDS + 1 else entry
    if start_stop and re.match(r"^\d+:", head):
        head = head.split(":", 1)[1]  # the range id
    text = head.split(":", 1)[1] if ":" in head else head  # the domain ("<default domain>" or a named one)
    text = text.strip()
    return text or None


def innermost_nvtx(cell: str, start_stop: bool = False) -> str | None:
    """The innermost range text of an ncu NVTX cell.

    Push/pop cells read `TID  "Domain:Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"  "..." `, the stack
    from outermost to innermost; the last entry is the innermost. Start/stop cells list the open ranges, each
    optionally prefixed by its range id; the last listed is taken.
    """
    entries = _NVTX_ENTRY.findall(cell)
    for entry in reversed(entries):
        text = _entry_range_text(entry, start_stop)
        if text is not None:
            return text
    return None


# ---------------------------------------------------------------------------------------------- reading
class _Lines:
    """The export's lines from the header on (see `_csv_lines`), able to say whether any line is left."""

    def __init__(self, path: Path) -> None:
        self._it = _csv_lines(path)
        self._next: str | None = None
        self.last = ""  # the last line handed out

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        if self._next is not None:
            line, self._next = self._next, None
        else:
            line = next(self._it)
        self.last = line
        return line

    def at_end(self) -> bool:
        """Whether every line was handed out."""
        if self._next is None:
            try:
                self._next = next(self._it)
            except StopIteration:
                return True
        return False


def _csv_lines(path: Path) -> Iterator[str]:
    """The lines of the export (plain, or gzip-compressed as `detect` accepts it) from the header on, without
    ncu's own `==PROF==`-style lines."""
    with path.open("rb") as probe:
        packed = probe.read(2) == b"\x1f\x8b"
    try:
        with _gunzipped_lines(path) if packed else path.open("r", encoding="utf-8-sig", newline="") as fh:
            started = False
            for line in fh:
                if not started:
                    if line.startswith(HEADER_PREFIX):
                        started = True
                        yield line
                    continue
                if _TOOL_LINE.match(line) or not line.strip():
                    continue
                yield line
    except UnicodeDecodeError as exc:
        raise FormatError(f"{path}: Nsight Compute CSV is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


@contextlib.contextmanager
def _gunzipped_lines(path: Path) -> Iterator[Iterator[str]]:
    """The lines (each with its '\n') of a gzip-compressed export, decompressed under the limits every gzip input
    has (json_stream.byte_chunks: size and ratio, so a gzip bomb is a one-line LimitError; a damaged or cut stream
    a one-line FormatError)."""
    from traceinsight.ingest.json_stream import Repairs, byte_chunks

    def lines() -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8")()
        pieces: list[str] = []  # of the line not yet ended (kept apart: a long line is joined once)
        for chunk in byte_chunks(path, Repairs()):
            parts = decoder.decode(chunk).split("\n")
            if len(parts) > 1:
                yield "".join([*pieces, parts[0], "\n"])
                yield from (line + "\n" for line in parts[1:-1])
                pieces = []
            pieces.append(parts[-1])
        pieces.append(decoder.decode(b"", final=True))
        if last := "".join(pieces):
            yield last

    yield lines()


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
    lines = _Lines(path)
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
            if not 0 <= ncu_id <= _I32[1]:
                raise FormatError(f"{path}: line {line}: ID {ncu_id} is out of range (0 to {_I32[1]})")
            if ncu_id not in seen:
                seen.add(ncu_id)
                clipped += _add_kernel(kernels, ncu_id, row, col, push_pop, start_stop, names_limit)
            if details:
                _add_details_metric(metrics, imbalance, stored, ncu_id, row, col)
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
    _add_imbalance(metrics, imbalance)
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
    kernels["device_id"].append(_int_or_none(row, col.get("Device"), _I32))
    kernels["stream_id"].append(_int_or_none(row, col.get("Stream"), _I64))
    for axis, dims in (("grid", grid), ("block", block)):
        for k, v in zip("xyz", dims or (None, None, None), strict=True):
            kernels[f"{axis}_{k}"].append(v)
    kernels["nvtx"].append(nvtx)
    return clipped


# ---------------------------------------------------------------------------------------------- details page
# Details-page metric (section, display name) -> the raw metric ncu's section files compute it from (ncu 2023-2025
# sections SpeedOfLight, LaunchStats, Occupancy, WorkloadDistribution; the raw names are those of the raw page,
# e.g. ../shared/traces/h200/flashinfer_decode.ncu.csv). A display name not listed is kept as "<section>: <name>".
_SOL = "GPU Speed Of Light Throughput"
_LAUNCH = "Launch Statistics"
_OCC = "Occupancy"
_WLD = "GPU and Memory Workload Distribution"
DETAILS_METRICS: dict[tuple[str, str], str] = {
    (_SOL, "Duration"): "gpu__time_duration.sum",
    (_SOL, "Elapsed Cycles"): "gpc__cycles_elapsed.max",
    (_SOL, "SM Active Cycles"): "sm__cycles_active.avg",
    (_SOL, "SM Frequency"): "gpc__cycles_elapsed.avg.per_second",
    (_SOL, "DRAM Frequency"): "dram__cycles_elapsed.avg.per_second",
    (_SOL, "Memory Throughput"): "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    (_SOL, "DRAM Throughput"): "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    (_SOL, "L1/TEX Cache Throughput"): "l1tex__throughput.avg.pct_of_peak_sustained_active",
    (_SOL, "L2 Cache Throughput"): "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    (_SOL, "Compute (SM) Throughput"): "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    (_LAUNCH, "Block Size"): "launch__block_size",
    (_LAUNCH, "Grid Size"): "launch__grid_size",
    (_LAUNCH, "Registers Per Thread"): "launch__registers_per_thread",
    (_LAUNCH, "Shared Memory Configuration Size"): "launch__shared_mem_config_size",
    (_LAUNCH, "Driver Shared Memory Per Block"): "launch__shared_mem_per_block_driver",
    (_LAUNCH, "Dynamic Shared Memory Per Block"): "launch__shared_mem_per_block_dynamic",
    (_LAUNCH, "Static Shared Memory Per Block"): "launch__shared_mem_per_block_static",
    (_LAUNCH, "Threads"): "launch__thread_count",
    (_LAUNCH, "Waves Per SM"): "launch__waves_per_multiprocessor",
    (_LAUNCH, "# SMs"): "launch__sm_count",
    (_LAUNCH, "# TPCs"): "launch__tpc_count",
    (_LAUNCH, "Stack Size"): "launch__stack_size",
    (_LAUNCH, "Cluster Size"): "launch__cluster_size",
    (_LAUNCH, "Uses Green Context"): "launch__uses_green_context",
    (_LAUNCH, "Function Cache Configuration"): "launch__func_cache_config",
    (_LAUNCH, "Cluster Scheduling Policy"): "launch__cluster_scheduling_policy",
    (_OCC, "Block Limit SM"): "launch__occupancy_limit_blocks",
    (_OCC, "Block Limit Registers"): "launch__occupancy_limit_registers",
    (_OCC, "Block Limit Shared Mem"): "launch__occupancy_limit_shared_mem",
    (_OCC, "Block Limit Warps"): "launch__occupancy_limit_warps",
    (_OCC, "Block Limit Barriers"): "launch__occupancy_limit_barriers",
    (_OCC, "Max Active Clusters"): "launch__cluster_max_active",
    (_OCC, "Max Cluster Size"): "launch__cluster_max_potential_size",
    (_OCC, "Cluster Occupancy"): "launch__occupancy_cluster_pct",
    (_OCC, "Theoretical Active Warps per SM"): "sm__maximum_warps_avg_per_active_cycle",
    (_OCC, "Theoretical Occupancy"): "sm__maximum_warps_per_active_cycle_pct",
    (_OCC, "Achieved Occupancy"): "sm__warps_active.avg.pct_of_peak_sustained_active",
    (_OCC, "Achieved Active Warps Per SM"): "sm__warps_active.avg.per_cycle_active",
    (_WLD, "Average SM Active Cycles"): "sm__cycles_active.avg",
    (_WLD, "Total SM Elapsed Cycles"): "sm__cycles_elapsed.sum",
    (_WLD, "Average SMSP Active Cycles"): "smsp__cycles_active.avg",
    (_WLD, "Total SMSP Elapsed Cycles"): "smsp__cycles_elapsed.sum",
    (_WLD, "Average L1 Active Cycles"): "l1tex__cycles_active.avg",
    (_WLD, "Total L1 Elapsed Cycles"): "l1tex__cycles_elapsed.sum",
    (_WLD, "Average L2 Active Cycles"): "lts__cycles_active.avg",
    (_WLD, "Total L2 Elapsed Cycles"): "lts__cycles_elapsed.sum",
    (_WLD, "Average DRAM Active Cycles"): "dram__cycles_active.avg",
    (_WLD, "Total DRAM Elapsed Cycles"): "dram__cycles_elapsed.sum",
}
_RAW_METRIC = re.compile(r"^[a-z0-9]+__[A-Za-z0-9_.]+$")  # `--metrics` rows carry the raw name itself
# The WorkloadImbalance rule of the WorkloadDistribution section: "One or more SMs have a much lower number of
# active cycles than the average number of active cycles. Maximum instance value is 6.23% above the average, while
# the minimum instance value is 40.85% below the average."
_IMBALANCE = re.compile(
    r"One or more SMs have .*?Maximum instance value is ([\d.]+)% above the average, while the minimum instance "
    r"value is ([\d.]+)% below the average"
)


def details_metric_name(section: str, name: str) -> str:
    """The raw metric name of a details-page row, or "<section>: <name>" where ncu's sections do not say."""
    if _RAW_METRIC.match(name):
        return name
    return DETAILS_METRICS.get((section, name), f"{section}: {name}")


def _add_details_metric(
    metrics: dict[str, list[Any]],
    imbalance: dict[int, dict[str, float]],
    stored: set[tuple[int, str]],
    ncu_id: int,
    row: list[str],
    col: dict[str, int],
) -> None:
    """One details-page row: a metric, or a rule result (only the SM workload-imbalance rule is read)."""
    section, name, text = row[col["Section Name"]], row[col["Metric Name"]], row[col["Metric Value"]]
    if not name.strip():
        rule = col.get("Rule Description")
        m = _IMBALANCE.search(row[rule]) if rule is not None else None
        if m:
            imbalance.setdefault(ncu_id, {}).update(above=float(m[1]), below=float(m[2]))
        return
    if not text.strip():
        return
    metric = details_metric_name(section, name)
    if (ncu_id, metric) in stored:
        return  # the same metric shown in two sections (SM Active Cycles: Speed Of Light and Workload Distribution)
    stored.add((ncu_id, metric))
    unit, value = normalize_unit(row[col["Metric Unit"]] if "Metric Unit" in col else "", parse_number(text))
    metrics["ncu_id"].append(ncu_id)
    metrics["metric"].append(metric)
    metrics["unit"].append(unit)
    metrics["value"].append(value)
    metrics["text"].append(text)
    if metric == "sm__cycles_active.avg" and value is not None:
        imbalance.setdefault(ncu_id, {})["avg"] = value


def _add_imbalance(metrics: dict[str, list[Any]], imbalance: dict[int, dict[str, float]]) -> None:
    """sm__cycles_active.min/max from the WorkloadImbalance rule's percentages and the average SM active cycles.

    ncu's two percentages have different bases: "maximum instance value is A% above the average" is
    (max - avg) / max, "minimum ... B% below the average" is (avg - min) / avg. So max = avg / (1 - A/100) and
    min = avg * (1 - B/100). Checked on the H200 capture of one FlashInfer sweep on both pages
    (tests/data/h200_ncu/): a decode launch with average 945,320 cycles and "93.01% above" has max 13,523,892 by
    this reading, the raw page of the same case 13,522,445 (avg * 1.9301 would give 1,824,562); an FA2 launch,
    1,759,293 vs 1,759,620.
    The rule reports them only where ncu's rule fires, which is not every imbalanced kernel (in that capture it
    did not fire for the most imbalanced decode launch, avg/max 0.035 on the raw page); elsewhere min and max stay
    unknown (not invented): capture `--metrics sm__cycles_active.min,sm__cycles_active.max` beside the sections
    for every kernel. Raw-page and `--metrics` values win: nothing is added for a kernel that already has them.
    """
    have = {(i, m) for i, m in zip(metrics["ncu_id"], metrics["metric"], strict=True)}
    for ncu_id, d in imbalance.items():
        if "avg" not in d or "above" not in d or not d["above"] < 100:
            continue
        for metric, value, how in (
            ("sm__cycles_active.max", d["avg"] / (1 - d["above"] / 100), f"+{d['above']}% of the maximum"),
            ("sm__cycles_active.min", d["avg"] * (1 - d["below"] / 100), f"-{d['below']}%"),
        ):
            if (ncu_id, metric) in have:
                continue
            metrics["ncu_id"].append(ncu_id)
            metrics["metric"].append(metric)
            metrics["unit"].append("cycle")
            metrics["value"].append(value)
            metrics["text"].append(f"average SM active cycles {how} (WorkloadImbalance rule)")


# ncu's unit spellings (auto-scaled on the details page unless --print-units base) -> (base unit, factor).
_TIME = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}
_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_UNIT = re.compile(r"^([KMGTP]?)(byte|cycle|inst|warp|sector|request|thread|block|hz|Hz)(/second|/s)?$")
_PER_TIME = re.compile(r"^(cycle|inst|byte)/(nsecond|usecond|msecond|second|ns|us|ms|s)$")


def normalize_unit(unit: str, value: float | None) -> tuple[str | None, float | None]:
    """(base unit, value in it): "usecond" 12.5 -> ("ns", 12500.0); "Gbyte/second" -> "byte/second"; "Ghz",
    "cycle/nsecond" -> "hz"; "Kbyte" -> "byte". Units it does not know ("%", "register/thread") are kept."""
    u = unit.strip()
    if not u:
        return None, value
    if u in _TIME:
        return "ns", value * _TIME[u] if value is not None else None
    m = _PER_TIME.match(u)
    if m:
        per = _TIME[m[2]] / 1e9  # seconds per unit of time
        base = "hz" if m[1] == "cycle" else f"{m[1]}/second"
        return base, value / per if value is not None else None
    m = _UNIT.match(u)
    if m:
        base = m[2].lower() if m[2] in ("hz", "Hz") else m[2]
        base = base + "/second" if m[3] else base
        return base, value * _PREFIX[m[1]] if value is not None else None
    return u, value


def _int_or_none(row: list[str], index: int | None, bounds: tuple[int, int] = _I64) -> int | None:
    """The integer in cell `index` when it is one within `bounds`, else None."""
    if index is None:
        return None
    value = parse_number(row[index])
    if value is None or not value.is_integer() or not bounds[0] <= value <= bounds[1]:
        return None
    return int(value)


# ---------------------------------------------------------------------------------------------- matching
def name_key_sql(column: str) -> str:
    """A DuckDB expression turning a demangled kernel name into a key that ncu, nsys and Kineto agree on.

    The three tools print the same kernel differently: nsys `flashinfer::K<(unsigned int)2, (bool)0>(T9)`,
    Kineto `flashinfer::K<2u, false>(Params)`, ncu `K<2, 0>(T9)`. The key drops the `void ` return type, C-style
    casts before numbers, integer suffixes (`2u`), namespace qualifiers and the parameter list, writes
    `false`/`true` as 0/1 and removes whitespace: `K<2,0>` for all three.
    """
    e = column
    e = rf"regexp_replace({e}, '^void\s+', '')"
    e = rf"regexp_replace({e}, '\((?:[A-Za-z_][A-Za-z0-9_:]*\s*)+\)\s*(-?[0-9])', '\1', 'g')"
    e = rf"regexp_replace({e}, '\b([0-9]+)(?:[uU][lL]{{0,2}}|[lL]{{1,2}}[uU]?)\b', '\1', 'g')"
    e = rf"regexp_replace({e}, '\bfalse\b', '0', 'g')"
    e = rf"regexp_replace({e}, '\btrue\b', '1', 'g')"
    e = rf"regexp_replace({e}, '(?:<unnamed>|\(anonymous namespace\))::', '', 'g')"
    e = rf"regexp_replace({e}, '[A-Za-z_][A-Za-z0-9_]*::', '', 'g')"
    e = rf"regexp_replace({e}, '\([^()]*\)\s*$', '')"
    return rf"regexp_replace({e}, '\s+', '', 'g')"


_RANGE_KINDS = ("nvtx", "annotation")


def match(db: TraceDB, trace_id: int) -> int:
    """Set `ncu_kernels.kernel_id` for the ncu rows attached to `trace_id`; return how many were matched.

    A key is (kernel name as `name_key_sql`, grid, block; grid and block only when the export has them) plus, when
    the ncu rows carry NVTX text and the trace has CPU ranges of kind 'nvtx'/'annotation', the NVTX text: for an ncu
    kernel its innermost range, for a trace kernel its innermost enclosing range, the latest-starting CPU range (on
    the launching thread when both threads are known) whose [start, end] contains the kernel's launch
    (`launches.start_ns` via correlation id, else the kernel's start). The texts must be equal; failing that, a
    trace range whose name holds every token of an ncu text (`sidecar.key_matches`: "decode tc=0 dist=uniform bs=32
    step=0" for "tc=0 dist=uniform bs=32") counts as that text, the ncu text with the most tokens winning. The k-th
    ncu kernel of a key (in ncu ID order) is matched to the k-th trace kernel of that key (in start order).
    """
    params = {"t": trace_id}
    db.sql("UPDATE ncu_kernels SET kernel_id = NULL WHERE trace_id = $t", params)
    use_nvtx = db.rows(
        "SELECT (SELECT count(*) FROM ncu_kernels WHERE trace_id = $t AND nvtx IS NOT NULL) > 0 "
        f"AND (SELECT count(*) FROM ranges WHERE trace_id = $t AND side = 'cpu' AND kind IN {_RANGE_KINDS}) > 0 "
        "AS use_nvtx",
        params,
    )[0]["use_nvtx"]
    nvtx_ncu = "n.nvtx" if use_nvtx else "NULL"
    nvtx_trace = "e.nvtx" if use_nvtx else "NULL"
    # Launch dimensions take part when the export has them (details pages of ncu before 2023 lack "Grid Size").
    use_dims = db.rows(
        "SELECT count(*) > 0 AS d FROM ncu_kernels WHERE trace_id = $t AND grid_x IS NOT NULL", params
    )[0]["d"]
    dims = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"] if use_dims else []
    part_t = ", ".join(["nk", *dims, "nv"])
    part_n = ", ".join([name_key_sql("n.name"), *(f"n.{d}" for d in dims), nvtx_ncu])
    same_dims = "".join(f" AND c.{d} IS NOT DISTINCT FROM t.{d}" for d in dims)
    db.sql(
        f"""
        WITH launch AS (
            SELECT k.kernel_id, k.name, k.start_ns, k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z,
                   coalesce(l.start_ns, k.start_ns) AS launch_ns, l.thread_id
            FROM kernels k
            LEFT JOIN (SELECT correlation_id, any_value(start_ns) AS start_ns, any_value(thread_id) AS thread_id
                       FROM launches WHERE trace_id = $t GROUP BY correlation_id) l
              ON l.correlation_id = k.correlation_id
            WHERE k.trace_id = $t
        ),
        enclosing AS (
            SELECT a.kernel_id, arg_max(r.name, struct_pack(s := r.start_ns, e := -r.end_ns)) AS nvtx
            FROM launch a
            JOIN ranges r
              ON r.trace_id = $t AND r.side = 'cpu' AND r.kind IN {_RANGE_KINDS}
             AND r.start_ns <= a.launch_ns AND a.launch_ns <= r.end_ns
             AND (r.thread_id IS NULL OR a.thread_id IS NULL OR r.thread_id = a.thread_id)
            WHERE {"true" if use_nvtx else "false"}
            GROUP BY a.kernel_id
        ),
        ncu_texts AS (
            SELECT DISTINCT nvtx AS txt FROM ncu_kernels WHERE trace_id = $t AND nvtx IS NOT NULL
        ),
        range_names AS (SELECT DISTINCT nvtx FROM enclosing),
        name_map AS (  -- each enclosing range name -> the ncu NVTX text it stands for (per name, not per kernel)
            SELECT g.nvtx,
                   coalesce(arg_max(c.txt, struct_pack(same := c.txt = g.nvtx,
                                                       ntok := len(regexp_split_to_array(trim(c.txt), '\\s+')),
                                                       txt := c.txt)),
                            g.nvtx) AS label
            FROM range_names g
            LEFT JOIN ncu_texts c ON c.txt = g.nvtx OR {key_matches_sql("c.txt", "g.nvtx")}
            GROUP BY g.nvtx
        ),
        labelled AS (
            SELECT e.kernel_id, m.label AS nvtx FROM enclosing e JOIN name_map m USING (nvtx)
        ),
        trace_side AS (
            SELECT a.kernel_id, {name_key_sql("a.name")} AS nk, a.grid_x, a.grid_y, a.grid_z,
                   a.block_x, a.block_y, a.block_z, {nvtx_trace} AS nv, a.start_ns
            FROM launch a LEFT JOIN labelled e USING (kernel_id)
        ),
        trace_ranked AS (
            SELECT *, row_number() OVER (PARTITION BY {part_t} ORDER BY start_ns, kernel_id) AS k
            FROM trace_side
        ),
        ncu_ranked AS (
            SELECT n.ncu_id, {name_key_sql("n.name")} AS nk, n.grid_x, n.grid_y, n.grid_z,
                   n.block_x, n.block_y, n.block_z, {nvtx_ncu} AS nv,
                   row_number() OVER (PARTITION BY {part_n} ORDER BY n.ncu_id) AS k
            FROM ncu_kernels n WHERE n.trace_id = $t
        ),
        pairs AS (
            SELECT c.ncu_id, t.kernel_id
            FROM ncu_ranked c JOIN trace_ranked t
              ON c.nk = t.nk AND c.k = t.k{same_dims}
             AND c.nv IS NOT DISTINCT FROM t.nv
        )
        UPDATE ncu_kernels SET kernel_id = pairs.kernel_id
        FROM pairs
        WHERE ncu_kernels.trace_id = $t AND ncu_kernels.ncu_id = pairs.ncu_id
        """,
        params,
    )
    row = db.rows("SELECT count(kernel_id) AS n FROM ncu_kernels WHERE trace_id = $t", params)
    return int(row[0]["n"])


# ---------------------------------------------------------------------------------------------- summaries
def sm_active(db: TraceDB, trace_id: int) -> list[dict[str, Any]]:
    """Per ncu kernel of `trace_id`, in ncu ID order: the measured SM load balance.

    Keys: ncu_id, name, nvtx, grid (x, y, z), kernel_id (matched trace kernel or None), sm_active_min/avg/max
    (cycles an SM was active during the kernel: least busy SM, mean over SMs, busiest SM), sm_active_avg_over_max
    (1.0 = perfectly balanced) and sm_idle_fraction = 1 - avg/max (share of the busiest SM's time the average
    SM sat idle). Values are None when the export lacks the metric.
    """
    rows = db.rows(
        """
        SELECT n.ncu_id, n.name, n.nvtx, n.grid_x, n.grid_y, n.grid_z, n.kernel_id,
               max(m.value) FILTER (WHERE m.metric = 'sm__cycles_active.min') AS sm_active_min,
               max(m.value) FILTER (WHERE m.metric = 'sm__cycles_active.avg') AS sm_active_avg,
               max(m.value) FILTER (WHERE m.metric = 'sm__cycles_active.max') AS sm_active_max
        FROM ncu_kernels n
        LEFT JOIN ncu_metrics m
          ON m.trace_id = n.trace_id AND m.ncu_id = n.ncu_id AND list_contains($metrics, m.metric)
        WHERE n.trace_id = $t
        GROUP BY ALL
        ORDER BY n.ncu_id
        """,
        {"t": trace_id, "metrics": list(SM_ACTIVE_METRICS)},
    )
    out = []
    for r in rows:
        avg, mx = r["sm_active_avg"], r["sm_active_max"]
        ratio = avg / mx if avg is not None and mx else None
        out.append(
            {
                "ncu_id": r["ncu_id"],
                "name": r["name"],
                "nvtx": r["nvtx"],
                "grid": (r["grid_x"], r["grid_y"], r["grid_z"]),
                "kernel_id": r["kernel_id"],
                "sm_active_min": r["sm_active_min"],
                "sm_active_avg": avg,
                "sm_active_max": mx,
                "sm_active_avg_over_max": ratio,
                "sm_idle_fraction": 1.0 - ratio if ratio is not None else None,
            }
        )
    return out
