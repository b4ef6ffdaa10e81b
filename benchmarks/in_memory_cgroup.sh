#!/usr/bin/env bash
# Run a command as on a machine with SIZE of memory: in a fresh memory cgroup capped at SIZE (cgroup v2 or v1;
# needs root). DuckDB reads the cgroup's limit as the machine's memory (its default budget becomes 80 % of SIZE),
# and the kernel kills the command if it holds more than SIZE. Prints whether it was killed for its memory.
#
#   sudo benchmarks/in_memory_cgroup.sh 8G .venv/bin/python -P benchmarks/analyze_stages.py \
#       /tmp/traceinsight-bench/nsys_10M/flashinfer_decode_x.sqlite --out benchmarks/results/X.json
set -euo pipefail
size=${1:?usage: in_memory_cgroup.sh SIZE COMMAND...}
shift
bytes=$(numfmt --from=iec "$size")
name="traceinsight-bench-$$"
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then  # v2
  dir=/sys/fs/cgroup/$name
  mkdir "$dir"
  echo "$bytes" > "$dir/memory.max"
  echo 0 > "$dir/memory.swap.max" 2>/dev/null || true
  events() { grep -E '^oom_kill ' "$dir/memory.events" | cut -d' ' -f2; }
else  # v1
  dir=/sys/fs/cgroup/memory/$name
  mkdir "$dir"
  echo "$bytes" > "$dir/memory.limit_in_bytes"
  events() { grep -E '^oom_kill ' "$dir/memory.oom_control" | cut -d' ' -f2; }
fi
set +e
sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$dir" "$@"
rc=$?
set -e
killed=$(events || echo 0)
echo "in_memory_cgroup: $size cap, exit status $rc, killed for memory: ${killed:-0} time(s)" >&2
rmdir "$dir" 2>/dev/null || true
exit $rc
