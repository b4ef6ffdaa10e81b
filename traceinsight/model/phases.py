"""The phase of an attention launch from the batch's query lengths, and what a mixed launch wastes on padding.

A sidecar's `qo_lens` (query rows per request) says exactly what a launch ran: all 1 is decode, all more than 1
is prefill (or extend), both kinds together is `mixed` — chunked prefill riding with the decode rows of the
running batch in one launch of a prefill kernel. On tensor-core kernels every request's query rows (times the
GQA group G when the kernel packs the group's heads into rows, as FlashInfer's FA2 kernels do) are cut into
CTA_TILE_Q-row tiles, so a decode request pads a whole 16/64/128-row tile for its G rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

DECODE = "decode"
PREFILL = "prefill"
MIXED = "mixed"
# Phases of launches that ran prefill rows (the decode planners do not model them).
PREFILL_PHASES = (PREFILL, MIXED)


def phase_from_query_lengths(qo_lens: Sequence[int]) -> tuple[str, str] | None:
    """(phase, evidence) from the query rows per request; None for an empty list."""
    if not qo_lens:
        return None
    decode = sum(1 for q in qo_lens if q == 1)
    rows = sum(int(q) for q in qo_lens if q > 1)
    if decode == len(qo_lens):
        return DECODE, f"the sidecar's query lengths: {decode} requests of one query row each"
    if decode == 0:
        return PREFILL, f"the sidecar's query lengths: {len(qo_lens)} prefill requests, {rows} query rows"
    return MIXED, (f"the sidecar's query lengths: {decode} decode rows and {len(qo_lens) - decode} prefill "
                   f"requests ({rows} query rows) in one launch (chunked prefill mixed with decode)")


def tile_padding(qo_lens: Sequence[int], tile_rows: int, group: int = 1) -> dict[str, Any] | None:
    """How much of a tensor-core launch's query tiles is padding: each request's `q x group` rows are cut into
    `tile_rows`-row tiles. Returns rows (real, decode, prefill), tiles, padded rows and the padding share of all
    tile rows; None when the tile is unknown."""
    if tile_rows <= 0 or not qo_lens:
        return None
    g = max(1, int(group))
    tiles = sum(math.ceil(q * g / tile_rows) for q in qo_lens)
    rows = sum(q * g for q in qo_lens)
    decode_rows = sum(g for q in qo_lens if q == 1)
    decode_tiles = sum(math.ceil(g / tile_rows) for q in qo_lens if q == 1)
    capacity = tiles * tile_rows
    return {
        "tile_rows": tile_rows,
        "group": g,
        "tiles": tiles,
        "rows": rows,
        "decode_rows": decode_rows,
        "prefill_rows": rows - decode_rows,
        "padded_rows": capacity - rows,
        "padding_share": (capacity - rows) / capacity if capacity else 0.0,
        "decode_tile_share": decode_tiles / tiles if tiles else 0.0,
    }


# GQA groups a tensor-core kernel may pack into its query rows (query heads per KV head).
GROUPS = (1, 2, 4, 8, 16, 32, 64)
# Tiles a launch may hold beyond one prefill request's rounding (each further prefill request rounds up once).
TILE_SLACK = 2


def tiles_for(rows: int, group: int, tile_rows: int) -> int:
    """Query tiles of one request of `rows` query rows, its `group` heads packed into rows."""
    return math.ceil(rows * group / tile_rows)


def mixed_from_tiles(tiles: int, tile_rows: int, step_rows: int, decode_requests: Sequence[int],
                     groups: Sequence[int] = GROUPS) -> tuple[list[int], int, str] | None:
    """Whether a prefill-shaped launch (a causal tensor-core launch, `tiles` query tiles of `tile_rows` rows) in a
    step of `step_rows` token rows served prefill rows alone or the running decode batch with them (chunked
    prefill), from the trace alone: each reading implies the GQA group G that packs the rows into tiles.
    - prefill alone: ceil(step_rows x G / tile_rows) tiles (up to TILE_SLACK more for several requests);
    - mixed, with B decode requests (`decode_requests`: the running batch of the decode steps around it): each
      decode request takes one tile (G <= tile_rows), the other step_rows - B prefill rows the rest.
    Returns (query rows per request: B ones and the prefill rows, G, evidence) when only the mixed reading fits
    a G of `groups` (GROUPS, or the G other launches of the kernel settled on), else None (prefill alone fits,
    or neither does: not enough to say)."""
    if tiles <= 0 or tile_rows <= 0 or step_rows <= 0:
        return None
    groups = [g for g in groups if g <= tile_rows]
    if not groups:
        return None
    alone = [g for g in groups if 0 <= tiles - tiles_for(step_rows, g, tile_rows) <= TILE_SLACK]
    if alone:
        return None
    for b in decode_requests:
        q = step_rows - b
        if b <= 0 or q <= 1:
            continue
        for g in groups:
            if 0 <= tiles - b - tiles_for(q, g, tile_rows) <= TILE_SLACK:
                return [1] * b + [q], g, (
                    f"query tiles against the request count: {tiles} tiles of {tile_rows} rows are the {b} decode "
                    f"requests of the steps around it (one tile each) and {tiles - b} tiles for {q} prefill rows at "
                    f"G = {g}; as prefill alone the step's {step_rows} token rows would take "
                    f"{tiles_for(step_rows, g, tile_rows)} tiles at that G, and no G of "
                    f"{groups[0] if len(groups) == 1 else f'{groups[0]}-{groups[-1]}'} "
                    f"makes {tiles} (chunked prefill mixed with decode: {b} decode and {q} prefill rows, "
                    f"{b / step_rows:.0%} / {q / step_rows:.0%})")
    return None
