"""The SDPA capture's steps grouped by backend x layout x case: ProfilerStep keys, median GPU time of the step's
kernels, kernels per step and the attention / reduction kernels that ran (stdlib + traceinsight's key matcher).

    python examples/sdpa/steps.py [TRACE SIDECAR]   # default: this folder's capture; prints a Markdown table
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import statistics
import sys
from pathlib import Path

from traceinsight.ingest.sidecar import key_matches

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    trace = Path(argv[0]) if argv else HERE / "sdpa_q32kv4d128_torch.pt.trace.json.gz"
    side = Path(argv[1]) if len(argv) > 1 else HERE / "sdpa_q32kv4d128_torch.sidecar.json.gz"
    spec = importlib.util.spec_from_file_location("loop_step_times", HERE.parent / "loop" / "step_times.py")
    assert spec is not None and spec.loader is not None
    st = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = st
    spec.loader.exec_module(st)
    doc = json.loads(gzip.decompress(side.read_bytes()))
    ranges = st.kineto_steps(trace)
    rows: dict[tuple[str, str, str], list[tuple[float, str, list[str], int]]] = {}
    for s in doc["steps"]:
        r = next(r for r in ranges if key_matches(s["key"], r.name))
        d = s["sdpa"]
        fused = sorted({n.split("<")[0].split("(")[0].removeprefix("void ").split("::")[-1][:44]
                        for n, _, _ in r.kernels if "at::native" not in n and "gemv" not in n})
        rows.setdefault((d["backend"], d["layout"], d["case"]), []).append((r.gpu_ms, s["key"], fused, len(r.kernels)))
    print("| backend | layout | case | steps | median GPU µs | kernels/step | attention and reduction kernels |")
    print("|---|---|---|---|---|---|---|")
    for (backend, layout, case), v in rows.items():
        first, last = v[0][1], v[-1][1].split("#")[1]
        med = statistics.median(x[0] for x in v) * 1000
        names = ", ".join(v[0][2]) or "(aten ops and cuBLAS gemv only)"
        print(f"| {backend} | {layout} | {case} | {first}–{last} | {med:.0f} | {v[0][3]} | {names} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
