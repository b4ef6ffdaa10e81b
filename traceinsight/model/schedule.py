"""What the schedule model attaches to a trace: per attention kernel variant its threshold, per step its batch
composition, per launch its model and measurement, the GPU's idle gaps, and the `Schedule` holding them
(filled by `traceinsight.model.attach`). Times in ns, sizes in bytes, lengths in tokens."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, ValuesView
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast, overload

import numpy as np

from traceinsight.model.gpus import GPU
from traceinsight.model.int_keys import KeyIndex, last_of
from traceinsight.model.planners import Plan
from traceinsight.model.simulate import CostModel, SimResult
from traceinsight.model.steps import Kernel


@dataclass(frozen=True)
class KernelThreshold:
    """Occupancy and split-KV threshold of one attention kernel variant (distinct kernel name) on this GPU.

    occupancy: resident CTAs per SM from registers/threads/shared memory; max_grid: the CTA count its planner
    targets; b_threshold: smallest batch at which no request can be split any more (None: never splits);
    kv_heads_source: where kv_heads came from ('grid.y', 'grid.z', 'sidecar').
    """

    kernel: str
    name: str
    backend: str
    kv_heads: int | None
    kv_heads_source: str | None
    occupancy: int
    occupancy_limiter: str
    max_grid: int
    b_threshold: int | None
    registers_per_thread: int | None
    threads_per_block: int
    smem_bytes: int | None
    num_sms: int

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "backend": self.backend,
            "kv_heads": self.kv_heads,
            "occupancy": self.occupancy,
            "max_grid": self.max_grid,
            "b_threshold": self.b_threshold,
            "name": self.name,
            "kv_heads_source": self.kv_heads_source,
            "occupancy_limiter": self.occupancy_limiter,
            "registers_per_thread": self.registers_per_thread,
            "threads_per_block": self.threads_per_block,
            "smem_bytes": self.smem_bytes,
            "num_sms": self.num_sms,
        }


@dataclass(frozen=True)
class StepBatch:
    """A step's batch composition: exact from a sidecar (source 'sidecar'), or bounded from the trace
    (source 'trace'). Unknown values are None; `known` says in words what is known and from what.

    batch_size_min / batch_size_max: bounds on B (equal to batch_size when exact); kv_lens: every request's KV
    length (tokens, sidecar only); shape fields from the sidecar or the kernel's grid/block.
    """

    source: str
    step_key: str | None
    batch_size: int | None
    batch_size_min: int | None
    batch_size_max: int | None
    kv_lens: tuple[int, ...] | None
    qo_heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    page_size: int | None = None
    kv_dtype: str | None = None
    backend: str | None = None
    cuda_graph: bool | None = None
    planned_split_kv: bool | None = None
    planned_padded_batch: int | None = None
    known: tuple[str, ...] = ()
    call: dict[str, Any] | None = None  # the attention call's recorded arguments (sidecar `call`)
    planned_splits: tuple[int, ...] | None = None  # FA3: splits per request as its scheduler metadata says
    planned_num_splits: int | None = None  # FA3: the static split bound S
    # What the engine's iteration annotation says (model/engine_steps.py): its engine id, the phase, the query
    # tokens scheduled, the KV tokens of the batch, and its prefill and decode requests.
    engine: str | None = None
    phase: str | None = None
    query_tokens: int | None = None
    kv_tokens: int | None = None
    prefill_requests: int | None = None
    decode_requests: int | None = None
    graph_mode: str | None = None  # 'full' | 'piecewise' when the step's kernels were replayed from CUDA graphs

    @property
    def total_kv_tokens(self) -> int | None:
        return sum(self.kv_lens) if self.kv_lens is not None else self.kv_tokens

    @property
    def max_kv_len(self) -> int | None:
        return max(self.kv_lens) if self.kv_lens else None

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "step_key": self.step_key,
            "batch_size": self.batch_size,
            "batch_size_min": self.batch_size_min,
            "batch_size_max": self.batch_size_max,
            "total_kv_tokens": self.total_kv_tokens,
            "max_kv_len": self.max_kv_len,
            "qo_heads": self.qo_heads,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "page_size": self.page_size,
            "kv_dtype": self.kv_dtype,
            "cuda_graph": self.cuda_graph,
            "planned_split_kv": self.planned_split_kv,
            "planned_padded_batch": self.planned_padded_batch,
            "known": list(self.known),
            "call": self.call,
            "planned_num_splits": self.planned_num_splits,
            "requests_cut": (sum(1 for x in self.planned_splits if x > 1)
                             if self.planned_splits is not None else None),
            "engine": self.engine,
            "phase": self.phase,
            "query_tokens": self.query_tokens,
            "prefill_requests": self.prefill_requests,
            "decode_requests": self.decode_requests,
            "graph_mode": self.graph_mode,
        }


@dataclass(frozen=True, slots=True)  # slots: one per attention launch (10^6 in a long trace)
class LaunchModel:
    """The schedule model of one attention launch. Launches with equal inputs share one (`launch_models`): the
    kernel id is its key in `Schedule.models`, not a field.

    source: 'sidecar' (planned from the exact batch) or 'trace' (what the grid alone says); work_items: CTAs
    (or persistent tiles) doing work; chunk_tokens: KV chunk length (None: not split or varies);
    split_kv: the planner's split decision (trace: merge kernel present); predicted_ns / sm_idle / tail_ns:
    the simulated time, SM idle fraction (0..1) and tail (time with fewer than half the SMs busy), None
    without a calibrated cost model; plan / sim: the planner's and simulator's full output (not in JSON);
    grid_matches: the planned grid equals the traced one (None when not planned); balanced_ns: the same work
    at full-GPU throughput (`throughput_floor_ns`), what the launch would take perfectly balanced.
    """

    source: str
    work_items: int | None
    chunk_tokens: int | None
    split_kv: bool | None
    predicted_ns: int | None
    sm_idle: float | None
    tail_ns: int | None
    plan: Plan | None = field(default=None, repr=False, compare=False)
    sim: SimResult | None = field(default=None, repr=False, compare=False)
    grid_matches: bool | None = None
    longest_item_tokens: int | None = None
    mean_item_tokens: float | None = None
    note: str | None = None
    balanced_ns: int | None = None

    @property
    def imbalance(self) -> float | None:
        """Longest work item over the mean work item (KV tokens); 1.0 is perfectly even."""
        if self.longest_item_tokens is None or not self.mean_item_tokens:
            return None
        return self.longest_item_tokens / self.mean_item_tokens

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "work_items": self.work_items,
            "chunk_tokens": self.chunk_tokens,
            "split_kv": self.split_kv,
            "predicted_ns": self.predicted_ns,
            "sm_idle": round(self.sm_idle, 4) if self.sm_idle is not None else None,
            "tail_ns": self.tail_ns,
            "grid_matches": self.grid_matches,
            "longest_item_tokens": self.longest_item_tokens,
            "balanced_ns": self.balanced_ns,
            "note": self.note,
        }


@dataclass(frozen=True)
class Measured:
    """Nsight Compute's per-SM active cycles of one launch (cycles): least busy SM, mean, busiest SM."""

    ncu_id: int
    sm_active_min: float | None
    sm_active_avg: float | None
    sm_active_max: float | None

    @property
    def sm_idle(self) -> float | None:
        """1 - avg/max: the share of the busiest SM's time the average SM sat idle."""
        if self.sm_active_avg is None or not self.sm_active_max:
            return None
        return 1.0 - self.sm_active_avg / self.sm_active_max

    def to_json(self) -> dict[str, Any]:
        return {"sm_active_min": self.sm_active_min, "sm_active_avg": self.sm_active_avg,
                "sm_active_max": self.sm_active_max, "ncu_id": self.ncu_id,
                "sm_idle": round(self.sm_idle, 4) if self.sm_idle is not None else None}


