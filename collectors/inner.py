"""The child a profiler runs: `python -m collectors.inner CONFIG.json` (written by collectors.profile)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from traceinsight.errors import TraceInsightError

from .config import RunConfig
from .runner import run_direct


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    cfg = RunConfig.from_json(Path(args[0]).read_text(encoding="utf-8"))
    if cfg.profiler == "ncu":
        sys.stdout.flush()
        os.dup2(2, 1)  # ncu prints its CSV on stdout: keep this process's own output out of it
    try:
        run_direct(cfg)
    except TraceInsightError as exc:
        print(f"traceinsight: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
