"""The kernel labeler (traceinsight.labels): rules as data, tested rule by rule and on every real trace name.

Kernel names are read from the trace files here with json/gzip, sqlite3 and csv (not with the project's
readers), so these tests depend only on the files themselves.
"""

from __future__ import annotations

import csv
import functools
import gzip
import importlib.util
import re
import sqlite3
from pathlib import Path

import duckdb
import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceinsight.errors import FormatError, InputError
from traceinsight.labels import (
    FAMILIES,
    LABEL_COLUMNS,
    Label,
    RuleSet,
    label,
    label_rows,
    load_rules,
    phase_in_context,
)
from traceinsight.labels.demangle import demangle
from traceinsight.labels.rules import BUILTIN, read_rules_file

# ---------------------------------------------------------------------------------------------------
# Reading kernel names straight from the files
# ---------------------------------------------------------------------------------------------------


def kineto_kernel_names(path: Path) -> set[str]:
    """Names of kernel events: cat 'kernel' (current Kineto) or 'Kernel' (the 2021 format)."""
    with gzip.open(path, "rb") as f:
        doc = orjson.loads(f.read())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return {e["name"] for e in events if str(e.get("cat", "")).lower() == "kernel"}


def nsys_kernel_names(path: Path) -> set[str]:
    """Every name column of CUPTI_ACTIVITY_KIND_KERNEL (demangled, mangled, short) through StringIds."""
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        cols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
        out: set[str] = set()
        for col in ("demangledName", "mangledName", "shortName"):
            if col in cols:
                q = f"SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.{col}"
                out.update(v for (v,) in con.execute(q))
        return out
    finally:
        con.close()


def ncu_kernel_names(path: Path) -> set[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.reader(lines[start:]))
    k = rows[0].index("Kernel Name")
    return {r[k] for r in rows[1:] if len(r) > k and r[k] and r[0].isdigit()}


