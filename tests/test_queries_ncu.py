"""The Nsight Compute match ("ncu_match"), run on inline tables: trace kernels as nsys and Kineto spell them, ncu
rows as ncu does, and the pairs it must make."""

from __future__ import annotations

from typing import Any

from traceinsight.ingest.store import TraceDB
from traceinsight.queries import sql

T = 3
NCU = ("BatchDecodeWithPagedKVCacheKernel<(PosEncodingMode)0, 2, 1, 8, 16, 8, 1, DefaultAttention<0, 0, 0, 0>, "
       "Params>(T9)")
NSYS = ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, (unsigned int)2, "
        "(unsigned int)1, (unsigned int)8, (unsigned int)16, (unsigned int)8, (unsigned int)1, "
        "flashinfer::DefaultAttention<(bool)0, (bool)0, (bool)0, (bool)0>, Params>(T9)")
KINETO = ("void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, 1u, 8u, 16u, 8u, "
          "1u, flashinfer::DefaultAttention<false, false, false, false>, Params>(Params)")
OTHER = "void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, 1u, 8u, 16u, 8u, 2u>"


class Inline:
    def __init__(self) -> None:
        self.db = TraceDB()
        self.db.sql("INSERT INTO traces (trace_id, path, format) VALUES ($t, 'inline', 'nsys')", {"t": T})

    def kernel(self, kid: int, name: str, start: int, grid: int = 8, corr: int | None = None) -> None:
        self.db.sql("INSERT INTO kernel_rows (trace_id, kernel_id, name_id, device_id, stream_id, start_ns, end_ns, "
                    "dur_ns, grid_x, grid_y, grid_z, block_x, block_y, block_z, correlation_id, process_id) "
                    "VALUES ($t, $k, $n, 0, 7, $a, $a + 50, 50, $g, 1, 1, 128, 1, 1, $c, 1)",
                    {"t": T, "k": kid, "n": self.db.name_id(T, name), "a": start, "g": grid, "c": corr})

    def ncu(self, nid: int, name: str, grid: int | None = 8, nvtx: str | None = None) -> None:
        self.db.sql("INSERT INTO ncu_kernels (trace_id, ncu_id, name, grid_x, grid_y, grid_z, block_x, block_y, "
                    "block_z, nvtx) VALUES ($t, $i, $n, $g, 1, 1, 128, 1, 1, $v)",
                    {"t": T, "i": nid, "n": name, "g": grid, "v": nvtx})

    def range(self, rid: int, name: str, start: int, end: int) -> None:
        self.db.sql("INSERT INTO ranges (trace_id, range_id, name, kind, side, start_ns, end_ns, dur_ns, process_id, "
                    "thread_id) VALUES ($t, $r, $n, 'nvtx', 'cpu', $a, $e, $e - $a, 1, 11)",
                    {"t": T, "r": rid, "n": name, "a": start, "e": end})

    def pairs(self) -> list[tuple[Any, ...]]:
        self.db.sql(sql("ncu_match"), {"trace": T})
        return [(r["ncu_id"], r["kernel_id"])
                for r in self.db.rows("SELECT ncu_id, kernel_id FROM ncu_kernels ORDER BY ncu_id")]


def test_ncu_match_pairs_one_kernel_spelled_three_ways_in_order() -> None:
    x = Inline()
    x.kernel(10, NSYS, 100)
    x.kernel(11, KINETO, 200)  # same kernel, Kineto's spelling: the same key
    x.kernel(12, OTHER, 300)  # another template argument: another key
    x.kernel(13, NSYS, 400, grid=16)  # same name, another grid
    x.ncu(1, NCU)
    x.ncu(2, NCU)
    x.ncu(3, NCU)  # a third launch of grid 8 the trace does not hold
    x.ncu(4, NCU, grid=16)
    assert x.pairs() == [(1, 10), (2, 11), (3, None), (4, 13)]


def test_ncu_match_without_grids_ignores_them() -> None:
    x = Inline()
    x.kernel(10, NSYS, 100, grid=8)
    x.kernel(11, NSYS, 200, grid=16)
    x.ncu(1, NCU, grid=None)  # an old export without "Grid Size": the k-th of the name
    x.ncu(2, NCU, grid=None)
    assert x.pairs() == [(1, 10), (2, 11)]


def test_ncu_match_keys_on_the_enclosing_nvtx_range_and_its_tokens() -> None:
    x = Inline()
    x.range(0, "decode tc=0 bs=32 step=0", 0, 250)
    x.range(1, "decode tc=0 bs=64 step=0", 250, 500)
    x.kernel(10, NSYS, 100, corr=None)
    x.kernel(11, NSYS, 300, corr=None)
    x.ncu(1, NCU, nvtx="tc=0 bs=64")  # matches the second range's kernel by its tokens, not the first by order
    x.ncu(2, NCU, nvtx="tc=0 bs=128")  # no range holds it
    assert x.pairs() == [(1, 11), (2, None)]
