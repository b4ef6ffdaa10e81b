"""FlashInfer's API log against the collector's sidecar, on the same trace (examples/flashinfer_log).

Each capture there is one collector run with FlashInfer API logging on: the Kineto trace, the collector's
sidecar and FlashInfer's own log (+ its level-10 plan() dumps, packed as NAME_dumps.tar.gz). The trace is
analyzed twice, `--meta SIDECAR` and `--meta LOG`, and per step compared: the batch (batch size, KV lengths),
the split-KV state of each attention launch and the model's predicted time per launch.

    python benchmarks/validate_flashinfer_log.py [--out results.json]

Prints a table per capture and writes the numbers as JSON (--out).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "flashinfer_log"
CAPTURES = ("sweep_l10", "sweep_l10st", "serving_l10", "sweep_l3")


def stage(name: str, into: Path, examples: Path = EXAMPLES) -> tuple[Path, Path, Path]:
    """Copy a capture's trace, sidecar and log into `into`, with its dumps unpacked beside the log as the run
    left them; return (trace, sidecar, log)."""
    trace = examples / f"{name}.pt.trace.json.gz"
    sidecar = examples / f"{name}.sidecar.json.gz"
    log = into / f"{name}.flashinfer.log.gz"
    shutil.copy(examples / f"{name}.flashinfer.log.gz", log)
    dumps = examples / f"{name}_dumps.tar.gz"
    if dumps.exists():
        with tarfile.open(dumps) as tar:
            tar.extractall(into, filter="data")
    return trace, sidecar, log


def per_step(analysis: Any) -> dict[str, dict[str, Any]]:
    """Step name -> the batch and each launch's split state and model."""
    sched = analysis.schedule
    out: dict[str, dict[str, Any]] = {}
    for s in analysis.steps:
        sb = sched.batches.get(s.index)
        launches = []
        for launch in s.launches:
            m = sched.models.get(launch.attention.kernel_id)
            launches.append({
                "kernel_id": launch.attention.kernel_id,
                "split_kv": m.split_kv if m is not None else launch.split_kv,
                "source": m.source if m is not None else None,
                "predicted_ns": m.predicted_ns if m is not None else None,
                "work_items": m.work_items if m is not None else None,
                "grid_matches": m.grid_matches if m is not None else None,
                "measured_ns": launch.attention.dur_ns,
            })
        out[s.name] = {"batch_source": sb.source if sb else None, "batch_size": sb.batch_size if sb else None,
                       "kv_lens": list(sb.kv_lens) if sb and sb.kv_lens else None, "launches": launches}
    return out


def compare(name: str, tmp: Path) -> dict[str, Any]:
    from traceinsight.pipeline import analyze

    trace, sidecar, log = stage(name, tmp)
    _, (by_sidecar,) = analyze([trace], meta=[sidecar], cache=False)
    _, (by_log,) = analyze([trace], meta=[log], cache=False)
    a, b = per_step(by_sidecar), per_step(by_log)
    steps = [n for n in a if a[n]["launches"]]
    res: dict[str, Any] = {"capture": name, "steps": len(steps), "notes": [n for n in by_log.schedule.notes
                                                                          if "FlashInfer API log" in n]}
    res["steps_with_batch"] = {"sidecar": sum(1 for n in steps if a[n]["batch_source"] == "sidecar"),
                               "log": sum(1 for n in steps if b[n]["batch_source"] == "sidecar")}
    res["same_batch_size"] = sum(1 for n in steps if a[n]["batch_size"] == b[n]["batch_size"])
    res["same_kv_lens"] = sum(1 for n in steps if a[n]["kv_lens"] is not None and a[n]["kv_lens"] == b[n]["kv_lens"])
    pairs = [(x, y) for n in steps for x, y in zip(a[n]["launches"], b[n]["launches"], strict=True)]
    res["launches"] = len(pairs)
    res["same_split"] = sum(1 for x, y in pairs if x["split_kv"] == y["split_kv"])
    res["split_on"] = {"sidecar": sum(1 for x, _ in pairs if x["split_kv"]),
                       "log": sum(1 for _, y in pairs if y["split_kv"])}
    res["planned"] = {"sidecar": sum(1 for x, _ in pairs if x["source"] == "sidecar"),
                      "log": sum(1 for _, y in pairs if y["source"] == "sidecar")}
    diffs = [abs(x["predicted_ns"] - y["predicted_ns"]) / max(x["predicted_ns"], 1) for x, y in pairs
             if x["predicted_ns"] is not None and y["predicted_ns"] is not None]
    res["predicted_both"] = len(diffs)
    res["max_rel_model_diff"] = max(diffs) if diffs else None
    res["same_model_time"] = sum(1 for x, y in pairs if x["predicted_ns"] == y["predicted_ns"])
    res["grid_matches"] = {"sidecar": sum(1 for x, _ in pairs if x["grid_matches"]),
                           "log": sum(1 for _, y in pairs if y["grid_matches"])}
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    results = []
    for name in CAPTURES:
        with tempfile.TemporaryDirectory(prefix="filog-") as tmp:
            results.append(compare(name, Path(tmp)))
    cols = ("capture", "steps", "same_batch_size", "same_kv_lens", "launches", "same_split", "same_model_time",
            "max_rel_model_diff")
    print(" | ".join(cols))
    for r in results:
        print(" | ".join(str(r[c]) for c in cols))
        for n in r["notes"]:
            print("   ", n)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