def trace_names(h200: Path, foreign: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for d in (h200, foreign):
        for p in sorted(d.glob("*.json.gz")):
            if ".meta." not in p.name:
                out[p.name] = kineto_kernel_names(p)
        for p in sorted(d.glob("*.sqlite")):
            out[p.name] = nsys_kernel_names(p)
        for p in sorted(d.glob("*.ncu.csv")):
            out[p.name] = ncu_kernel_names(p)
    return out


@pytest.fixture(scope="module")
def names_by_trace(h200: Path, foreign: Path) -> dict[str, set[str]]:
    return trace_names(h200, foreign)


def test_trace_name_counts(names_by_trace: dict[str, set[str]]) -> None:
    # Distinct kernel names per file, counted independently with zcat | python json / sqlite3 / csv:
    # Kineto: events with cat == "kernel" ("Kernel" in the 2021 file); nsys: DISTINCT StringIds values of
    # demangledName + mangledName + shortName; ncu: the "Kernel Name" column.
    assert {k: len(v) for k, v in names_by_trace.items()} == {
        "flashinfer_decode_small.pt.trace.json.gz": 5,
        "flashinfer_decode_sweep.pt.trace.json.gz": 6,
        "flashinfer_fa2_decode_sweep.pt.trace.json.gz": 5,
        "flashinfer_decode.sqlite": 18,
        "flashinfer_decode.ncu.csv": 2,
        "hta_a100_alexnet_critical_path_trace.json.gz": 16,
        "kineto_tbplugin_v100_resnet50_worker0.1623143089861.pt.trace.json.gz": 67,
        "tracelens_h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz": 26,
        "fuser_h200_report1.sqlite": 33,  # nvjet_... is its own mangled and short name
        "pipit_saxpy-mpi-cuda_nsys_perlmutter0.sqlite": 3,
    }


# What each real name is, written from the libraries' own naming (cuBLAS, cuDNN, PyTorch ATen, FlashInfer,
# nvFuser), independently of rules.toml: the first entry whose regex is found in the name (as stored in
# the file, mangled or not) gives the expected (family, backend). Every real name must hit an entry.
ORACLE: list[tuple[str, str, str | None]] = [
    (r"BatchDecodeWithPagedKVCacheKernel", "attention", "flashinfer-cuda-core"),
    (r"BatchPrefillWithPagedKVCacheKernel", "attention", "flashinfer-fa2"),
    (r"PrefillWithKVCacheKernel", "attention", "flashinfer-sm90"),
    (r"VariableLengthMergeStatesKernel", "merge", "flashinfer"),
    (r"pytorch_flash::flash_fwd_kernel", "attention", "pytorch-flash"),
    (r"^nvjet_|^sm90_xmma_gemm|^volta_sgemm|^ampere_\w*gemm|Kernel2<cutlass_80|splitKreduce|epilogue::impl",
     "gemm", "cublas"),
    (r"scudnn|xmma_fprop|convolve_sgemm|wgrad_alg0|dgrad_engine|[Ww]inograd", "gemm", "cudnn"),
    (r"bn_[fb]w", "norm", "cudnn"),
    (r"im2col|nchwToNhwc|nhwcToNchw", "memory", "cudnn"),
    (r"cask_cudnn|fft2d", "other", "cudnn"),
    (r"scalePackedTensor", "elementwise", "cudnn"),
    (r"[Cc]opy|CatArray|indexSelect|FillFunctor", "memory", "pytorch"),
    (r"softmax_warp|elementwise_kernel|reduce_kernel|fused_dropout|distribution_elementwise", "elementwise", "pytorch"),
    (r"pool|cunn_ClassNLL", "other", "pytorch"),
    (r"nvfuser", "other", "nvfuser"),
    (r"saxpy", "other", None),
]


def test_every_real_name_gets_the_right_family_and_backend(names_by_trace: dict[str, set[str]]) -> None:
    checked = 0
    for trace, names in names_by_trace.items():
        for n in names:
            exp = next(((f, b) for pat, f, b in ORACLE if re.search(pat, n)), None)
            assert exp is not None, f"{trace}: no oracle entry for {n[:120]}"
            lab = label(n)
            assert (lab.family, lab.backend) == exp, f"{trace}: {n[:160]} -> {lab}"
            assert lab.phase in ("decode", "prefill", "unknown") and lab.phase_evidence
            checked += 1
    assert checked == 181  # the sum of test_trace_name_counts


def test_real_attention_labels_per_trace(names_by_trace: dict[str, set[str]]) -> None:
    def fams(trace: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in names_by_trace[trace]:
            key = f"{label(n).family}/{label(n).backend}"
            out[key] = out.get(key, 0) + 1
        return out

    # The sweep has the CUDA-core decode kernel, its merge kernel, the SM90 kernel and 3 PyTorch setup kernels.
    assert fams("flashinfer_decode_sweep.pt.trace.json.gz") == {
        "attention/flashinfer-cuda-core": 1, "merge/flashinfer": 1, "attention/flashinfer-sm90": 1,
        "elementwise/pytorch": 3,
    }
    assert fams("flashinfer_fa2_decode_sweep.pt.trace.json.gz") == {
        "attention/flashinfer-fa2": 1, "merge/flashinfer": 1, "elementwise/pytorch": 3,
    }
    # nsys: each of the 6 kernels three times (demangled, mangled, short name).
    assert fams("flashinfer_decode.sqlite") == {
        "attention/flashinfer-cuda-core": 3, "merge/flashinfer": 3, "attention/flashinfer-sm90": 3,
        "elementwise/pytorch": 9,
    }


def test_labels_same_without_prefilter(names_by_trace: dict[str, set[str]]) -> None:
    """The literal pre-check is a pure speed-up: it never changes a label."""
    fast, slow = load_rules(), RuleSet([read_rules_file(BUILTIN)], prefilter=False)
    for names in names_by_trace.values():
        for n in names:
            assert fast.label(n) == slow.label(n), n
    for n in [r[1] for r in RULE_EXAMPLES]:
        assert fast.label(n) == slow.label(n), n


# ---------------------------------------------------------------------------------------------------
# The required real names, exactly
# ---------------------------------------------------------------------------------------------------

DECODE_KINETO = (
    "void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, 1u, 8u, 16u, 8u, 1u, "
    "flashinfer::DefaultAttention<false, false, false, false>, Params>(Params)"
)
DECODE_NSYS = (
    "void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, (unsigned int)2, "
    "(unsigned int)1, (unsigned int)8, (unsigned int)16, (unsigned int)8, (unsigned int)1, "
    "flashinfer::DefaultAttention<(bool)0, (bool)0, (bool)0, (bool)0>, Params>(T9)"
)
DECODE_NCU = "void BatchDecodeWithPagedKVCacheKernel<0, 2, 1, 8, 16, 8, 1, DefaultAttention<0, 0, 0, 0>, Params>(T9)"
DECODE_MANGLED = (
    "_ZN10flashinfer33BatchDecodeWithPagedKVCacheKernelILNS_15PosEncodingModeE0ELj2ELj1ELj8ELj16ELj8ELj1E"
    "NS_16DefaultAttentionILb0ELb0ELb0ELb0EEE6ParamsEEvT7_"
)
FA2_DECODE = (
    "void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)0, 16u, 1u, "
    "2u, 8u, 8u, 1u, 4u, (flashinfer::PosEncodingMode)0, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, int, "
    "flashinfer::DefaultAttention<false, false, false, false> >, PagedParams>(PagedParams)"
)
# Hand-mangled from FA2_DECODE; `c++filt` prints exactly FA2_DECODE for it.
FA2_DECODE_MANGLED = (
    "_ZN10flashinfer34BatchPrefillWithPagedKVCacheKernelINS_12KernelTraitsILNS_8MaskModeE0ELj16ELj1ELj2ELj8ELj8E"
    "Lj1ELj4ELNS_15PosEncodingModeE0E13__nv_bfloat16S4_S4_fiNS_16DefaultAttentionILb0ELb0ELb0ELb0EEEEE11PagedParams"
    "EEvT0_"
)
MERGE_KINETO = (
    "void flashinfer::PersistentVariableLengthMergeStatesKernel<8u, 16u, 8u, 4u, __nv_bfloat16, __nv_bfloat16, int>"
    "(__nv_bfloat16*, float*, int*, __nv_bfloat16*, float*, unsigned int, unsigned int*, unsigned int)"
)
SM90_PREFIX = "void flashinfer::PrefillWithKVCacheKernel<flashinfer::SparseCollectiveMainloop<"
PYTORCH_FLASH = (
    "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, "
    "cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, true, "
    "false, false, false, true, false>(pytorch_flash::Flash_fwd_params)"
)


@pytest.mark.parametrize("name", [DECODE_KINETO, DECODE_NSYS, DECODE_NCU, DECODE_MANGLED])
def test_cuda_core_decode_in_every_spelling(name: str) -> None:
    lab = label(name)
    assert (lab.family, lab.backend, lab.phase, lab.rule) == (
        "attention", "flashinfer-cuda-core", "decode", "flashinfer-batch-decode")
    assert lab.kernel == "BatchDecodeWithPagedKVCacheKernel"
    # <posenc 0, stages 2, tile 1, vec 8, bdx 16, bdy 8, bdz 1>: G = bdy = 8, D = vec * bdx = 128 (KERNELS.md §1).
    assert dict(lab.params) == {
        "pos_encoding": 0, "num_stages_smem": 2, "tile_size_per_bdx": 1, "vec_size": 8, "bdx": 16, "bdy": 8,
        "bdz": 1, "head_dim": 128, "group_size": 8,
    }
    assert lab.is_attention and not lab.is_merge


def test_real_decode_names_are_in_the_traces(names_by_trace: dict[str, set[str]]) -> None:
    assert DECODE_KINETO in names_by_trace["flashinfer_decode_sweep.pt.trace.json.gz"]
    assert DECODE_NSYS in names_by_trace["flashinfer_decode.sqlite"]
    assert DECODE_MANGLED in names_by_trace["flashinfer_decode.sqlite"]
    assert DECODE_NCU in names_by_trace["flashinfer_decode.ncu.csv"]
    assert FA2_DECODE in names_by_trace["flashinfer_fa2_decode_sweep.pt.trace.json.gz"]
    assert MERGE_KINETO in names_by_trace["flashinfer_decode_sweep.pt.trace.json.gz"]
    assert PYTORCH_FLASH in names_by_trace["tracelens_h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"]


@pytest.mark.parametrize("name", [FA2_DECODE, FA2_DECODE_MANGLED])
def test_fa2_prefill_kernel_doing_decode(name: str) -> None:
    lab = label(name)
    assert (lab.family, lab.backend, lab.phase) == ("attention", "flashinfer-fa2", "decode")
    assert "CTA_TILE_Q 16" in lab.phase_evidence and "heuristic" in lab.phase_evidence
    p = lab.params
    assert (p["mask_mode"], p["cta_tile_q"], p["num_mma_q"], p["num_mma_kv"]) == (0, 16, 1, 2)
    assert (p["num_mma_d_qk"], p["num_mma_d_vo"], p["num_warps_q"], p["num_warps_kv"]) == (8, 8, 1, 4)
    assert (p["head_dim"], p["dtype_q"], p["dtype_kv"], p["dtype_o"]) == (128, "bf16", "bf16", "bf16")


def test_sm90_real_names(names_by_trace: dict[str, set[str]]) -> None:
    names = [n for n in names_by_trace["flashinfer_decode.sqlite"] | names_by_trace[
        "flashinfer_decode_sweep.pt.trace.json.gz"] if "PrefillWithKVCacheKernel" in n]
    assert len(names) == 4  # nsys demangled, mangled, short; Kineto
    for n in names:
        lab = label(n)
        assert (lab.family, lab.backend, lab.phase, lab.kernel) == (
            "attention", "flashinfer-sm90", "unknown", "PrefillWithKVCacheKernel")
        if n != "PrefillWithKVCacheKernel":
            # AttentionKernelTraits<USE_TMA_LOAD_KV=false, HEAD_DIM_QK=128, HEAD_DIM_VO=128, CTA_Q=128, CTA_KV=96,
            # NUM_STAGES=2, bf16...> (flashinfer include/flashinfer/attention/hopper/kernel_traits.cuh)
            assert {k: lab.params[k] for k in ("use_tma_load_kv", "head_dim", "cta_q", "cta_kv", "num_stages")} == {
                "use_tma_load_kv": False, "head_dim": 128, "cta_q": 128, "cta_kv": 96, "num_stages": 2}
            assert lab.params["scheduler"] == "BatchPrefillPersistentTileScheduler"
            assert lab.params["paged"] is True and lab.params["fp8"] is False and lab.params["dtype_kv"] == "bf16"
        else:
            assert dict(lab.params) == {}  # a short name shows no template arguments


def test_merge_and_pytorch_flash() -> None:
    lab = label(MERGE_KINETO)
    assert (lab.family, lab.backend, lab.is_merge) == ("merge", "flashinfer", True)
    assert dict(lab.params) == {"vec_size": 8, "bdx": 16, "bdy": 8, "num_smem_stages": 4, "dtype_in": "bf16",
                                "dtype_o": "bf16", "head_dim": 128}
    lab = label(PYTORCH_FLASH)
    assert (lab.family, lab.backend, lab.kernel) == ("attention", "pytorch-flash", "flash_fwd_kernel")
    assert dict(lab.params) == {"head_dim": 64, "kBlockM": 128, "kBlockN": 128, "num_warps": 4, "dtype": "bf16"}


# ---------------------------------------------------------------------------------------------------
# FlashAttention-3, in Kineto, nsys and mangled spellings
# ---------------------------------------------------------------------------------------------------

# A real FA3 name (SGLang on H100, head_dim 256: TileShape 128x80x256), as published in a vLLM/SGLang profile
# table; template arguments per hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp.
_FA3_ARGS = (
    "flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, "
    "cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<80>, cute::C<256> >, 256, cutlass::bfloat16_t, float, "
    "cutlass::arch::Sm90, false, false, false, true, true, false, false, true, true, true, true, false, "
    "cutlass::bfloat16_t, 1>, flash::CollectiveEpilogueFwd<cute::tuple<cute::C<128>, cute::C<256>, cute::C<80> >, "
    "cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cutlass::bfloat16_t, cutlass::arch::Sm90, 256, true, true, "
    "true, false, 1>, flash::VarlenDynamicPersistentTileScheduler<128, 80, 256, 128, true, true, true, false, false, "
    "true> > >"
)
FA3_KINETO = f"void cutlass::device_kernel<{_FA3_ARGS} >({_FA3_ARGS}::Params)"
# Hand-mangled from FA3_KINETO; `c++filt` prints exactly FA3_KINETO for it.
FA3_MANGLED = (
    "_ZN7cutlass13device_kernelIN5flash20enable_sm90_or_laterINS1_16FlashAttnFwdSm90INS1_25CollectiveMainloopFwdSm90"
    "ILi2EN4cute5tupleIJNS5_1CILi1EEES8_S8_EEES6_IJS7_ILi128EES7_ILi80EES7_ILi256EEEELi256ENS_10bfloat16_tEfNS_4arch"
    "4Sm90ELb0ELb0ELb0ELb1ELb1ELb0ELb0ELb1ELb1ELb1ELb1ELb0ESE_Li1EEENS1_21CollectiveEpilogueFwdIS6_IJSA_SC_SB_EES9_"
    "SE_SG_Li256ELb1ELb1ELb1ELb0ELi1EEENS1_36VarlenDynamicPersistentTileSchedulerILi128ELi80ELi256ELi128ELb1ELb1ELb1"
    "ELb0ELb0ELb1EEEEEEEEEvNT_6ParamsE"
)
# The vLLM/SGLang fork's decode tile (kBlockM 64, D 128) after the 2026 enable_sm90 rename, nsys style.
FA3_NSYS = (
    "void cutlass::device_kernel<flash::enable_sm90<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<(int)2, "
    "cute::tuple<cute::C<(int)1>, cute::C<(int)1>, cute::C<(int)1>>, cute::tuple<cute::C<(int)64>, cute::C<(int)128>, "
    "cute::C<(int)128>>, (int)128, cutlass::bfloat16_t, float, cutlass::arch::Sm90, (bool)0, (bool)0, (bool)0, "
    "(bool)1, (bool)1, (bool)0, (bool)0, (bool)1, (bool)1, (bool)1, (bool)1, (bool)0, cutlass::bfloat16_t, (int)1>, "
    "flash::CollectiveEpilogueFwd<cute::tuple<cute::C<(int)64>, cute::C<(int)128>, cute::C<(int)128>>, "
    "cute::tuple<cute::C<(int)1>, cute::C<(int)1>, cute::C<(int)1>>, cutlass::bfloat16_t, cutlass::arch::Sm90, "
    "(int)128, (bool)1, (bool)1, (bool)1, (bool)0, (int)1>, flash::VarlenDynamicPersistentTileScheduler<(int)64, "
    "(int)128, (int)128, (int)128, (bool)1, (bool)1, (bool)1, (bool)0, (bool)0, (bool)1>>>>(T1::Params)"
)
FA3_COMBINE_KINETO = (
    "void cutlass::device_kernel<flash::FlashAttnFwdCombine<cute::tuple<cute::C<8>, cute::C<128> >, 5, 256, 1, false, "
    "true, cutlass::bfloat16_t, float, cutlass::arch::Sm90> >(flash::FlashAttnFwdCombine<cute::tuple<cute::C<8>, "
    "cute::C<128> >, 5, 256, 1, false, true, cutlass::bfloat16_t, float, cutlass::arch::Sm90>::Params)"
)
FA3_COMBINE_NSYS = (
    "void cutlass::device_kernel<flash::FlashAttnFwdCombine<cute::tuple<cute::C<(int)8>, cute::C<(int)128>>, (int)5, "
    "(int)256, (int)1, (bool)0, (bool)1, cutlass::bfloat16_t, float, cutlass::arch::Sm90>>(T1::Params)"
)


def test_fa3_mangled_demangles_to_kineto_text() -> None:
    assert demangle(FA3_MANGLED) == FA3_KINETO
    assert demangle(FA2_DECODE_MANGLED) == FA2_DECODE


@pytest.mark.parametrize(("name", "tile"), [(FA3_KINETO, (128, 80, 256)), (FA3_MANGLED, (128, 80, 256)),
                                            (FA3_NSYS, (64, 128, 128))])
def test_fa3_forward(name: str, tile: tuple[int, int, int]) -> None:
    lab = label(name)
    assert (lab.family, lab.backend, lab.phase, lab.kernel, lab.rule) == (
        "attention", "fa3", "unknown", "FlashAttnFwdSm90", "fa3-forward")
    p = lab.params
    assert (p["kBlockM"], p["kBlockN"], p["head_dim"]) == tile
    assert (p["scheduler"], p["stages"], p["dtype"]) == ("VarlenDynamicPersistentTileScheduler", 2, "bf16")


@pytest.mark.parametrize("name", [FA3_COMBINE_KINETO, FA3_COMBINE_NSYS])
def test_fa3_combine(name: str) -> None:
    lab = label(name)
    assert (lab.family, lab.backend, lab.kernel) == ("merge", "fa3", "FlashAttnFwdCombine")
    p = lab.params
    assert (p["kBlockM"], p["kBlockK"], p["kLogMaxSplits"], p["num_threads"], p["dtype"]) == (8, 128, 5, 256, "bf16")


# ---------------------------------------------------------------------------------------------------
# One example per rule (the table must exercise every rule of rules.toml)
# ---------------------------------------------------------------------------------------------------

_SM90_FP8 = (
    "void flashinfer::FP8PrefillWithKVCacheKernel<flashinfer::FP8SparseCollectiveMainloop<PagedParams::"
    "AdditionalParams, flashinfer::FP8AttentionKernelTraits<true, 128, 128, 128, 4, cutlass::float_e4m3_t, "
    "cutlass::half_t, flashinfer::StandardFP8Attention>, false>, flashinfer::FP8CollectiveEpilogue<"
    "flashinfer::FP8AttentionKernelTraits<true, 128, 128, 128, 4, cutlass::float_e4m3_t, cutlass::half_t, "
    "flashinfer::StandardFP8Attention> >, flashinfer::FP8AttentionKernelTraits<true, 128, 128, 128, 4, "
    "cutlass::float_e4m3_t, cutlass::half_t, flashinfer::StandardFP8Attention>, false, "
    "flashinfer::BatchPrefillPersistentTileScheduler<int>, false>(PagedParams)"
)

# As cuDNN 9.19 names it in a Kineto trace (examples/sdpa/sdpa_q32kv4d128_torch.pt.trace.json.gz).
CUDNN_LEAN_REDUCTION = ("void cudnn::fusion::lean_reduction_kernel<false, false, false>(void*, float*, float*, float*, "
                        "float*, float const*, float*, float*, float*, float*, float*, "
                        + ", ".join(["unsigned int"] * 20) + ", bool)")

# (rule, name, family, backend, phase, params that must be present)
RULE_EXAMPLES: list[tuple[str, str, str, str | None, str, dict[str, object]]] = [
    ("flashinfer-decode-mla",
     "void flashinfer::BatchDecodeWithPagedKVCacheKernelMLA<(flashinfer::PosEncodingMode)0, 2u, 16u, 8u, 16u, 1u, "
     "8u, Params>(Params)", "attention", "flashinfer-cuda-core", "decode", {}),
    ("flashinfer-batch-decode", DECODE_KINETO, "attention", "flashinfer-cuda-core", "decode", {"group_size": 8}),
    # FlashInfer 0.1.6 layout: <LogitsPostHook, PosEncodingMode, stages, tile, vec, bdx, bdy, bdz, PageStorage, ...>
    ("flashinfer-batch-decode",
     "void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::LogitsPostHook)0, (flashinfer::PosEncodingMode)0,"
     " 2u, 4u, 8u, 16u, 4u, 1u, (flashinfer::PageStorage)0, __half, __half, __half, int>(__half*, int*, "
     "flashinfer::paged_kv_t<(flashinfer::PageStorage)0, __half, int>, flashinfer::kv_partition_info_t<int>, __half*, "
     "float*, bool*, bool, int, float, float, float, float)",
     "attention", "flashinfer-cuda-core", "decode",
     {"group_size": 4, "head_dim": 128, "dtype_kv": "fp16", "logits_post_hook": 0}),
    ("flashinfer-single-decode",
     "void flashinfer::SingleDecodeWithKVCacheKernel<(flashinfer::PosEncodingMode)0, 2u, 8u, 8u, 16u, 1u, 8u, "
     "flashinfer::DefaultAttention<false, false, false, false>, Params>(Params)",
     "attention", "flashinfer-cuda-core", "decode", {"group_size": 1, "head_dim": 128, "bdz": 8}),
    ("flashinfer-pod",
     "void flashinfer::PODWithKVCacheTensorKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)1, 128u, 2u, 4u, 8u, "
     "8u, 4u, 1u>, flashinfer::KernelTraits<(flashinfer::MaskMode)0, 16u, 1u, 2u, 8u, 8u, 1u, 4u>, false, "
     "PrefillParams, DecodeParams>(unsigned int, PrefillParams, DecodeParams, int*)",
     "attention", "flashinfer-fa2", "unknown", {}),
    ("flashinfer-mla",
     "void flashinfer::mla::BatchMLAPagedAttentionKernel<flashinfer::mla::KernelTraits<true, 1u, 2u, 8u, 64u, "
     "__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int>, Params>(Params)",
     "attention", "flashinfer-mla", "unknown", {}),
    ("flashinfer-fa2-prefill", FA2_DECODE, "attention", "flashinfer-fa2", "decode", {"cta_tile_q": 16}),
    ("flashinfer-fa2-prefill",
     "void flashinfer::BatchPrefillWithRaggedKVCacheKernel<flashinfer::KernelTraits<(flashinfer::MaskMode)1, 128u, "
     "2u, 4u, 8u, 8u, 4u, 1u, (flashinfer::PosEncodingMode)0, __half, __half, __half, float, int, "
     "flashinfer::DefaultAttention<false, false, false, false> >, RaggedParams>(RaggedParams)",
     "attention", "flashinfer-fa2", "prefill", {"mask_mode": 1, "cta_tile_q": 128, "dtype_q": "fp16"}),
    # 0.7.x: a leading SAME_KV_STRIDES bool; G = 32 uses CTA_TILE_Q 64, which reads as 'unknown'.
    ("flashinfer-fa2-prefill",
     "void flashinfer::BatchPrefillWithPagedKVCacheKernel<true, flashinfer::KernelTraits<(flashinfer::MaskMode)0, "
     "64u, 1u, 2u, 8u, 8u, 4u, 1u, (flashinfer::PosEncodingMode)0, __nv_bfloat16, __nv_fp8_e4m3, __nv_bfloat16, float,"
     " int, flashinfer::DefaultAttention<false, false, false, false> >, PagedParams>(PagedParams)",
     "attention", "flashinfer-fa2", "unknown", {"cta_tile_q": 64, "dtype_kv": "fp8_e4m3"}),
    # 0.2.0 layout: <MaskMode, PosEncodingMode, NUM_MMA_Q, NUM_MMA_D, NUM_MMA_KV, NUM_WARPS_Q, NUM_WARPS_KV, ...>
    ("flashinfer-fa2-prefill",
     "void flashinfer::BatchPrefillWithPagedKVCacheKernel<(flashinfer::MaskMode)0, (flashinfer::PosEncodingMode)0, "
     "1u, 8u, 2u, 1u, 4u, float, flashinfer::DefaultAttention<false, false, false, false>, PagedParams>("
     "flashinfer::uint_fastdiv, PagedParams)",
     "attention", "flashinfer-fa2", "decode", {"cta_tile_q": 16, "head_dim": 128, "num_warps_kv": 4}),
    ("flashinfer-fa2-prefill", "BatchPrefillWithPagedKVCacheKernel", "attention", "flashinfer-fa2", "unknown", {}),
    ("flashinfer-sm90-fp8", _SM90_FP8, "attention", "flashinfer-sm90", "unknown", {"fp8": True, "paged": True}),
    ("flashinfer-sm90", "PrefillWithKVCacheKernel", "attention", "flashinfer-sm90", "unknown", {}),
    ("flashinfer-prepare",
     "void flashinfer::BlockSparseIndicesToVectorSparseOffsetsKernel<int>(int*, int*, int*, int*, unsigned int, "
     "unsigned int, unsigned int, unsigned int)", "prepare", "flashinfer", "unknown", {}),
    ("flashinfer-merge-varlen", MERGE_KINETO, "merge", "flashinfer", "unknown", {"head_dim": 128}),
    ("flashinfer-merge-varlen",
     "void flashinfer::VariableLengthMergeStatesKernel<8u, 16u, 8u, 4u, __half, __half, int>(__half*, float*, int*, "
     "__half*, float*, unsigned int)", "merge", "flashinfer", "unknown", {"bdy": 8, "dtype_in": "fp16"}),
    ("flashinfer-merge",
     "void flashinfer::MergeStateInPlaceKernel<8u, __nv_bfloat16>(__nv_bfloat16*, float*, __nv_bfloat16*, float*, "
     "unsigned char*, unsigned int, unsigned int)", "merge", "flashinfer", "unknown", {"vec_size": 8}),
    ("fa3-combine", FA3_COMBINE_KINETO, "merge", "fa3", "unknown", {"kBlockK": 128}),
    ("fa3-prepare",
     "void flash::prepare_varlen_num_blocks_kernel<1, true>(int, int, int, int const*, int const*, int const*, "
     "int const*, int const*, int const*, int, int, int, int, int, cutlass::FastDivmod, cutlass::FastDivmod, int*, "
     "int*, int*, int*, int*, bool)", "prepare", "fa3", "unknown", {"num_warps": 1, "sort": True}),
    ("fa3-prepare", "flash::prepare_varlen_num_blocks_kernel(flash::Flash_fwd_params)", "prepare", "fa3", "unknown",
     {}),
    ("fa3-backward",
     "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnBwdSm90<flash::CollectiveMainloopBwdSm90"
     "<2, 2, 2, cute::tuple<cute::C<64>, cute::C<128>, cute::C<128> >, cutlass::bfloat16_t, float, "
     "cutlass::arch::Sm90> > > >(...)", "attention", "fa3", "unknown", {}),
    ("fa3-forward", FA3_NSYS, "attention", "fa3", "unknown", {"kBlockM": 64}),
    ("fa3-beta",
     "void flash::compute_attn_ws<Flash_fwd_kernel_traits<128, 128, 128, 12, 2, false, 1, cutlass::half_t>, true>("
     "flash::CollectiveMainloopFwd<Flash_fwd_kernel_traits<128, 128, 128, 12, 2, false, 1, cutlass::half_t>, true>::"
     "Params)", "attention", "fa3", "unknown", {"head_dim": 128, "kBlockM": 128, "dtype": "fp16"}),
    ("flashmla-combine",
     "void flash::flash_fwd_splitkv_mla_combine_kernel<cutlass::bfloat16_t, float, long, 512, 64>("
     "Flash_fwd_mla_params)", "merge", "flashmla", "decode", {}),
    # As published in deepseek-ai/profile-data decode.json.
    ("flashmla",
     "void flash::flash_fwd_splitkv_mla_kernel<Flash_fwd_kernel_traits_mla<576, 64, 64, 8, cutlass::bfloat16_t, 512, "
     "true, 0, cutlass::bfloat16_t, cutlass::bfloat16_t>, true, flash::SharedStorageMLA<Flash_fwd_kernel_traits_mla<"
     "576, 64, 64, 8, cutlass::bfloat16_t, 512, true, 0, cutlass::bfloat16_t, cutlass::bfloat16_t> > >("
     "Flash_fwd_mla_params)", "attention", "flashmla", "decode", {"head_dim": 576, "head_dim_v": 512}),
    ("pytorch-flash-combine",
     "void pytorch_flash::flash_fwd_splitkv_combine_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 64, 128, 4, "
     "false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, "
     "4, 5, true>(pytorch_flash::Flash_fwd_params)", "merge", "pytorch-flash", "unknown",
     {"kBlockM": 4, "kLogMaxSplits": 5, "head_dim": 128}),
    ("pytorch-flash", PYTORCH_FLASH, "attention", "pytorch-flash", "unknown", {"head_dim": 64}),
    ("fa2-combine",
     "void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
     "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, 4, 5, true>("
     "flash::Flash_fwd_params)", "merge", "fa2", "unknown", {"kLogMaxSplits": 5}),
    ("fa2",
     "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t,"
     " Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, false, false, false, false, true, true, false, "
     "false>(flash::Flash_fwd_params)", "attention", "fa2", "unknown", {"head_dim": 128, "kBlockM": 64}),
    ("pytorch-mem-efficient",
     "fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
     "cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)",
     "attention", "pytorch-mem-efficient", "unknown", {}),
    ("cudnn-sdpa", "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_kernel0_0",
     "attention", "cudnn", "unknown", {}),
    # cuDNN's lean-attention reduction after a decode SDPA call (PyTorch SDPBackend.CUDNN_ATTENTION; cuDNN 9.19 on
    # the H200, examples/sdpa), and the attention kernel it follows there.
    ("cudnn-sdpa-reduction", CUDNN_LEAN_REDUCTION, "merge", "cudnn", "unknown", {}),
    ("cudnn-sdpa",
     "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35_16x128x128_1x4x1_cga1x1x1_kernel0_0",
     "attention", "cudnn", "unknown", {}),
    ("trtllm-mmha",
     "void tensorrt_llm::kernels::mmha::masked_multihead_attention_kernel<unsigned short, unsigned short, "
     "unsigned short, tensorrt_llm::kernels::KVBlockArray, 128, 256, 4, 128, false, false, false, true, false, "
     "false>(tensorrt_llm::kernels::Multihead_attention_params<unsigned short, false>, "
     "tensorrt_llm::kernels::KVBlockArray, tensorrt_llm::kernels::KVLinearBuffer)",
     "attention", "trtllm", "decode", {}),
    ("trtllm-xqa", "kernel_mha", "attention", "trtllm", "decode", {}),
    ("trtllm-gen",
     "fmhaSm100aKernel_QBfloat16KvBfloat16OBfloat16H128PagedKvDenseP32MultiCtasKvCgaVarSeqQ16Kv128PersistentSwapsAb"
     "ForGen", "attention", "trtllm", "decode", {"for_gen": True, "head_dim": 128}),
    ("trtllm-fmha-v2", "fmha_v2_flash_attention_bf16_64_128_S_qkv_128_causal_sm90_kernel_nl",
     "attention", "trtllm", "prefill", {}),
    ("vllm-paged-reduce",
     "void vllm::paged_attention_v2_reduce_kernel<c10::BFloat16, 128, 128, 512>(c10::BFloat16*, float const*, "
     "float const*, c10::BFloat16 const*, int const*, int)", "merge", "vllm", "decode", {}),
    ("vllm-paged-attention",
     "void vllm::paged_attention_v2_kernel<c10::BFloat16, c10::BFloat16, 128, 16, 128, "
     "(vllm::Fp8KVCacheDataType)0, false, 512>(float*, float*, c10::BFloat16*, c10::BFloat16 const*, "
     "c10::BFloat16 const*, c10::BFloat16 const*, int, float, int const*, int const*, int, float const*, int, int, "
     "int, float const*, float const*, int, int, int)", "attention", "vllm", "decode", {}),
    ("vllm-merge",
     "void vllm::merge_attn_states_kernel<c10::BFloat16, 128u>(c10::BFloat16*, float*, c10::BFloat16 const*, "
     "float const*, c10::BFloat16 const*, float const*, unsigned int, unsigned int, unsigned int)",
     "merge", "vllm", "unknown", {}),
    ("triton-decode-reduce", "_fwd_kernel_stage2", "merge", "triton", "decode", {}),
    ("triton-decode", "_fwd_grouped_kernel_stage1", "attention", "triton", "decode", {}),
    ("triton-attention", "kernel_unified_attention_2d", "attention", "triton", "unknown", {}),
    ("triton-attention-prepare", "create_flashinfer_kv_indices_triton", "prepare", "triton", "unknown", {}),
    ("cudnn-conv", "volta_scudnn_128x64_relu_interior_nn_v1", "gemm", "cudnn", "unknown", {}),
    ("cublas", "nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT", "gemm", "cublas", "unknown", {}),
    ("deepgemm",
     "void deep_gemm::fp8_gemm_kernel<4096u, 7168u, 128u, 160u, 128u, 1u, 8u, 4u, 2u, "
     "(deep_gemm::GemmType)0>(__nv_bfloat16*, float*, int*, unsigned int, CUtensorMap, CUtensorMap, CUtensorMap, "
     "CUtensorMap)", "gemm", "deepgemm", "unknown", {}),
    ("triton-gemm", "fused_moe_kernel", "gemm", "triton", "unknown", {}),
    ("cutlass-gemm",
     "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
     "cutlass::gemm::collective::CollectiveMma<...>, void> >(...)", "gemm", "cutlass", "unknown", {}),
    ("gemm", "void my_lib::batched_gemv_kernel<float>(float const*, float*)", "gemm", None, "unknown", {}),
    ("nccl", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
     "communication", "nccl", "unknown", {}),
    ("nccl", "ncclKernel_AllReduce_RING_LL_Sum_half(ncclWorkElem)", "communication", "nccl", "unknown", {}),
    ("communication",
     "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, "
     "__nv_bfloat16*, int, int)", "communication", "vllm", "unknown", {}),
    ("norm",
     "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, "
     "__nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, float)", "norm", "flashinfer", "unknown", {}),
    ("triton-pointwise", "triton_poi_fused_add_0", "elementwise", "triton", "unknown", {}),
    # Inductor's fused kernels name the ops fused into them: an all_reduce among them is not a collective.
    ("triton-pointwise", "triton_red_fused__to_copy_add_all_reduce_embedding_mean_mul_pow_rsqrt_0", "elementwise",
     "triton", "unknown", {}),
    ("triton-pointwise", "triton_poi_fused_all_reduce_embedding_1", "elementwise", "triton", "unknown", {}),
    ("triton-pointwise", "triton_per_fused_add_all_gather_embedding_mul_2", "elementwise", "triton", "unknown", {}),
    ("memcpy", "Memcpy HtoD (Pageable -> Device)", "memory", "cuda", "unknown", {}),
    ("kv-cache-write",
     "void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>("
     "__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, __nv_bfloat16*, long const*, long, long, long, long,"
     " int, int, int, float const*, float const*)", "memory", "vllm", "unknown", {}),
    ("memory",
     "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<2u>, "
     "unsigned int, 4, 64, 64>(at::native::(anonymous namespace)::OpaqueType<2u>*, at::native::(anonymous namespace)"
     "::CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<2u>, unsigned int, 64, 64>, "
     "at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)",
     "memory", "pytorch", "unknown", {}),
    ("pytorch-softmax",
     "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true>(float*, float const*, int, int, "
     "int)", "elementwise", "pytorch", "unknown", {}),
    ("pytorch-elementwise",
     "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, at::detail::Array<char*, 3> >"
     "(int, at::native::AddFunctor<float>, at::detail::Array<char*, 3>)", "elementwise", "pytorch", "unknown", {}),
    ("activation",
     "void flashinfer::activation::act_and_mul_kernel<__nv_bfloat16, &(float silu<float>(float const&))>("
     "__nv_bfloat16*, __nv_bfloat16 const*, int)", "elementwise", "flashinfer", "unknown", {}),
    ("scale-tensor",
     "void cudnn::ops::scalePackedTensor_kernel<float, float>(cudnnTensor4dStruct, float*, float)",
     "elementwise", "cudnn", "unknown", {}),
    ("sampling",
     "void flashinfer::sampling::TopKTopPSamplingFromProbKernel<1024u, (cub::BlockScanAlgorithm)0, "
     "(cub::BlockReduceAlgorithm)2, 4u, false, float, int>(float*, int*, float*, int*, unsigned int, float, float, "
     "unsigned int, unsigned long, unsigned long)", "other", "flashinfer", "unknown", {}),
    ("pytorch-other",
     "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float const*, int, int, int, "
     "int, int, int, int, int, int, int, int, int, int, int, float*, long*)", "other", "pytorch", "unknown", {}),
    ("cudnn-other", "cask_cudnn::computeOffsetsKernel(cask_cudnn::ComputeOffsetsParams)",
     "other", "cudnn", "unknown", {}),
    ("nvfuser", "nvfuser_none_f0_c0_r0_g0", "other", "nvfuser", "unknown", {}),
    # per source: vLLM csrc/cache_kernels.cu convert_fp8_kernel (MoE routing such as topkGatingSoftmax has its own
    # family now: tests/test_labels_stacks.py).
    ("library-other",
     "void vllm::convert_fp8_kernel<unsigned char, c10::BFloat16, (vllm::Fp8KVCacheDataType)1>(c10::BFloat16 const*, "
     "unsigned char*, float, long)", "other", "vllm", "unknown", {}),
]


@pytest.mark.parametrize(("rule", "name", "family", "backend", "phase", "params"), RULE_EXAMPLES,
                         ids=[f"{r[0]}-{i}" for i, r in enumerate(RULE_EXAMPLES)])
def test_rule(rule: str, name: str, family: str, backend: str | None, phase: str, params: dict[str, object]) -> None:
    lab = label(name)
    assert (lab.rule, lab.family, lab.backend, lab.phase) == (rule, family, backend, phase), lab
    assert {k: lab.params.get(k) for k in params} == params
    assert lab.kernel and len(lab.kernel) <= 80  # a short display name for every rule (memcpy too)


def test_every_rule_is_exercised() -> None:
    # The rules added for other serving stacks have their examples in tests/test_labels_stacks.py, which checks
    # that the two tables together exercise every rule.
    ids = load_rules().rule_ids()
    assert len(ids) == len(set(ids))
    assert {r[0] for r in RULE_EXAMPLES} <= set(ids)


def test_short_display_names() -> None:
    assert label(FA3_KINETO).kernel == "FlashAttnFwdSm90"  # unwrapped from cutlass::device_kernel<...>
    assert label("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(cutlass_80_simt_sgemm_128x32_"
                 "8x5_nn_align1::Params)").kernel == "cutlass_80_simt_sgemm_128x32_8x5_nn_align1"
    nsys_norm = ("std::enable_if<T2>(int)0&&vllm::_typeConvert<T1>::exists, void>::type "
                 "vllm::fused_add_rms_norm_kernel<c10::BFloat16, (int)8>(T1 *, T1 *, const T1 *, float, int, int)")
    assert (label(nsys_norm).kernel, label(nsys_norm).backend) == ("fused_add_rms_norm_kernel", "vllm")


# ---------------------------------------------------------------------------------------------------
# Fallback, robustness, speed-independent properties
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "kernel"), [
    ("saxpy(double *, double *, double *, double, int)", "saxpy"),
    ("_Z5saxpyPdS_S_di", "saxpy"),          # the pipit nsys export's mangled name
    ("_ZN3foo3barIXadL_Z3bazEEEEvv", "bar"),  # an expression argument this demangler does not read
    ("void my::ns::custom_kernel<3>(int)", "custom_kernel"),
    ("", ""),
])
def test_fallback(name: str, kernel: str) -> None:
    lab = label(name)
    assert (lab.family, lab.backend, lab.phase, lab.rule, lab.kernel) == ("other", None, "unknown", "fallback", kernel)
    assert dict(lab.params) == {}


