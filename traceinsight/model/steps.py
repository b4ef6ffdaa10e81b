"""Group a trace's kernels into decode steps and decide, per attention launch, whether split-KV was on.

A step is, in order of preference:
1. an annotation / NVTX / profiler-step range that enclosed the attention launches (CPU ranges match the
   launching call on the same thread; Kineto's GPU-side annotations match the kernel's own time). Each
   attention kernel takes the *outermost* such range, ignoring wrappers that hold more than half of all
   attention launches of the trace (a whole-run range is not a step), unless `step_pattern` picks ranges
   by name;
2. when no attention launch of the trace has a range around it, one attention launch together with its
   merge/combine (and prepare) kernels. When ranges do define steps, attention launches outside all of them
   (warm-ups, planning runs) are not steps: `group_steps` returns them apart as unassigned launches.

Split-KV of a launch comes from the trace alone, by the rules of model/split_signal.toml: backends that split
through a separate merge/combine kernel are "on" exactly when such a kernel follows the launch on the same stream
within the step (refined by the grid axis that counts the KV parts, where a rule names one and the trace has the
grid); kernels that never split are "off"; others (and those whose merge kernel runs after every launch) are
unknown (None).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import re
import weakref
from array import array
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from operator import attrgetter
from typing import Any

import numpy as np
import pyarrow as pa

from traceinsight import labels
from traceinsight.errors import FormatError
from traceinsight.ingest.arrow_numpy import encode, ints, numbers, valid
from traceinsight.ingest.store import TraceDB
from traceinsight.model import engine_steps, iterations
from traceinsight.model.kernel_columns import Kernel as Kernel
from traceinsight.model.kernel_columns import KernelViews, LabelFields
from traceinsight.model.kernel_table import ensure_labels
from traceinsight.model.phases import MIXED, mixed_from_tiles, tile_padding
from traceinsight.model.row_chunks import CHUNK, NULL, chunked, gather
from traceinsight.model.toml_tables import versioned_tables
from traceinsight.queries import sql

ATTENTION = "attention"
MERGE = "merge"
PREPARE = "prepare"

# How each backend shows split-KV in a trace: data, model/split_signal.toml (its header says what the fields mean).
SPLIT_SIGNALS = ("merge", "never", "always")
_SPLIT_KEYS = {"backend", "kernel", "signal", "parts", "parts_note", "source"}


@dataclass(frozen=True, slots=True)
class SplitRule:
    """One rule of split_signal.toml: how launches of `backend` (whose full name `kernel` matches) show split-KV."""

    backend: str
    kernel: re.Pattern[str] | None
    signal: str  # 'merge' | 'never' | 'always'
    parts: str | None  # the grid axis counting KV parts when a merge kernel follows: 'x' | 'y' | 'z'
    parts_note: str
    source: str


def parse_split_rules(text: str, where: str = "split_signal.toml") -> tuple[SplitRule, ...]:
    """Validate split_signal.toml's text; a mistake is a one-line FormatError naming `where` and the rule."""
    rules = []
    for i, raw in enumerate(versioned_tables(text, where, "rule")):
        at = f"{where}: rule {i + 1}"
        if not isinstance(raw, dict) or set(raw) - _SPLIT_KEYS or not {"backend", "signal", "source"} <= set(raw):
            raise FormatError(f"{at}: keys must be backend, signal, source and optionally kernel, parts, parts_note")
        if not all(isinstance(v, str) and v for v in raw.values()):
            raise FormatError(f"{at}: every value must be a non-empty string")
        if raw["signal"] not in SPLIT_SIGNALS:
            raise FormatError(f"{at}: signal {raw['signal']!r} is not one of {', '.join(SPLIT_SIGNALS)}")
        if raw.get("parts", "x") not in ("x", "y", "z") or ("parts" in raw) != ("parts_note" in raw):
            raise FormatError(f"{at}: parts must be x, y or z, given together with parts_note")
        try:
            kernel = re.compile(raw["kernel"]) if "kernel" in raw else None
        except re.error as exc:
            raise FormatError(f"{at}: kernel {raw['kernel']!r} is not a regex: {exc}") from None
        rules.append(SplitRule(raw["backend"], kernel, raw["signal"], raw.get("parts"), raw.get("parts_note", ""),
                               raw["source"]))
    return tuple(rules)


@functools.cache
def split_rules() -> tuple[SplitRule, ...]:
    """The built-in rules (model/split_signal.toml)."""
    text = resources.files("traceinsight.model").joinpath("split_signal.toml").read_text(encoding="utf-8")
    return parse_split_rules(text)


