#!/usr/bin/env bash
# Build the virtual environment of Meta's HolisticTraceAnalysis (HTA), the peer that benchmarks/ingest_scale.py
# measures side by side with traceinsight. HTA is published on PyPI under the name "traceinsight" (0.6.1); it
# is imported as `hta`. pandas 3 breaks HTA 0.6.1 on our traces, hence "pandas<3".
#
#     bash benchmarks/hta_env.sh [VENV_DIR]      # default /tmp/hta-venv (override with $HTA_VENV)
#
# Idempotent: an existing venv that already imports hta is kept.
set -euo pipefail
VENV="${1:-${HTA_VENV:-/tmp/hta-venv}}"
PY="${PYTHON:-python3}"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import hta.trace_analysis" 2>/dev/null; then
  echo "HTA venv ready: $VENV"
  exit 0
fi
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
"$VENV/bin/pip" install --quiet "traceinsight==0.6.1" "pandas<3"
"$VENV/bin/python" -c "import hta.trace_analysis; print('HTA venv ready:', '$VENV')"