_BUILTIN_RULES = RuleSet([read_rules_file(BUILTIN)])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200) | st.from_regex(r"_Z[0-9A-Za-z_]{0,60}", fullmatch=True)
       | st.from_regex(r"void [a-z:]{1,20}<[0-9a-z<>(), :]{0,60}>\([a-z ,*]{0,20}\)", fullmatch=True))
def test_never_crashes(name: str) -> None:
    lab = _BUILTIN_RULES.label(name)
    assert lab.family in FAMILIES and lab.phase in ("decode", "prefill", "unknown")


def test_label_is_cached_and_hashable() -> None:
    assert label(DECODE_KINETO) is label(DECODE_KINETO)
    assert len({label(DECODE_KINETO), label(DECODE_NSYS)}) == 1  # same label from two spellings
    assert isinstance(label(DECODE_KINETO), Label)
    with pytest.raises(TypeError):
        label(DECODE_KINETO).params["head_dim"] = 64  # type: ignore[index]


@functools.cache
def _libstdcxx_demangle() -> object | None:
    """libstdc++'s `__cxa_demangle` through ctypes, from benchmarks/demangle_compare.py (None without libstdc++)."""
    bench = Path(__file__).resolve().parents[1] / "benchmarks" / "demangle_compare.py"
    spec = importlib.util.spec_from_file_location("demangle_compare", bench)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.libstdcxx()