def split_rule(name: str, backend: str | None, rules: tuple[SplitRule, ...] | None = None) -> SplitRule | None:
    """The first rule for an attention kernel of this full name and label backend, or None (split unknown)."""
    for rule in split_rules() if rules is None else rules:
        if rule.backend == backend and (rule.kernel is None or rule.kernel.search(name)):
            return rule
    return None


def split_params(names: list[tuple[str, str | None, str]], rules: tuple[SplitRule, ...] | None = None,
                 ) -> dict[str, list[str]]:
    """step_launches.sql's split parameters for these attention kernels ((full name, backend, short name)
    triples): parallel lists, one entry per name that a rule covers. The subject is what the evidence names: the
    backend for a backend-wide rule, the kernel for a kernel rule."""
    out: dict[str, list[str]] = {k: [] for k in ("split_names", "split_signals", "split_axes", "split_notes",
                                                 "split_subjects")}
    for name, backend, kernel in names:
        rule = split_rule(name, backend, rules)
        if rule is None:
            continue
        out["split_names"].append(name)
        out["split_signals"].append(rule.signal)
        out["split_axes"].append(rule.parts or "")
        out["split_notes"].append(rule.parts_note)
        out["split_subjects"].append(f"the {backend} backend" if rule.kernel is None
                                     else f"{kernel} ({backend})")
    return out


def attention_split_params(db: TraceDB) -> dict[str, list[str]]:
    """split_params for every attention kernel name the database has labelled."""
    rows = db.rows("SELECT name, backend, kernel FROM kernel_labels WHERE family = 'attention' ORDER BY name")
    return split_params([(r["name"], r["backend"], r["kernel"]) for r in rows])


# Requests one CTA of FA3's prepare_varlen_num_blocks kernel handles (its grid is ceil(B / this)); with more than
# one CTA no request is split (flash_prepare_scheduler.cu, PREPARE_VARLEN_MAX_BATCHES_1CTA).
FA3_CAP_PER_PREPARE_CTA = 992

# Rows of step_launches.sql turned into objects at a time (not the whole result as one Arrow table).
LAUNCH_BATCH_ROWS = 65_536

# A range holding more than this share of all attention launches is a wrapper, not a step.
WRAPPER_SHARE = 0.5


@dataclass(slots=True)
class Launch:
    """An attention kernel launch and the merge/prepare kernels that belong to it."""

    attention: Kernel
    # Tuples, empty by default: a list each (two per launch, most of them empty) held 20 MB per 1M kernels.
    merges: Sequence[Kernel] = ()
    prepares: Sequence[Kernel] = ()
    phase: str = "unknown"
    phase_evidence: str = ""
    split_kv: bool | None = None
    split_evidence: str = ""
    tiles: dict[str, Any] | None = None  # query-tile padding of a tensor-core launch (model.phases.tile_padding)

    @property
    def dur_ns(self) -> int:
        """Attention kernel time plus its merge and prepare kernels (ns). A loop, not sum() of generators: asked of
        every launch by each step's attention_ns (10^6 launches), mostly with no merge or prepare kernel."""
        total = self.attention.dur_ns
        for k in self.merges:
            total += k.dur_ns
        for k in self.prepares:
            total += k.dur_ns
        return total


class StepTimes:
    """Up to row_chunks.CHUNK steps' integers, int64 each: their times (start_ns, end_ns, range_start_ns,
    range_end_ns; NO_TIME for no range), key and range_id (NO_TIME for None)."""

    __slots__ = ("end_ns", "key", "range_end_ns", "range_id", "range_start_ns", "start_ns")

    def __init__(self, start_ns: array[int], end_ns: array[int], range_start_ns: array[int],
                 range_end_ns: array[int], key: array[int], range_id: array[int]) -> None:
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.range_start_ns = range_start_ns
        self.range_end_ns = range_end_ns
        self.key = key
        self.range_id = range_id


# A range time of None in StepTimes.
NO_TIME = NULL
TIME_FIELDS = ("start_ns", "end_ns", "range_start_ns", "range_end_ns")
# StepTimes' columns, in its constructor's order.
ROW_FIELDS = (*TIME_FIELDS, "key", "range_id")
# Step's fields, in its constructor's order (its repr and equality).
STEP_FIELDS = ("index", "name", "source", "range_id", "start_ns", "end_ns", "kernel_count", "launches", "key",
               "range_start_ns", "range_end_ns", "range_side", "breakdown", "evidence", "engine")


