"""Kernel spelling and kind (labels/spelling.py): what pairs a kernel of one run with the same kernel of another run,
whichever tool wrote its name. Each rewrite of the ordered table with an input it changes, then whole names."""

from __future__ import annotations

import pytest

from traceinsight.labels.spelling import REWRITES, kernel_kind, kernel_spelling

# One example per rewrite of REWRITES, in its order: (input, what the whole spelling gives).
PER_REWRITE = [
    ("ns::(anonymous namespace)::K<1>", "ns::{anon}::K<1>"),
    ("K<ns::{lambda(int)#1}>", "K<ns::{lambda}>"),
    ("void K<8>", "K<8>"),
    ("K<(flashinfer::MaskMode)0, (unsigned int)16>", "K<0,16>"),
    ("K<false>", "K<0>"),
    ("K<true>", "K<1>"),
    ("K<16u, 8ul>", "K<16,8>"),
]


def test_one_example_per_rewrite() -> None:
    assert len(PER_REWRITE) == len(REWRITES)
    for (pattern, _), (name, _) in zip(REWRITES, PER_REWRITE, strict=True):
        assert pattern.search(name), (pattern.pattern, name)


@pytest.mark.parametrize(("name", "spelling"), PER_REWRITE)
def test_each_rewrite(name: str, spelling: str) -> None:
    assert kernel_spelling(name) == spelling


def test_parameter_lists_and_spaces_dropped_numbers_kept() -> None:
    assert kernel_spelling("void K<(int)128, T<(a, b)>>(int, float const&)") == "K<128,T<>>"


def test_kineto_and_nsys_spellings_of_one_kernel_are_one() -> None:
    kineto = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
              "BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<"
              "float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
              "c10::BFloat16, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1}>(int, "
              "at::native::gpu_kernel_impl_nocast<...>)")
    nsys = ("void at::native::elementwise_kernel<(int)128, (int)4, void at::native::gpu_kernel_impl_nocast<at::"
            "native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::"
            "MulFunctor<float>>>(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)")
    assert kernel_spelling(kineto) == kernel_spelling(nsys)
    assert kernel_spelling("K<16u, true, (bool)0>(T9)") == kernel_spelling("K<(unsigned int)16, (bool)1, false>()")
    # sizes kept by the spelling, taken out by the kind
    a, b = "nvjet_sm90_tst_320x64_64x4_2x1_v_bz_TNT", "nvjet_sm90_tst_256x56_64x5_2x1_v_bz_TNT"
    assert kernel_spelling(a) != kernel_spelling(b) and kernel_kind(a) == kernel_kind(b)
    assert kernel_kind(a) != kernel_kind("nvjet_sm90_tst_320x64_64x4_2x1_v_bz_splitK_TNT")