def test_demangler_matches_libstdcxx(names_by_trace: dict[str, set[str]]) -> None:
    ref = _libstdcxx_demangle()
    if ref is None:
        pytest.skip("libstdc++ not found: no reference demangler on this machine")
    mangled = sorted({n for names in names_by_trace.values() for n in names if n.startswith("_Z")})
    assert len(mangled) == 21  # 14 fuser (its 15th "mangled" name is nvjet_...) + 1 pipit + 6 flashinfer
    for n in [*mangled, FA3_MANGLED, FA2_DECODE_MANGLED]:
        assert demangle(n) == ref(n), n  # type: ignore[operator]


def test_demangler_rejects_every_cut_name_libstdcxx_rejects(names_by_trace: dict[str, set[str]]) -> None:
    """Every prefix of every real mangled name (byte-scraped names such as `_Z0` from a .nsys-rep are cut ones):
    ours reads exactly what libstdc++ reads. Before, `_Z0` demangled to '' and a template function cut after its
    return type (`...EEv`, no parameter types) to `void f<...>()`; 43 such prefixes of benchmarks/demangle_compare.py's
    names were read where libstdc++ rejects them."""
    ref = _libstdcxx_demangle()
    if ref is None:
        pytest.skip("libstdc++ not found: no reference demangler on this machine")
    mangled = sorted({n for names in names_by_trace.values() for n in names if n.startswith("_Z")})
    prefixes = {n[:k] for n in [*mangled, FA3_MANGLED, FA2_DECODE_MANGLED] for k in range(2, len(n))}
    wrong = [p for p in sorted(prefixes) if demangle(p) != ref(p)]  # type: ignore[operator]
    assert not wrong, wrong[:5]