class Step:
    """A decode step. Its four times, key and range id are a row of int64 columns (`StepTimes`, shared by up to
    row_chunks.CHUNK steps: `_t`, its row `_i`), read as Python ints: an int object each was ~32 bytes of each
    step, and a long trace has 10^6 steps (its index stays a slot: the rules and tables read it of every launch).
    Its source, evidence and range side are class attributes of the subclass for those three (`step_class`): a
    trace's steps have one or a few. `group_steps` gives each its launches as a tuple (a list was ~13 bytes more a
    step)."""

    __slots__ = ("_i", "_t", "breakdown", "engine", "index", "kernel_count", "launches", "name")

    source: str  # 'range:<kind>' or 'launch'
    evidence: str  # what made it a step: a key of STEPS_FROM
    range_side: str | None  # 'cpu' | 'gpu' | None (a step of one launch, no range)

    def __init__(self, index: int, name: str, source: str, range_id: int | None, start_ns: int, end_ns: int,
                 kernel_count: int, launches: list[Launch], key: int = 0, range_start_ns: int | None = None,
                 range_end_ns: int | None = None, range_side: str | None = None, breakdown: Any = None,
                 evidence: str = "launch", engine: engine_steps.StepInfo | None = None) -> None:
        self.__class__ = step_class(source, evidence, range_side)
        self.index = index
        self.name = name
        self.kernel_count = kernel_count  # kernels of the step (all families; `step_kernels` reads them)
        self.launches: Sequence[Launch] = launches
        self.breakdown = breakdown  # traceinsight.model.breakdown.StepBreakdown, set by the pipeline
        self.engine = engine  # what the engine's iteration annotation says (phase, batch, tokens)
        times = (start_ns, end_ns, NO_TIME if range_start_ns is None else range_start_ns,
                 NO_TIME if range_end_ns is None else range_end_ns, key,
                 NO_TIME if range_id is None else range_id)
        self._t = StepTimes(*(array("q", [v]) for v in times))
        self._i = 0

    @property
    def key(self) -> int:
        """The step's key in the grouping tables (_step_members): its range_id, or < 0 for a launch step."""
        return self._t.key[self._i]

    @property
    def range_id(self) -> int | None:
        v = self._t.range_id[self._i]
        return None if v == NO_TIME else v

    @property
    def start_ns(self) -> int:
        """First GPU kernel of the step (ns)."""
        return self._t.start_ns[self._i]

    @property
    def end_ns(self) -> int:
        """Last GPU kernel end of the step (ns)."""
        return self._t.end_ns[self._i]

    @property
    def range_start_ns(self) -> int | None:
        """The step's range (CPU: on the launching thread; GPU: on the device), or None."""
        v = self._t.range_start_ns[self._i]
        return None if v == NO_TIME else v

    @property
    def range_end_ns(self) -> int | None:
        v = self._t.range_end_ns[self._i]
        return None if v == NO_TIME else v

    def __eq__(self, other: object) -> bool:  # as the dataclass it replaces: field by field
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in STEP_FIELDS)

    __hash__ = None  # type: ignore[assignment]  # unhashable, as the dataclass it replaces

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (and copied) by its fields: its class is made at run time (`step_class`), which pickle cannot
        name; the constructor picks it again."""
        return (Step, tuple(getattr(self, f) for f in STEP_FIELDS))

    def __repr__(self) -> str:
        return "Step(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in STEP_FIELDS) + ")"

    @property
    def dur_ns(self) -> int:
        """GPU span of the step's own kernels: first kernel start to last kernel end (ns)."""
        return self.end_ns - self.start_ns

    @property
    def wall_ns(self) -> int:
        """What the step took as the engine waits for it (ns): its breakdown's window (the step's range on the
        host through the end of its GPU work, see `traceinsight.model.breakdown`), else its GPU span."""
        return self.breakdown.wall_ns if self.breakdown is not None else self.dur_ns

    @property
    def attention_ns(self) -> int:
        """GPU time of the step's attention launches with their merge/prepare kernels (ns)."""
        total = 0
        for launch in self.launches:
            total += launch.dur_ns
        return total

    @property
    def phase(self) -> str:
        """'decode' | 'prefill' | 'mixed' (prefill and decode rows in the step) | 'unknown', from its launches."""
        phases = {launch.phase for launch in self.launches}
        if not phases:
            return "unknown"
        if len(phases) == 1:
            return phases.pop()
        if "mixed" in phases or {"decode", "prefill"} <= phases:
            return "mixed"
        known = phases - {"unknown"}
        return known.pop() if len(known) == 1 else "unknown"

    @property
    def split_kv(self) -> bool | None:
        """True/False when every attention launch of the step agrees, else None (mixed or unknown)."""
        states = {launch.split_kv for launch in self.launches}
        return states.pop() if len(states) == 1 else None


# The Step subclass of each (source, evidence, range_side) (`step_class`).
_STEP_CLASSES: dict[tuple[str, str, str | None], type[Step]] = {}


