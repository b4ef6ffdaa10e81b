#!/bin/sh
# The analysis tables of this checkout against a reference checkout's (benchmarks/tables_speed.py), on the shared
# traces, examples with sidecars and Nsight Compute results, and the scale exports when present. Prints one table
# per trace; exits non-zero if any trace's tables differ.
#     PYTHON=.venv/bin/python REF=/tmp/ref sh benchmarks/tables_identical.sh [EXTRA_TRACE ...]
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
REF=${REF:-/tmp/ref-wtT}
T=${TRACES:-../shared/traces}
E=examples
status=0
run() { TRACEINSIGHT_CACHE=0 PYTHONPATH=. "$PY" -P benchmarks/tables_speed.py --ref "$REF" "$@" || status=1; }
run "$T/h200/flashinfer_decode_sweep.pt.trace.json.gz" --meta "$T/h200/flashinfer_decode_sweep.meta.json.gz"
run "$T/h200/flashinfer_fa2_decode_sweep.pt.trace.json.gz" --meta "$T/h200/flashinfer_fa2_decode_sweep.meta.json.gz"
run "$T/h200/flashinfer_decode_small.pt.trace.json.gz"
run "$T/h200/flashinfer_decode.sqlite" --meta "$T/h200/flashinfer_decode.nsys.meta.json" --ncu "$T/h200/flashinfer_decode.ncu.csv"
run "$T/h200/flashinfer_decode.sqlite"
for f in "$T"/foreign/*.json.gz "$T"/foreign/*.sqlite; do run "$f"; done
run "$E/fa3/serving_q64kv8d128_fa3_torch.pt.trace.json.gz" --meta "$E/fa3/serving_q64kv8d128_fa3_torch.sidecar.json.gz"
run "$E/fa3/sweep_q32kv4d128_fa3_nsys.sqlite" --meta "$E/fa3/sweep_q32kv4d128_fa3_nsys.sidecar.json.gz"
run "$E/h200/flashinfer_decode_sweep.pt.trace.json.gz" --meta "$E/h200/flashinfer_decode_sweep.meta.json.gz"
for f in "$@"; do run "$f"; done
exit $status
