"""GPU-side collectors: FlashInfer decode-attention runs that produce annotated traces plus a sidecar.

`traceinsight collect sweep|serving|timing|loop --out DIR [options]` (or `python -m collectors ...`). Importing this
package needs neither torch nor flashinfer; a run does (the [collect] extra and an NVIDIA GPU). See README.md.
"""