def step_class(source: str, evidence: str, range_side: str | None) -> type[Step]:
    """The Step subclass whose instances have this source, evidence and range side (its class attributes)."""
    key = (source, evidence, range_side)
    got = _STEP_CLASSES.get(key)
    if got is None:
        got = _STEP_CLASSES[key] = type("Step", (Step,), {"__slots__": (), "__module__": __name__, "source": source,
                                                          "evidence": evidence, "range_side": range_side})
    return got


# Each database's labels by id (`labels_of`), and how many there were when read: kernel_labels is insert-only, so
# a count that grew means new labels to read.
_LABELS: weakref.WeakKeyDictionary[TraceDB, tuple[int, dict[int, LabelFields]]] = weakref.WeakKeyDictionary()


def kernel_label_rows(db: TraceDB) -> dict[int, LabelFields]:
    """Every kernel label of the database by its id (kernel_label_rows.sql; the label_id of step_launches.sql,
    step_kernels.sql), its params parsed once: every kernel of a name shares its label's strings and params dict."""
    return {lid: (name, kernel, family, backend, phase, evidence or "", json.loads(params) if params else {})
            for lid, name, kernel, family, backend, phase, evidence, params
            in db.sql(sql("kernel_label_rows")).fetchall()}


def labels_of(db: TraceDB) -> dict[int, LabelFields]:
    """`kernel_label_rows`, read once per database and again only when labels were added: the per-step callers
    (`step_kernels`, for `explain` and the norm-grid check) share one map."""
    n = int(db.sql("SELECT count(*) FROM kernel_labels").fetchall()[0][0])
    held = _LABELS.get(db)
    if held is None or held[0] != n:
        held = _LABELS[db] = (n, kernel_label_rows(db))
    return held[1]


def kernels_of(table: pa.Table, labels: dict[int, LabelFields]) -> list[Kernel]:
    """The kernels of a query's rows (the kernel columns of step_launches.sql and step_kernels.sql: kernel_id,
    label_id, stream_id, device_id, times, grid, block, registers, shared memory), in row order: views of the rows
    (`model.kernel_columns`), each label's fields (`labels`: `labels_of`) shared."""
    return KernelViews(labels).of(table)


def _attention_values(column: pa.Array, attention: np.ndarray, null: str | None = None) -> list[Any]:
    """A nullable column's values on the attention rows (`attention`: a numpy mask), text and booleans one
    object per distinct value; NULL text as `null`."""
    if pa.types.is_boolean(column.type):
        codes = np.where(valid(column), numbers(column).astype(np.int64), 2)
        choices = np.array([False, True, None], dtype=object)
    else:
        words, codes = encode(column)
        choices = np.empty(len(words) + 1, dtype=object)
        for i, w in enumerate(words):
            choices[i] = w if w is not None else null
        choices[-1] = null
    out: list[Any] = choices[codes[attention]].tolist()
    return out


def _choose_ranges(db: TraceDB, step_pattern: str | None) -> str:
    """Fill _step_chosen (step_range_choice.sql) from the best evidence the trace's ranges hold, and say which it
    was (STEPS_FROM's keys; 'none' when no range encloses an attention launch). In order: the user's
    --step-pattern; the serving engines' iteration annotations (engine_steps.toml); torch.profiler's
    ProfilerStep#N; any other range that encloses attention launches but no more than WRAPPER_SHARE of them. A
    range named by the first three is a step whatever it holds: a trace of one engine iteration is one step."""
    names = [r["name"] for r in db.rows("SELECT DISTINCT name FROM _step_ranges")]
    n_attention = db.rows("SELECT count(DISTINCT kernel_id) AS n FROM _step_kernel_launch "
                          "WHERE family = 'attention'")[0]["n"]
    limit = max(1, int(n_attention * WRAPPER_SHARE))
    if step_pattern is not None:
        pattern = re.compile(step_pattern)
        tiers: list[tuple[str, list[str] | None]] = [("pattern", [n for n in names if pattern.search(n)])]
    else:
        marked = [(n, info) for n in names if (info := engine_steps.match(n)) is not None and info.level == "iteration"]
        engine = [n for n, info in marked if info.engine != "torch"]
        profiler = [n for n, info in marked if info.engine == "torch"]
        tiers = [("engine", engine), ("profiler", profiler), ("ranges", None)]
    for source, picked in tiers:
        if source != "pattern" and picked is not None and not picked:
            continue
        db.sql(sql("step_range_choice"), {"limit": limit, "names": picked})
        if source == "pattern" or db.rows("SELECT count(*) AS n FROM _step_chosen")[0]["n"]:
            return source
    return "none"


@functools.lru_cache(maxsize=4096)
def _phase(name: str, range_name: str | None) -> tuple[str, str]:
    return labels.phase_in_context(labels.label(name), range_name=range_name)