class IdleGap(NamedTuple):
    """A stretch with no kernel or memory operation on the GPU, just before step `before_step` (ns). A named
    tuple: a long trace has a gap between most of its steps (1.7M at 1M kernels), made at C speed."""

    start_ns: int
    end_ns: int
    before_step: int

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


class IdleGaps:
    """The GPU's idle gaps between steps as columns: a long trace has one between most of its kernels (2.5M at 1M
    kernels), too many to hold as objects. Held as start_ns (int64), each gap's length (uint32 where every one
    fits: a third less than an end_ns column, 24M gaps at 10M kernels) and before_step; `end_ns` and `dur_ns` are
    made as int64 when asked, `chunk` gives a slice's start, end and step. Indexing and iteration give
    `IdleGap`s."""

    __slots__ = ("_dur", "before_step", "start_ns")

    def __init__(self, start_ns: np.ndarray, end_ns: np.ndarray, before_step: np.ndarray) -> None:
        self.start_ns = np.asarray(start_ns, np.int64)
        dur = np.asarray(end_ns, np.int64) - self.start_ns
        fits = not len(dur) or (int(dur.min()) >= 0 and int(dur.max()) < 2**32)
        self._dur = dur.astype(np.uint32) if fits else dur
        self.before_step = before_step

    @staticmethod
    def empty() -> IdleGaps:
        none = np.zeros(0, np.int64)
        return IdleGaps(none, none, none)

    @property
    def end_ns(self) -> np.ndarray:
        return cast(np.ndarray, self.start_ns + self._dur.astype(np.int64))

    @property
    def dur_ns(self) -> np.ndarray:
        return self._dur.astype(np.int64)

    def total_ns(self) -> int:
        """The gaps' lengths added up, without `dur_ns`'s int64 copy of them (19 MB at 1M kernels)."""
        return int(self._dur.sum(dtype=np.int64))

    def chunk(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Gaps lo..hi-1 as start_ns, end_ns (int64) and before_step."""
        start = self.start_ns[lo:hi]
        return start, start + self._dur[lo:hi].astype(np.int64), self.before_step[lo:hi]

    def __len__(self) -> int:
        return len(self.start_ns)

    def __iter__(self) -> Iterator[IdleGap]:
        return map(IdleGap._make, zip(self.start_ns.tolist(), self.end_ns.tolist(), self.before_step.tolist(),
                                      strict=True))

    @overload
    def __getitem__(self, i: int) -> IdleGap: ...
    @overload
    def __getitem__(self, i: slice) -> list[IdleGap]: ...

    def __getitem__(self, i: int | slice) -> IdleGap | list[IdleGap]:
        if isinstance(i, slice):
            return list(IdleGaps(self.start_ns[i], self.end_ns[i], self.before_step[i]))
        return IdleGap(int(self.start_ns[i]), int(self.start_ns[i]) + int(self._dur[i]), int(self.before_step[i]))

    def __repr__(self) -> str:
        return f"IdleGaps({len(self)} gaps)"


class LaunchModels(Mapping[int, "LaunchModel"]):
    """Launch models by attention kernel id, in the order given, as columns: the ids (int64) and, for each, the
    number of its model among the few distinct ones (a long trace shares a handful of models among 10^6-10^7
    launches, and a dict of fresh int keys held ~75 bytes a launch; ~14 here). `of` looks up many ids at once."""

    __slots__ = ("_codes", "_ids", "_index", "_kinds")

    def __init__(self, ids: np.ndarray, codes: np.ndarray, kinds: list[LaunchModel]) -> None:
        """`ids[i]`'s model is `kinds[codes[i]]`; a repeated id keeps its first place and its last model (as a
        dict made from the pairs)."""
        ids, codes = last_of(np.asarray(ids, np.int64), np.asarray(codes))
        self._ids = ids
        self._codes = np.asarray(codes, np.int32 if len(kinds) < 2**31 else np.int64)
        self._kinds = list(kinds)
        self._index = KeyIndex(ids)

    def _find(self, ids: np.ndarray) -> np.ndarray:
        """Each id's position in `_ids`, -1 where it has no model."""
        return self._index.find(ids)

    def of(self, ids: np.ndarray) -> list[LaunchModel | None]:
        """The model of each of `ids` (None for an id without one), looked up at once."""
        if not len(ids) or not len(self._ids):
            return [None] * len(ids)
        pos = self._find(np.asarray(ids, np.int64))
        kinds = np.empty(len(self._kinds) + 1, dtype=object)
        kinds[:-1] = self._kinds
        kinds[-1] = None
        codes = np.where(pos >= 0, self._codes[np.maximum(pos, 0)], len(self._kinds))
        out: list[LaunchModel | None] = kinds[codes].tolist()
        return out

    def __getitem__(self, kernel_id: int) -> LaunchModel:
        if isinstance(kernel_id, (int, np.integer)) and len(self._ids):
            pos = int(self._find(np.array([kernel_id], np.int64))[0])
            if pos >= 0:
                return self._kinds[int(self._codes[pos])]
        raise KeyError(kernel_id)

    def __iter__(self) -> Iterator[int]:
        return iter(self._ids.tolist())

    def __len__(self) -> int:
        return len(self._ids)

    def values(self) -> ValuesView[LaunchModel]:
        return _ModelValues(self)

    def __repr__(self) -> str:
        return f"LaunchModels({dict(self.items())!r})"


