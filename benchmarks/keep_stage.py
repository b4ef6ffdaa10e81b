"""What `traceinsight analyze` does after the analysis when it keeps it (a large input's cold run,
cli/analysis_cache.py): the analysis tables written, the JSON report rendered from them (to /dev/null) and the
entry kept; wall and CPU-s of that stretch in one process, the trace analyzed first (ingest cache on, under
$TRACEINSIGHT_CACHE_DIR). Runs on this checkout or, from its folder, on an older one that kept by a copy
(`analysis_cache.store(..., written=True)` after the report, as before `analysis_cache.keeping`).

    .venv/bin/python benchmarks/keep_stage.py TRACE
    (cd /tmp/ref && .venv/bin/python /path/to/benchmarks/keep_stage.py TRACE)
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path

import traceinsight as ti
from traceinsight.cli import analysis_cache
from traceinsight.report.saved import write_documents


def main() -> None:
    trace = Path(sys.argv[1])
    result = ti.open(trace)
    entry = Path(tempfile.mkdtemp()) / "entry.duckdb"
    entry.with_suffix(analysis_cache.SEEN_SUFFIX).touch()  # analyzed before: this run keeps it
    t0, c0 = time.perf_counter(), time.process_time()
    with open(os.devnull, "wb") as out:
        if hasattr(analysis_cache, "keeping"):
            with analysis_cache.keeping(result.db, result.analyses, entry) as src:
                assert src is not None
                t1 = time.perf_counter()
                write_documents(src, out)
                t2 = time.perf_counter()
        else:
            src = result.documents()
            t1 = time.perf_counter()
            write_documents(src, out)
            t2 = time.perf_counter()
            analysis_cache.store(result.db, result.analyses, entry, written=True)
    t3, c3 = time.perf_counter(), time.process_time()
    assert entry.is_file()
    side = "keeping" if hasattr(analysis_cache, "keeping") else "copy"
    print(f"{side}: wall {t3 - t0:.2f} s, cpu {c3 - c0:.2f} s (tables {t1 - t0:.2f}, JSON {t2 - t1:.2f}, "
          f"keep {t3 - t2:.2f}), entry {entry.stat().st_size} bytes, max RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB, threads {threading.active_count()}")


if __name__ == "__main__":
    main()