def group_steps(db: TraceDB, trace_id: int, step_pattern: str | None = None) -> tuple[list[Step], list[Launch]]:
    """Group the kernels of one trace into steps (see the module docstring). Returns the steps in start order
    and the attention launches that lie outside every range-defined step. The grouping, the launches and their
    split state are SQL (step_kernel_launch, step_ranges, step_range_choice, step_members, step_launches,
    step_rows); Python builds objects for the attention launches' kernels only: a step knows how many kernels
    it has, and `step_kernels` reads them when asked."""
    ensure_labels(db)
    params = {"trace": trace_id}
    db.sql(sql("step_kernel_launch"), params)
    db.sql(sql("step_ranges"), params)
    steps_from = _choose_ranges(db, step_pattern)
    recovered = None
    if steps_from == "none" and step_pattern is None:
        recovered = iterations.recover(db, trace_id)
        if recovered is not None:
            _choose_windows(db, trace_id, recovered)
            steps_from = "recovered"
    db.script(sql("step_members"), params)
    rows = db.con.sql(sql("step_rows"), params=params).to_arrow_table()  # a row per step, in step_key order
    launches, launch_keys = _launches(db, trace_id)
    engine_ranges = _engine_ranges(db) if steps_from == "engine" else []
    db.script(sql("step_scratch_drop"), {})
    col = {c: rows.column(c).combine_chunks() for c in rows.column_names}
    keys = ints(col["step_key"], 0)
    ranged = numbers(col["ranged"]) if len(keys) else np.zeros(0, bool)
    # Each step's launches: a slice of `launches` (both in step_key order).
    first = np.searchsorted(launch_keys, keys, side="left")
    count = np.searchsorted(launch_keys, keys, side="right") - first
    loose = np.flatnonzero(~ranged & (count > 0))
    unassigned: list[Launch] = []
    if (ranged & (count > 0)).any():
        kept = np.flatnonzero(ranged & (count > 0))
        for r in loose[::-1].tolist():  # in kernel order (a launch step's key is minus its number)
            unassigned += launches[first[r]:first[r] + count[r]]
        for x in unassigned:
            x.phase, x.phase_evidence = _phase(x.attention.name, None)
    else:
        kept = loose
    recovered_steps = recovered is not None
    range_ids = ints(col["range_id"], -1)
    start = ints(col["start_ns"], 0)
    tie = np.where(ranged, range_ids if not recovered_steps else -1, -1)
    order = kept[np.lexsort((np.abs(keys[kept]), tie[kept], start[kept]))]  # by start, range id, then key
    steps = _steps_of(col, order, first, count, launches, steps_from, recovered_steps)
    if engine_ranges:
        _attach_engine_info(steps, engine_ranges)
    _mixed_from_tiles(db, trace_id, steps, _phases(steps))
    return steps, unassigned


def _launches(db: TraceDB, trace_id: int) -> tuple[list[Launch], np.ndarray]:
    """The attention launches of the trace's steps (step_launches.sql), in step_key then kernel order, each with
    its merge and prepare kernels and split state (phase not set yet), and each launch's step_key. The rows come
    in record batches; a launch's rows are its attention row, then its merges, then its prepares."""
    result = db.con.sql(sql("step_launches"), params={
        "trace": trace_id, "fa3_cap": FA3_CAP_PER_PREPARE_CTA, **attention_split_params(db)})
    views = KernelViews(labels_of(db))  # one for every batch: the kernels' shapes shared across them
    kernels: list[Kernel] = []
    attention: list[np.ndarray] = []
    parts: dict[str, list[np.ndarray]] = {"step_key": [], "merges": [], "prepares": []}
    split_kv: list[bool | None] = []
    evidence: list[str] = []
    for batch in db.stream(result, LAUNCH_BATCH_ROWS):  # not the whole result as Arrow at once
        part = pa.Table.from_batches([batch])
        kernels += views.of(part)
        merges = part.column("merges").combine_chunks()
        mask = valid(merges)  # the attention rows: the others have no count
        attention.append(mask)
        parts["merges"].append(ints(merges, 0)[mask])
        for c in ("step_key", "prepares"):
            parts[c].append(ints(part.column(c).combine_chunks(), 0)[mask])
        split_kv += _attention_values(part.column("split_kv").combine_chunks(), mask)
        evidence += _attention_values(part.column("split_evidence").combine_chunks(), mask, "")
    if not kernels:
        return [], np.zeros(0, np.int64)
    at = np.flatnonzero(np.concatenate(attention))
    n_merges, n_prepares, keys = (np.concatenate(parts[c]) for c in ("merges", "prepares", "step_key"))
    merged: list[Sequence[Kernel]] = [()] * len(at)
    prepared: list[Sequence[Kernel]] = [()] * len(at)
    for i in np.flatnonzero(n_merges + n_prepares).tolist():
        a, m = int(at[i]) + 1, int(n_merges[i])
        merged[i] = tuple(kernels[a:a + m])
        prepared[i] = tuple(kernels[a + m:a + m + int(n_prepares[i])])
    heads = np.empty(len(kernels), dtype=object)
    heads[:] = kernels
    launches = list(map(Launch, heads[at].tolist(), merged, prepared, ["unknown"] * len(at), [""] * len(at),
                        split_kv, evidence))
    return launches, keys


