"""GPU-side collectors: FlashInfer (and, with `--backend fa3`, FlashAttention-3) decode-attention runs that produce
annotated traces plus a sidecar.

`traceinsight collect sweep|serving|timing|loop --out DIR [options]` (or `python -m collectors ...` in the source
tree, `python -m traceinsight.collectors ...` where the wheel is installed: the wheel ships this folder as
`traceinsight.collectors`, and every import inside it is relative). Importing this package needs neither torch nor
flashinfer nor fa3_fwd_interface; a run does (the [collect] extra or the fa3-fwd wheel, and an NVIDIA GPU). See
README.md.
"""
