"""Split state read from the trace for other serving stacks (issue 15, item 2): model/split_signal.toml.

Each rule is checked against real kernel names (the published names in tests/test_labels.py and
tests/data/foreign/, or, where marked, spelled from the library's template): its attention kernel must label with
the rule's backend and pick the rule, and its merge kernel must label family 'merge' with the same backend, so that
step_launches.sql attaches it. The two committed TraceLens traces are analyzed end to end.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from traceinsight.errors import FormatError
from traceinsight.labels import label
from traceinsight.model.steps import parse_split_rules, split_rule, split_rules

FOREIGN = Path(__file__).parent / "data" / "foreign" / "tracelens"
SGLANG = FOREIGN / "sglang_mi300x_Qwen3-8B_decode.json.gz"
VLLM_ROCM = FOREIGN / "vllm_mi300x_gptoss_decode_graph_execution.json.gz"

FA2 = ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::half_t, "
       "Flash_kernel_traits<128, 64, 128, 4, cutlass::half_t> >, true, false, false, false, true, false, false, false"
       ">(flash::Flash_fwd_params)")
FA2_COMBINE = ("void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, c"
               "utlass::half_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::half_t> >, 4, 3, true>(flash::Flash_fwd"
               "_params)")
PT_FLASH = ("void pytorch_flash::flash_fwd_splitkv_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 64, 128, 4, fal"
            "se, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t>"
            " >, false, false, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)")
PT_FLASH_COMBINE = ("void pytorch_flash::flash_fwd_splitkv_combine_kernel<pytorch_flash::Flash_fwd_kernel_traits<128,"
                    " 64, 128, 4, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 64, 128,"
                    " 4, cutlass::bfloat16_t> >, 4, 5, true>(pytorch_flash::Flash_fwd_params)")
VLLM_V2 = ("void vllm::paged_attention_v2_kernel<c10::BFloat16, c10::BFloat16, 128, 16, 128, (vllm::Fp8KVCacheDataTyp"
           "e)0, false, 512>(float*, float*, c10::BFloat16*, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat1"
           "6 const*, int, float, int const*, int const*, int, float const*, int, int, int, float const*, float const"
           "*, int, int, int)")
VLLM_V2_REDUCE = ("void vllm::paged_attention_v2_reduce_kernel<c10::BFloat16, 128, 128, 512>(c10::BFloat16*, float co"
                  "nst*, float const*, c10::BFloat16 const*, int const*, int)")
# Spelled from vLLM's template (csrc/attention/attention_kernels.cuh paged_attention_v1_kernel<scalar_t, cache_t,
# HEAD_SIZE, BLOCK_SIZE, NUM_THREADS, KV_DTYPE, IS_BLOCK_SPARSE>), as Kineto prints the v2 kernel above.
VLLM_V1 = ("void vllm::paged_attention_v1_kernel<c10::BFloat16, c10::BFloat16, 128, 16, 128, (vllm::Fp8KVCacheDataTyp"
           "e)0, false>(c10::BFloat16*, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, int, float,"
           " int const*, int const*, int, float const*, int, int, int, float const*, float const*, int, int, int)")
LL4MI = ("void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16, __hip_bfloat16, (vllm::Fp8KVCacheDataType)0"
         ", 1, 128, 256, false, 4, 1, ck_tile::ComposedAttention<0u, false> >(__hip_bfloat16 const*, __hip_bfloat16 c"
         "onst*, __hip_bfloat16 const*, float, int const*, int const*, int const*, float const*, int, int, int, int, "
         "float*, float*, __hip_bfloat16*, float, float, float const*, float const*, float const*, ck_tile::ComposedA"
         "ttention<0u, false> const*)")
LL4MI_REDUCE = ("void paged_attention_ll4mi_reduce_kernel<__hip_bfloat16, __hip_bfloat16, 128, 128, 256, 3, false>(__"
                "hip_bfloat16*, float const*, float const*, __hip_bfloat16 const*, int const*, int const*, int, int, "
                "float const*)")
FLASHMLA = ("void flash::flash_fwd_splitkv_mla_kernel<Flash_fwd_kernel_traits_mla<576, 64, 64, 8, cutlass::bfloat16_t"
            ", 512, true, 0, cutlass::bfloat16_t, cutlass::bfloat16_t>, true, flash::SharedStorageMLA<Flash_fwd_kerne"
            "l_traits_mla<576, 64, 64, 8, cutlass::bfloat16_t, 512, true, 0, cutlass::bfloat16_t, cutlass::bfloat16_t"
            "> > >(Flash_fwd_mla_params)")
FLASHMLA_COMBINE = ("void flash::flash_fwd_splitkv_mla_combine_kernel<cutlass::bfloat16_t, float, long, 512, 64>(Flas"
                    "h_fwd_mla_params)")
FA4 = ("kernel_cutlass_kernel_flash_attncuteflash_fwd_sm100FlashAttentionForwardSm100_object_at__tensor0000o11101213_"
       "tensor0000o11101213_tensor0000o10111213_tensor0000o11101213_None_None_None_Non_0")
FA4_COMBINE = "kernel_cutlass_kernel_flash_attncuteflash_fwd_combineFlashAttentionForwardCombine_object_at__0"

# (attention kernel, its merge kernel or None, signal, grid axis of the parts or None)
CASES = [
    (FA2, FA2_COMBINE, "merge", "y"),
    (PT_FLASH, PT_FLASH_COMBINE, "merge", "y"),
    (VLLM_V2, VLLM_V2_REDUCE, "merge", "z"),
    (VLLM_V1, None, "never", None),
    (LL4MI, LL4MI_REDUCE, "merge", "y"),
    ("_fwd_grouped_kernel_stage1", "_fwd_kernel_stage2", "merge", "z"),
    ("_fwd_kernel_stage1", "_fwd_kernel_stage2", "merge", "z"),
    ("kernel_unified_attention_2d", None, "never", None),
    ("kernel_unified_attention_3d", "reduce_segments", "merge", "z"),
    (FLASHMLA, FLASHMLA_COMBINE, "always", None),
    ("aiter::mla_dec_stage1_bf16_a16w16_subQ16_mqa16", "kn_mla_reduce_v1<MlaReduceKernelV1Traits<512, 16, 1>, float, "
     "bfloat16>", "always", None),
    ("aiter::mla_a16w16_qh16_m16x4_n16x1_coex0_mask1_ps", "_fwd_kernel_stage2_asm", "always", None),
    (FA4, FA4_COMBINE, "merge", None),
    # cuDNN 9.19 on the H200 (examples/sdpa): grid.x of the attention kernel counts its KV splits.
    ("cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35_16x128x128_1x4x1_cga1x1x1_kernel0_0",
     "void cudnn::fusion::lean_reduction_kernel<false, false, false>(void*, float*, float*, float*, float*, "
     "float const*, float*, float*, float*, float*, float*, unsigned int, bool)", "merge", "x"),
]


@pytest.mark.parametrize(("attention", "merge", "signal", "parts"), CASES, ids=lambda v: str(v)[:40])
def test_rule_of_each_backend_on_real_names(attention: str, merge: str | None, signal: str, parts: str | None) -> None:
    lab = label(attention)
    assert lab.family == "attention"
    rule = split_rule(attention, lab.backend)
    assert rule is not None and (rule.signal, rule.parts) == (signal, parts)
    if merge is not None:
        m = label(merge)
        assert (m.family, m.backend) == ("merge", lab.backend), merge


def test_prefill_and_uncovered_kernels_have_no_rule() -> None:
    """aiter's MLA prefill is not its decode (no 'always' rule); TensorRT-LLM's XQA/MMHA reduce inside the kernel
    (multi-block mode), so the trace cannot tell: no rule, split unknown."""
    for name in ("aiter::mla_pfl_qh192_vh128_m32x8_n128x1_causal1", "kernel_mha",
                 "xqa_kernel_dt_fp16_d_128_beam_1_kvt_int8_nqpkv_8_m_8_sm_80"):
        assert label(name).family == "attention"
        assert split_rule(name, label(name).backend) is None, name


def test_every_rule_names_a_backend_the_labels_use() -> None:
    backends = {label(a).backend for a, *_ in CASES} | {"flashinfer-cuda-core", "flashinfer-fa2", "flashinfer-sm90",
                                                         "fa3"}
    assert {r.backend for r in split_rules()} == backends
    assert all(r.source for r in split_rules())


@pytest.mark.parametrize(("text", "message"), [
    ("version = 2\n", "expected version = 1"),
    ('version = 1\n[[rule]]\nbackend = "x"\nsignal = "sometimes"\nsource = "s"\n', "signal 'sometimes' is not one of"),
    ('version = 1\n[[rule]]\nbackend = "x"\nsignal = "merge"\n', "keys must be"),
    ('version = 1\n[[rule]]\nbackend = "x"\nsignal = "merge"\nsource = "s"\nparts = "w"\nparts_note = "n"\n',
     "parts must be x, y or z"),
    ('version = 1\n[[rule]]\nbackend = "x"\nsignal = "merge"\nsource = "s"\nkernel = "("\n', "is not a regex"),
    ("version = [\n", "not TOML"),
])
def test_bad_rules_file_is_one_line_error(text: str, message: str) -> None:
    with pytest.raises(FormatError) as exc:
        parse_split_rules(text, "my.toml")
    assert str(exc.value).startswith("my.toml: ") and message in str(exc.value) and "\n" not in str(exc.value)


# ---------------------------------------------------------------------------------------------- real traces
def _launches(trace: Path) -> list[dict[str, object]]:
    out = subprocess.run([sys.executable, "-m", "traceinsight", "analyze", str(trace), "--format", "json",
                          "--steps", "all"], capture_output=True, text=True, check=True)
    return [launch for step in json.loads(out.stdout)["steps"] for launch in step["launches"]]


def test_sglang_mi300x_ll4mi_launches_split_by_their_reduce_kernel() -> None:
    """SGLang's aiter backend on an MI300X (Qwen3-8B decode, 36 layers): every ll4mi launch is followed by
    paged_attention_ll4mi_reduce_kernel (the trace has no grid, so the reduce kernel decides)."""
    got = [(la["kernel"], la["backend"], la["split_kv"], la["split_evidence"], [m["kernel"] for m in la["merges"]])
           for la in _launches(SGLANG)]
    assert len(got) == 36
    assert set(map(str, got)) == {str(("paged_attention_ll4mi_QKV_mfma16_kernel", "vllm-rocm", True,
                                       "paged_attention_ll4mi_reduce_kernel follows the launch on stream 3",
                                       ["paged_attention_ll4mi_reduce_kernel"]))}


def test_vllm_mi300x_unified_attention_2d_never_3d_split() -> None:
    """vLLM's Triton unified attention on an MI300X (gpt-oss decode, full CUDA graph): the 2d kernel never splits,
    the 3d kernel is merged by reduce_segments."""
    got: dict[tuple[object, ...], int] = {}
    for la in _launches(VLLM_ROCM):
        key = (la["kernel"], la["backend"], la["split_kv"], la["split_evidence"],
               tuple(m["kernel"] for m in la["merges"]))
        got[key] = got.get(key, 0) + 1
    assert got == {
        ("kernel_unified_attention_2d", "triton", False, "kernel_unified_attention_2d (triton) never splits along KV",
         ()): 12,
        ("kernel_unified_attention_3d", "triton", True, "reduce_segments follows the launch on stream 0",
         ("reduce_segments",)): 12,
    }