@pytest.mark.parametrize("name", ["_Z0", "_Z0v", "_Z", "_ZN3fooIiEEv", FA3_MANGLED[:-len("vNT_6ParamsE")] + "v"])
def test_cut_names_do_not_demangle(name: str) -> None:
    assert demangle(name) is None


def test_bfloat16_t_reads_as_libstdcxx_13_prints_it() -> None:
    """DF16b (std::bfloat16_t, GCC 13's mangling; ROCm's aiter kernels in examples/engines): GCC 12's libstdc++
    returns nothing for it. The same name with DF16b swapped for Dh (half, also unsubstitutable) is what both read,
    so ours must print that text with `half` spelled std::bfloat16_t."""
    name = "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64ELi8ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib"
    assert demangle(name) == (
        "void aiter::add_rmsnorm_quant_kernel<std::bfloat16_t, std::bfloat16_t, 64, 8, false, false, true, 1>"
        "(std::bfloat16_t*, std::bfloat16_t*, float*, std::bfloat16_t*, std::bfloat16_t*, std::bfloat16_t*, double, "
        "int, int, int, int, int, int, int, bool)")
    ref = _libstdcxx_demangle()
    if ref is not None:
        half = ref(name.replace("DF16b", "Dh"))  # type: ignore[operator]
        assert half is not None and demangle(name) == half.replace("half", "std::bfloat16_t")