def _steps_of(col: dict[str, pa.Array], order: np.ndarray, first: np.ndarray, count: np.ndarray,
              launches: list[Launch], steps_from: str, recovered: bool) -> list[Step]:
    """The Step of each step_rows.sql row of `order` (their final order: `index` is the position), with its
    launches (the slice `first`, `count` of `launches`)."""
    def pick(c: str) -> list[Any]:
        values = col[c]
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            words, codes = encode(values)
            shared = np.empty(len(words) + 1, dtype=object)
            for i, w in enumerate(words):
                shared[i] = w
            shared[-1] = None
            out: list[Any] = shared[codes[order]].tolist()
            return out
        got = (numbers(values) if pa.types.is_boolean(values.type) else ints(values, -1))[order].tolist()
        if values.null_count:
            ok = valid(values)[order].tolist()
            return [v if o else None for v, o in zip(got, ok, strict=True)]
        return list(got)

    ranged, names, kinds, counts, sides = (pick(c) for c in ("ranged", "name", "kind", "kernel_count", "side"))
    n = len(names)
    lo, k = first[order].tolist(), count[order].tolist()
    mine = [(launches[a],) if m == 1 else tuple(launches[a:a + m]) if m else () for a, m in zip(lo, k, strict=True)]
    names = [name or f"{x[0].attention.kernel} launch {i}" for i, (name, x) in enumerate(zip(names, mine, strict=True))]
    launch_steps = bool(n) and not ranged[0]  # a list holds one kind: range steps, or launch steps alone
    no_range = np.full(n, NO_TIME, np.int64)
    keys = ints(col["step_key"], 0)[order]
    times = [ints(col["start_ns"], 0)[order], ints(col["end_ns"], 0)[order]]
    times += ([no_range, no_range] if launch_steps or recovered
              else [ints(col[c], NO_TIME)[order] for c in ("range_start_ns", "range_end_ns")])
    times += [keys, no_range if launch_steps or recovered else keys]
    made = chunked(times, StepTimes)
    nulls: dict[int, array[int]] = {}
    for c in made:  # columns that repeat another, or hold no value, shared (never written after this)
        if launch_steps or recovered:
            none = nulls.setdefault(len(c.key), array("q", [NO_TIME]) * len(c.key))
            c.range_start_ns = c.range_end_ns = c.range_id = none
        else:
            c.range_id = c.key
    chunks = itertools.chain.from_iterable(itertools.repeat(c, CHUNK) for c in made)
    rows = itertools.cycle(range(CHUNK))
    if launch_steps:
        return list(map(_step, itertools.repeat(step_class("launch", "launch", None), n), range(n), names, counts,
                        mine, chunks, rows))
    classes = {(kind, side): step_class(f"range:{kind}", steps_from, None if recovered else side)
               for kind, side in set(zip(kinds, sides, strict=True))}
    return list(map(_step, map(classes.__getitem__, zip(kinds, sides, strict=True)), range(n), names, counts, mine,
                    chunks, rows))


def step_times(steps: Sequence[Step], fields: Sequence[str] = TIME_FIELDS) -> dict[str, np.ndarray]:
    """These steps' `fields` (of ROW_FIELDS: TIME_FIELDS by default) as int64 arrays (NO_TIME for a range time or
    range id of None), read from their rows rather than through each step's properties."""
    return gather(steps, attrgetter("_t"), attrgetter("_i"), fields)


def _step(cls: type[Step], index: int, name: str, kernel_count: int, launches: tuple[Launch, ...],
          row_of: StepTimes, row: int) -> Step:
    """A Step of class `cls` (`step_class`) whose times, key and range id are row `row` of `row_of` (no engine,
    breakdown yet)."""
    s = object.__new__(cls)
    s.index = index
    s.name = name
    s.kernel_count = kernel_count
    s.launches = launches
    s.breakdown = None
    s.engine = None
    s._t = row_of
    s._i = row
    return s