class _ModelValues(ValuesView["LaunchModel"]):
    """The models of `LaunchModels`, in its order, without a lookup per id."""

    def __init__(self, models: LaunchModels) -> None:
        super().__init__(models)
        self._models = models

    def __iter__(self) -> Iterator[LaunchModel]:
        return map(self._models._kinds.__getitem__, self._models._codes.tolist())


@dataclass
class Schedule:
    """The schedule model attached to one trace.

    gpu: the GPU model (None when unknown: then nothing below is computed and `notes` says why);
    thresholds: by kernel name; batches: by step index; models / measured: by attention kernel_id;
    costs: calibrated cost model by kernel name; idle_gaps: GPU idle time between steps; notes: what could
    not be modelled, in words; warnings: what the inputs said against each other, in words (the trace's
    warnings).
    """

    gpu: GPU | None
    thresholds: dict[str, KernelThreshold] = field(default_factory=dict)
    batches: dict[int, StepBatch] = field(default_factory=dict)
    models: Mapping[int, LaunchModel] = field(default_factory=dict)
    measured: dict[int, Measured] = field(default_factory=dict)
    costs: dict[str, CostModel] = field(default_factory=dict)
    idle_gaps: IdleGaps = field(default_factory=IdleGaps.empty)
    cuda_graph_kernels: frozenset[int] = frozenset()
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    cache: dict[Any, Any] = field(default_factory=dict, repr=False)  # memo for counterfactual replays

    def threshold_for(self, kernel: Kernel) -> KernelThreshold | None:
        return self.thresholds.get(kernel.name)

    def occupancy_for(self, kernel: Kernel) -> int | None:
        t = self.thresholds.get(kernel.name)
        return t.occupancy if t else None
