"""The long fuzz run: the property tests of tests/test_fuzz_*.py with many more examples and fresh random seeds,
plus the scale check of a large NVTX table. One command:

    .venv/bin/python benchmarks/fuzz_long.py                 # 20x the CI examples (about 20 minutes)
    .venv/bin/python benchmarks/fuzz_long.py --scale 100
    .venv/bin/python benchmarks/fuzz_long.py --scale 0 --nvtx-ranges 10000000   # only the NVTX scale check

Prints, per test, the inputs tried, how many analyzed and how many failed with a one-line error, and each
failure (a bug: another exception, a multi-line message or a hang) with Hypothesis' reproduction line. Exit
status 1 when anything failed. The CI suite runs the same tests with fixed seeds and few examples.

The Kineto mutation strategy also runs with the 5000-digit integer (`big_int=True`), which the CI test leaves out
while the reader's bug is open (tests/test_fuzz_kineto.py::test_integer_with_more_digits_than_python_converts).
"""

from __future__ import annotations

import argparse
import importlib
import os
import resource
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # fuzz_corpus and the test modules
MODULES = ("test_fuzz_kineto", "test_fuzz_nsys", "test_fuzz_ncu", "test_fuzz_sidecar")
# Examples of the strategies only the long run uses (times --scale).
EXTRA_EXAMPLES = 150


def property_tests(scale: float) -> list[tuple[str, Callable[..., Any]]]:
    """Every Hypothesis test of the fuzz modules (imported with the scale and random seeds set), and the extra
    strategies only the long run uses."""
    os.environ["TRACEINSIGHT_FUZZ_SCALE"] = str(scale)
    os.environ["TRACEINSIGHT_FUZZ_RANDOM"] = "1"
    import fuzz_corpus as fc
    from hypothesis import given
    from hypothesis import strategies as st

    found = []
    for name in MODULES:
        module = importlib.import_module(name)
        for attr in sorted(dir(module)):
            fn = getattr(module, attr)
            if attr.startswith("test_") and hasattr(fn, "hypothesis"):
                found.append((f"{name}::{attr}", fn))

    @fc.fuzz_settings(EXTRA_EXAMPLES)
    @given(fc.mutated_kineto(big_int=True), st.booleans())
    def kineto_with_big_integers(case: tuple[dict, list[str]], compress: bool) -> None:
        fc.check_bytes(fc.dump_json(case[0], compress), "mut.json.gz" if compress else "mut.json")

    @fc.fuzz_settings(EXTRA_EXAMPLES)
    @given(fc.sidecar_doc(mutate=True, big_int=True))
    def sidecar_with_big_integers(case: tuple[object, list[str]]) -> None:
        with fc.scratch("mut.meta.json") as path:
            path.write_bytes(fc.dump_json(case[0]))
            fc.check_input(path)

    found += [("long::kineto_with_big_integers", kineto_with_big_integers),
              ("long::sidecar_with_big_integers", sidecar_with_big_integers)]  # fmt: skip
    return found


def run_properties(scale: float) -> int:
    tests = property_tests(scale)
    import fuzz_corpus as fc

    failures = 0
    total = 0
    print(f"{'test':<64} {'inputs':>7} {'ok':>6} {'error':>6} {'s':>6}  result", flush=True)
    for name, fn in tests:
        before = fc.STATS.copy()
        started = time.monotonic()
        result = "ok"
        try:
            fn()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - report it and go on with the next test
            failures += 1
            result = "FAILED"
            print(f"--- {name} FAILED: {type(exc).__name__}")
            print("".join(traceback.format_exception(exc))[-6000:])
        done = fc.STATS - before
        total += done["inputs"]
        print(f"{name:<64} {done['inputs']:>7} {done['ok']:>6} {done['error']:>6} {time.monotonic() - started:>6.0f}  "
              f"{result}", flush=True)  # fmt: skip
    print(f"inputs tried: {total}; failing tests: {failures}")
    return failures


NVTX_CHILD = """
import resource, sys, time
from pathlib import Path
from traceinsight.pipeline import analyze
started = time.monotonic()
db, (a,) = analyze([Path(sys.argv[1])])
n = db.rows("SELECT count(*) AS n FROM ranges")[0]["n"]
print(f"analyzed {n} ranges, {len(a.steps)} steps in {time.monotonic() - started:.1f} s, "
      f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10} MiB")
"""


def run_nvtx(n_ranges: int, memory_gib: float) -> int:
    """Build an export with `n_ranges` NVTX ranges and analyze it in a child process with at most `memory_gib` of
    address space; print time and peak memory."""
    with tempfile.TemporaryDirectory(prefix="traceinsight-nvtx-") as folder:
        path = Path(folder) / f"nvtx-{n_ranges}.sqlite"
        started = time.monotonic()
        import fuzz_corpus as fc

        fc.build_nvtx_export(path, n_ranges)
        print(f"built {n_ranges} NVTX ranges ({path.stat().st_size >> 20} MiB) in {time.monotonic() - started:.1f} s")
        limit = int(memory_gib * (1 << 30))

        def cap() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

        proc = subprocess.run(
            [sys.executable, "-c", NVTX_CHILD, str(path)],
            capture_output=True, text=True, preexec_fn=cap, timeout=3600, check=False,
            env={**os.environ, "TRACEINSIGHT_CACHE": "0"},
        )  # fmt: skip
        print((proc.stdout + proc.stderr).strip()[-2000:])
        return 0 if proc.returncode == 0 else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=20, help="examples per test: CI's count times this (0: none)")
    parser.add_argument("--nvtx-ranges", type=int, default=0, help="also analyze an export with this many NVTX ranges")
    parser.add_argument("--nvtx-memory-gib", type=float, default=16, help="address-space cap of that run")
    args = parser.parse_args()
    failed = 0
    if args.scale > 0:
        failed += run_properties(args.scale)
    if args.nvtx_ranges:
        failed += run_nvtx(args.nvtx_ranges, args.nvtx_memory_gib)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