def _phases(steps: list[Step]) -> list[int]:
    """Each launch's phase: its kernel's, in the context of its step's range name; the engine's annotation where it
    states the phase; a varlen kernel that split along KV ran decode. Returns the steps whose first launch ran
    prefill, in order (`_mixed_from_tiles`' candidates: found here rather than in a second pass over every step)."""
    prefill_first: list[int] = []
    for i, s in enumerate(steps):
        context = None if s.source == "launch" else s.name
        engine = s.engine is not None and s.engine.phase in STEP_PHASES
        for launch in s.launches:
            launch.phase, launch.phase_evidence = _phase(launch.attention.name, context)
            if engine:
                _engine_phase(launch, s.engine)  # type: ignore[arg-type]
            elif launch.phase == "unknown" and launch.merges and launch.attention.backend in SPLIT_MEANS_DECODE:
                launch.phase = "decode"
                launch.phase_evidence = (f"{launch.merges[0].kernel} combined its KV splits: "
                                         f"{SPLIT_MEANS_DECODE[launch.attention.backend]}")
        if s.launches and s.launches[0].phase == "prefill":
            prefill_first.append(i)
    return prefill_first


# Steps searched on either side of a prefill-shaped step for the running decode batch (a chunked prefill's
# chunks run back to back, each a step).
MIXED_NEIGHBOUR_STEPS = 8


def _prefill_shaped(s: Step) -> bool:
    """A step whose every attention launch is prefill by its kernel's template alone (no range name or engine
    annotation said so) on a tensor-core kernel that states its query tile."""
    if s.engine is not None or not s.launches:
        return False
    for x in s.launches:
        tile = x.attention.params.get("cta_tile_q")
        if x.phase != "prefill" or not isinstance(tile, int) or tile <= 0:
            return False
        if x.phase_evidence != labels.label(x.attention.name).phase_evidence:
            return False
    return True


def _mixed_from_tiles(db: TraceDB, trace_id: int, steps: list[Step], prefill_first: list[int]) -> None:
    """Prefill-shaped steps that served the running decode batch too (chunked prefill in one launch) become
    `mixed`, from the trace alone (`model.phases.mixed_from_tiles`): the step's token rows are the rows its norm
    kernels run (one CTA per token row), the running batch the rows of the nearest decode steps before and after
    it, and each launch's query tiles its grid.x. A sidecar's query lengths, read later, override this."""
    # The steps whose first launch ran prefill (`prefill_first`, from `_phases`) first: a step at a time through
    # `_prefill_shaped` was 229K calls on the 1M-kernel export, whose steps are all decode.
    cands = [i for i in prefill_first if _prefill_shaped(steps[i])]
    if not cands:
        return
    decode = [bool(s.launches) and all(x.phase == "decode" for x in s.launches) for s in steps]
    rows_of: dict[int, int | None] = {}

    def rows(i: int) -> int | None:
        if i not in rows_of:
            grids = Counter(k.grid[0] for k in step_kernels(db, trace_id, steps[i]) if k.family == "norm")
            rows_of[i] = grids.most_common(1)[0][0] if grids else None
        return rows_of[i]

    # The batches around each candidate, and its rows (read only where a decode step is near).
    around: dict[int, tuple[int, list[int]]] = {}
    for i in cands:
        near = [next((j for j in r if decode[j]), None)
                for r in (range(i - 1, max(-1, i - 1 - MIXED_NEIGHBOUR_STEPS), -1),
                          range(i + 1, min(len(steps), i + 1 + MIXED_NEIGHBOUR_STEPS)))]
        if all(j is None for j in near):
            continue
        n = rows(i)
        batches = [b for j in near if j is not None and (b := rows(j))]
        if n and batches:
            around[i] = (n, list(dict.fromkeys(batches)))
    # Every GQA group first; then, for the launches that reading left open, the one group the kernel's settled
    # launches agree on (a kernel has one shape: prefill alone may fit a chunk at another G by chance).
    settled: dict[str, set[int]] = defaultdict(set)
    open_: list[tuple[Launch, int, int, list[int]]] = []
    for i, (n, batches) in around.items():
        for x in steps[i].launches:
            tile = int(x.attention.params["cta_tile_q"])
            got = mixed_from_tiles(x.attention.grid[0], tile, n, batches)
            if got is None:
                open_.append((x, tile, n, batches))
                continue
            _set_mixed(x, tile, got)
            settled[x.attention.name].add(got[1])
    for x, tile, n, batches in open_:
        groups = settled.get(x.attention.name, set())
        if len(groups) == 1 and (got := mixed_from_tiles(x.attention.grid[0], tile, n, batches, tuple(groups))):
            _set_mixed(x, tile, got)