# ---------------------------------------------------------------------------------------------------
# Phase from context
# ---------------------------------------------------------------------------------------------------


def test_phase_in_context_from_real_range_names(h200: Path) -> None:
    # user_annotation names of the small trace: 'decode_step tc=T dist=D bs=B step=S' (18 of them, checked with zcat);
    # the nsys report's NVTX ranges are 'tc=T dist=D bs=B' (no phase word).
    ranges = {n for n in kineto_user_annotations(h200 / "flashinfer_decode_small.pt.trace.json.gz")}
    assert len(ranges) == 18 and all(r.startswith("decode_step ") for r in ranges)
    sm90 = label(next(n for n in kineto_kernel_names(h200 / "flashinfer_decode_small.pt.trace.json.gz")
                      if "PrefillWithKVCacheKernel" in n))
    assert sm90.phase == "unknown"
    for r in ranges:
        phase, evidence = phase_in_context(sm90, range_name=r)
        assert phase == "decode" and r in evidence
    assert phase_in_context(sm90, range_name="tc=1 dist=uniform bs=8") == (sm90.phase, sm90.phase_evidence)
    phase, evidence = phase_in_context(sm90, range_name="tc=1 dist=uniform bs=8", q_rows_per_request=1)
    assert phase == "decode" and "one query row" in evidence


