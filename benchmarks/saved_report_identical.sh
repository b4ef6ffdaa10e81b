#!/bin/sh
# `traceinsight report` of a saved analysis, this checkout against a reference checkout: the trace saved
# (`analyze --save`) by each, each folder rendered by each in every format (md with its figures), bytes compared.
#     PYTHON=.venv/bin/python REF=/tmp/ref sh benchmarks/saved_report_identical.sh TRACE [--meta SIDECAR ...]
set -u
cd "$(dirname "$0")/.."
NEW=$(pwd)
PY=${PYTHON:-.venv/bin/python}
REF=${REF:-/tmp/ref-wtT}
W=$(mktemp -d)
T=$1; shift
for side in ref new; do
  root=$REF; [ $side = new ] && root=$NEW
  (cd $root && TRACEINSIGHT_CACHE=0 PYTHONPATH=$root $PY -P -m traceinsight analyze "$(realpath "$T")" "$@" --no-cache -q --format json --save $W/$side >/dev/null 2>&1)
done
status=0
for folder in ref new; do
 for fmt in text json md html; do
  for side in ref new; do
    root=$REF; [ $side = new ] && root=$NEW
    if [ $fmt = md ]; then
      mkdir -p $W/md_${folder}_$side
      (cd $root && TRACEINSIGHT_CACHE=0 PYTHONPATH=$root $PY -P -m traceinsight report $W/$folder --format md --out $W/md_${folder}_$side/report.md > /dev/null 2>&1)
      (cd $W/md_${folder}_$side && cat report.md $(ls report_figs/* | sort)) > $W/$folder.$fmt.$side
    else
    (cd $root && TRACEINSIGHT_CACHE=0 PYTHONPATH=$root $PY -P -m traceinsight report $W/$folder --format $fmt --width 120 > $W/$folder.$fmt.$side 2>&1)
    fi
  done
  if cmp -s $W/$folder.$fmt.ref $W/$folder.$fmt.new; then r=same; else r=DIFFER; status=1; fi
  echo "saved by $folder, --format $fmt: ref vs new report $r ($(wc -c < $W/$folder.$fmt.new) bytes)"
 done
done
for fmt in text json md html; do cmp -s $W/ref.$fmt.new $W/new.$fmt.new && echo "$fmt: folder saved by ref == folder saved by new (new report)" || { echo "$fmt: saved folders DIFFER"; status=1; }; done
rm -rf "$W"
exit $status