def _set_mixed(x: Launch, tile: int, got: tuple[list[int], int, str]) -> None:
    qo, group, evidence = got
    x.phase, x.phase_evidence = MIXED, evidence
    x.tiles = tile_padding(qo, tile, group)


# Varlen / unified kernels that serve both phases, and why one that split along KV ran decode.
SPLIT_MEANS_DECODE = {
    "fa3": "FA3 splits only when its query tiles are too few to fill the GPU, as with decode's one row per request "
           "(hopper/heuristics.h num_splits_heuristic)",
    "triton": "vLLM's unified attention runs its split (3D) kernel only for batches whose queries are one row each "
              "(triton_unified_attention.py: max_seqlen_q == 1)",
}


# What made the steps of a trace, in words (TraceAnalysis.extra['steps_from'], the report's header).
STEPS_FROM = {
    "pattern": "ranges named by --step-pattern",
    "engine": "the serving engine's iteration annotations",
    "profiler": "torch.profiler's ProfilerStep#N ranges",
    "ranges": "the annotation ranges around the attention launches",
    "recovered": "engine iterations recovered from the trace (no annotation marks them)",
    "launch": "one attention launch each (nothing in the trace marks a step)",
}
# Phases an engine annotation can give its attention launches ('idle' steps have none).
STEP_PHASES = ("decode", "prefill", "mixed")


def _choose_windows(db: TraceDB, trace_id: int, found: iterations.Iterations) -> None:
    """_step_chosen as the recovered iterations: one GPU-side range per iteration window on its device (range ids
    after the trace's own, names 'iteration N')."""
    top = db.rows("SELECT coalesce(max(range_id), -1) AS m FROM ranges WHERE trace_id = $t", {"t": trace_id})[0]["m"]
    n = len(found.windows)
    db.sql(sql("step_recovered_choice"), {
        "trace": trace_id, "ids": [top + 1 + i for i in range(n)], "names": [f"iteration {i}" for i in range(n)],
        "lo": [w[0] for w in found.windows], "hi": [w[1] for w in found.windows], "device": found.device_id})


# An engine iteration range: (start_ns, end_ns, thread_id, range_id, what its name says).
EngineRange = tuple[int, int, int | None, int, engine_steps.StepInfo]


def _engine_ranges(db: TraceDB) -> list[EngineRange]:
    """Every engine iteration range of the trace (CPU side), by start."""
    out = []
    for r in db.rows("SELECT range_id, name, start_ns, end_ns, thread_id FROM _step_ranges WHERE side = 'cpu' "
                     "ORDER BY start_ns, end_ns DESC"):
        info = engine_steps.match(r["name"])
        if info is not None and info.level == "iteration":
            out.append((r["start_ns"], r["end_ns"], r["thread_id"], r["range_id"], info))
    return out


def _attach_engine_info(steps: list[Step], ranges: list[EngineRange]) -> None:
    """Each engine step's `engine`: what its own range's name says, completed by the iteration annotations nested
    in it on the same thread (SGLang writes `step[DECODE bs=32]` inside a vLLM-style `execute_...`)."""
    starts = [r[0] for r in ranges]
    own = {r[3]: r for r in ranges}
    for s in steps:
        mine = own.get(s.range_id) if s.range_id is not None else None
        if mine is None:  # a GPU-side range: its own name only
            s.engine = engine_steps.match(s.name)
            continue
        _, end, thread, _, info = mine
        i = bisect.bisect_left(starts, mine[0])
        while i < len(ranges) and ranges[i][0] <= end:
            _, inner_end, inner_thread, rid, inner = ranges[i]
            if rid != s.range_id and inner_end <= end and (thread is None or inner_thread in (None, thread)):
                info = info.merged(inner)
            i += 1
        s.engine = info


def _engine_phase(launch: Launch, info: engine_steps.StepInfo) -> None:
    """The phase of an attention launch in a step whose engine annotation states the phase. A decode or prefill
    step gives it to every launch (a kernel named Prefill serving a decode step is decode); in a mixed step a
    launch keeps the phase its kernel or range gave it, and one that serves both (varlen and unified kernels)
    is mixed."""
    said = f"the engine's step annotation {info.name!r} ({info.engine}) says {info.phase}"
    if info.phase != "mixed":
        launch.phase, launch.phase_evidence = info.phase or "unknown", said
    elif launch.phase not in ("decode", "prefill"):
        launch.phase, launch.phase_evidence = "mixed", said


def step_kernels(db: TraceDB, trace_id: int, step: Step) -> list[Kernel]:
    """Every kernel of `step` (of trace `trace_id`, grouped by `group_steps` on this connection), in start
    order."""
    return kernels_of(db.con.sql(sql("step_kernels"), params={"trace": trace_id, "step_key": step.key})
                      .to_arrow_table(), labels_of(db))