@pytest.mark.parametrize(("range_name", "q_rows", "phase"), [
    ("decode tc=1 dist=uniform bs=8 step=0", None, "decode"),
    ("DecodeStep", None, "decode"),
    ("forward_decode", 7, "decode"),          # the range wins over the batch shape
    ("chunked_prefill", 1, "prefill"),
    ("Prefill batch", None, "prefill"),
    ("decoder_layer_3", None, "unknown"),     # 'decoder' is not the word 'decode'
    ("prefilling", None, "unknown"),
    ("prefill+decode mixed", None, "unknown"),  # both words: the range does not decide
    ("prefill+decode mixed", 1, "decode"),
    (None, 1, "decode"),
    (None, 4, "unknown"),
    (None, None, "unknown"),
])
def test_phase_in_context_rules(range_name: str | None, q_rows: int | None, phase: str) -> None:
    sm90 = label("PrefillWithKVCacheKernel")
    assert phase_in_context(sm90, range_name=range_name, q_rows_per_request=q_rows)[0] == phase


def test_phase_in_context_keeps_own_phase() -> None:
    assert phase_in_context(label(DECODE_KINETO), range_name=None)[0] == "decode"
    assert phase_in_context(label(FA2_DECODE), range_name="step 3", q_rows_per_request=5)[0] == "decode"


