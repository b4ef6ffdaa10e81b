"""How a plan's work items reach the SMs (`Layout`), built once per plan, SM count and occupancy and kept for the
plans simulated last (calibration simulates the same plans under many cost models)."""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from operator import itemgetter

import numpy as np

from traceinsight.model.planners.types import Plan, WorkItem

_CTA = itemgetter(WorkItem._fields.index("cta"))
_WORKER = itemgetter(WorkItem._fields.index("worker"))


@dataclass
class Layout:
    """How a plan's items reach the SMs: SM of each slot; for static plans each worker's items (item indices
    grouped by worker, in plan order, and the count per worker), else the global dispatch order (item indices,
    -1 for padding CTAs); the items' KV tokens."""

    sm_of_slot: list[int]
    kv_tokens: list[int]
    worker_items: np.ndarray | None = None
    worker_counts: np.ndarray | None = None
    global_order: list[int] = field(default_factory=list)

    def static_queues(self) -> list[list[int]]:
        """Each worker's item indices in run order (empty for plans without static assignment)."""
        if self.worker_items is None or self.worker_counts is None:
            return []
        cuts = np.cumsum(self.worker_counts)[:-1]
        return [q.tolist() for q in np.split(self.worker_items, cuts)]


def cta_order(ctas: list[int], num_ctas: int) -> list[int]:
    """The dispatch order of a non-persistent grid: for each linear CTA index 0..max(num_ctas, items) - 1 the item it
    runs, -1 for padding CTAs; plan order when the items' CTAs are not distinct or run past the grid. In numpy:
    the dict-and-list version cost a fifth of a serving launch's layout."""
    n = len(ctas)
    size = max(num_ctas, n)
    if not n:
        return [-1] * size
    c = np.array(ctas, dtype=np.int64)
    if int(c.min()) < 0:  # a negative CTA index is never dispatched (as the dict version: no c in range() is < 0)
        by_cta = {x: i for i, x in enumerate(ctas)}
        if len(by_cta) != n or max(by_cta) >= size:
            return list(range(n))
        return [by_cta.get(x, -1) for x in range(size)]
    if int(c.max()) >= size:
        return list(range(n))
    order = np.full(size, -1, dtype=np.int64)
    order[c] = np.arange(n, dtype=np.int64)
    if int(np.count_nonzero(order >= 0)) != n:  # repeated CTA indices
        return list(range(n))
    return order.tolist()


def build_layout(plan: Plan, num_sms: int, occ: int) -> Layout:
    items = plan.work_items
    kv = plan.item_kv_tokens
    if not plan.persistent:
        n_slots = num_sms * max(occ, 1)
        # Linear CTA order with padding CTAs (no work item) as -1.
        order = cta_order(list(map(_CTA, items)), plan.num_ctas)
        return Layout([k % num_sms for k in range(n_slots)], kv, global_order=order)
    workers = plan.grid[0]
    sm_of = [w % num_sms for w in range(workers)]
    assigned = list(map(_WORKER, items))
    if None not in assigned:  # each worker's items in plan order: a stable sort by worker
        w = np.array(assigned, dtype=np.int64) % workers
        return Layout(sm_of, kv, np.argsort(w, kind="stable"), np.bincount(w, minlength=workers))
    ctas = list(map(_CTA, items))
    if sorted(ctas) == ctas:  # already in pull order (FA3): the stable sort by CTA changes nothing
        return Layout(sm_of, kv, global_order=list(range(len(items))))
    return Layout(sm_of, kv, global_order=sorted(range(len(items)), key=ctas.__getitem__))


# Layouts of the plans simulated last, by id(plan) (plans are immutable; the weak reference drops the entry when its
# plan goes): calibration simulates the same plans under many cost models.
_LAYOUTS: dict[int, tuple[weakref.ref[Plan], int, int, Layout]] = {}
_LAYOUTS_KEPT = 64
_LAYOUTS_LOCK = threading.Lock()


def layout(plan: Plan, num_sms: int, occ: int) -> Layout:
    """The layout of `plan` on `num_sms` SMs with `occ` slots each, built once per plan of those kept."""
    key = id(plan)
    hit = _LAYOUTS.get(key)
    if hit is not None and hit[0]() is plan and hit[1] == num_sms and hit[2] == occ:
        return hit[3]
    lay = build_layout(plan, num_sms, occ)

    def forget(_: weakref.ref[Plan]) -> None:
        _LAYOUTS.pop(key, None)

    with _LAYOUTS_LOCK:
        while len(_LAYOUTS) >= _LAYOUTS_KEPT:
            del _LAYOUTS[next(iter(_LAYOUTS))]
        _LAYOUTS[key] = (weakref.ref(plan, forget), num_sms, occ, lay)
    return lay