def kineto_user_annotations(path: Path) -> set[str]:
    with gzip.open(path, "rb") as f:
        doc = orjson.loads(f.read())
    return {e["name"] for e in doc["traceEvents"] if e.get("cat") == "user_annotation"}


# ---------------------------------------------------------------------------------------------------
# label_rows -> DuckDB
# ---------------------------------------------------------------------------------------------------


def test_label_rows_load_into_duckdb(names_by_trace: dict[str, set[str]]) -> None:
    names = sorted(names_by_trace["flashinfer_decode.sqlite"]) + [DECODE_KINETO, DECODE_KINETO]
    cols = label_rows(names)
    assert tuple(cols) == LABEL_COLUMNS and len(cols["name"]) == 19  # 18 distinct + DECODE_KINETO once
    con = duckdb.connect()
    con.register("labels_arrow", pa.table(cols))
    con.execute("CREATE TABLE kernel_labels AS SELECT * FROM labels_arrow")
    rows = con.execute(
        "SELECT family, backend, count(*) FROM kernel_labels GROUP BY ALL ORDER BY family, backend").fetchall()
    assert rows == [("attention", "flashinfer-cuda-core", 4), ("attention", "flashinfer-sm90", 3),
                    ("elementwise", "pytorch", 9), ("merge", "flashinfer", 3)]
    g = con.execute("SELECT DISTINCT json_extract(params_json, '$.group_size')::INT FROM kernel_labels "
                    "WHERE rule = 'flashinfer-batch-decode' AND params_json <> '{}'").fetchall()
    assert g == [(8,)]


# ---------------------------------------------------------------------------------------------------
# User rules
# ---------------------------------------------------------------------------------------------------

USER_RULES = """
[[rule]]
id = "my-paged-decode"
pattern = 'my_paged_decode_kernel'
family = "attention"
backend = "mylib"
phase = "decode"
phase_evidence = "our own decode kernel"
extract = "my-tiles"

[[rule]]
id = "override-merge"
pattern = 'PersistentVariableLengthMergeStatesKernel'
family = "merge"
backend = "flashinfer-custom"
extract = "flashinfer-merge"

[extractors.my-tiles]
  [[extractors.my-tiles.template]]
  name = 'my_paged_decode_kernel'
  args = ["head_dim:int", "group_size:int", "dtype:dtype"]

[[context]]
id = "sglang-extend"
range_word = "extend"
phase = "prefill"
evidence = "SGLang's extend mode is prefill ('{range_name}')"
"""


def test_user_rules_explicit_path(tmp_path: Path) -> None:
    p = tmp_path / "rules.toml"
    p.write_text(USER_RULES, encoding="utf-8")
    rs = load_rules(p)
    lab = rs.label("void mylib::my_paged_decode_kernel<128, 4, __half>(Params)")
    assert (lab.family, lab.backend, lab.phase, lab.rule) == ("attention", "mylib", "decode", "my-paged-decode")
    assert dict(lab.params) == {"head_dim": 128, "group_size": 4, "dtype": "fp16"}
    lab = rs.label(MERGE_KINETO)  # user rules come first; built-in extractors are available to them
    assert (lab.backend, lab.rule, lab.params["head_dim"]) == ("flashinfer-custom", "override-merge", 128)
    assert rs.label(DECODE_KINETO) == label(DECODE_KINETO)  # built-in rules still apply after the user's
    assert phase_in_context(rs.label("PrefillWithKVCacheKernel"), range_name="forward_extend", rules=rs) == (
        "prefill", "SGLang's extend mode is prefill ('forward_extend')")


def test_user_rules_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "rules.toml"
    p.write_text(USER_RULES, encoding="utf-8")
    monkeypatch.setenv("TRACEINSIGHT_RULES", str(p))
    assert label("my_paged_decode_kernel").rule == "my-paged-decode"
    monkeypatch.delenv("TRACEINSIGHT_RULES")
    assert label("my_paged_decode_kernel").rule == "fallback"


@pytest.mark.parametrize(("text", "message"), [
    ("[[rule]\nid=1", "not valid TOML"),
    ("[[rule]]\nid = 'x'\npattern = 'a('\nfamily = 'gemm'\n", "rule 1 (x): bad regex 'a('"),
    ("[[rule]]\nid = 'x'\npattern = 'a'\nfamily = 'matmul'\n", "rule 1 (x): family must be one of"),
    ("[[rule]]\nid = 'x'\npattern = 'a'\n", "rule 1 (x): missing key 'family'"),
    ("[[rule]]\nid = 'x'\npattern = 'a'\nfamily = 'gemm'\ncolour = 1\n", "rule 1 (x): unknown key 'colour'"),
    ("[[rule]]\nid = 'x'\npattern = 'a'\nfamily = 'gemm'\nextract = 'nope'\n", "no extractor named 'nope'"),
    ("[[rule]]\nid = 'x'\npattern = 'a'\nfamily = 'gemm'\nphase = 'train'\n", "phase must be one of"),
    ("[extractors.e]\n[[extractors.e.template]]\nname = 'k'\nargs = ['a:float']\n", "kind must be one of"),
    ("[extractors.e]\nderive = { x = 'a * ' }\n", "derive 'x' must be a product"),
    ("[[context]]\nid = 'c'\nphase = 'decode'\nevidence = 'e'\n", "exactly one of range_word and q_rows"),
    ("[[rule]]\nid = 'x'\npattern = 'a'\nfamily = 'gemm'\n[[rule]]\nid = 'x'\npattern = 'b'\nfamily = 'gemm'\n",
     "duplicate rule id 'x'"),
    ("version = 2\n", "version 2 is not supported"),
])
def test_bad_rules_file_is_one_line_format_error(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "bad.toml"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(FormatError) as e:
        load_rules(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: ") and "\n" not in msg and message in msg


def test_missing_rules_file_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"^.*nope\.toml: rules file not found$"):
        load_rules(tmp_path / "nope.toml")
    with pytest.raises(InputError, match="is a directory"):
        load_rules(tmp_path)
