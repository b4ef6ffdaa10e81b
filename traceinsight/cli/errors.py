"""How the `traceinsight` command fails: a user error is one stderr line and exit 2, a bug one line and exit 1
(TRACEINSIGHT_DEBUG=1 shows the traceback), Ctrl-C one line and 130; running out of memory says what the input
needs and what to do."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click

from traceinsight.errors import TraceInsightError

F = TypeVar("F", bound=Callable[..., Any])

EXIT_USAGE = 2
EXIT_INTERNAL = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a program that Ctrl-C ended


def fail(message: str, code: int) -> None:
    click.echo(f"traceinsight: error: {message}", err=True)
    sys.exit(code)


def user_errors(fn: F) -> F:
    """Turn TraceInsightError into one line + exit 2; anything else into one line + exit 1 (a bug:
    TRACEINSIGHT_DEBUG=1 shows the traceback)."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TraceInsightError as exc:
            fail(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, exc.exit_code)
        except (MemoryError, _oom_errors()) as exc:
            fail(out_of_memory_message(exc, kwargs.get("paths") or kwargs.get("path")), EXIT_USAGE)
        except KeyboardInterrupt:
            # Ctrl-C: one line and 130 (docs/ERRORS.md), not click's "Aborted!" and 1, the internal-error status.
            fail("interrupted", EXIT_INTERRUPTED)
        except (click.exceptions.Exit, click.ClickException, BrokenPipeError):
            raise
        except Exception as exc:  # noqa: BLE001 - the last line of defence against tracebacks
            if os.environ.get("TRACEINSIGHT_DEBUG"):
                raise
            first = (str(exc).splitlines() or [""])[0]
            fail(f"internal error: {type(exc).__name__}: {first} (rerun with TRACEINSIGHT_DEBUG=1 and report it)",
                  EXIT_INTERNAL)

    return wrapper  # type: ignore[return-value]


def _oom_errors() -> type[BaseException]:
    import duckdb

    return duckdb.OutOfMemoryException


# What analyze needs, per input (docs/SCALE.md, benchmarks/ingest_scale.py): peak memory per byte of Kineto JSON
# (uncompressed), and per Nsight Systems SQLite byte.
MEMORY_PER_KINETO_BYTE = 0.6
MEMORY_PER_SQLITE_BYTE = 10.0


def out_of_memory_message(exc: BaseException, paths: Any) -> str:
    """One line: out of memory, the limit in force, what this input needs, what to do."""
    from traceinsight.ingest.store import MEMORY_LIMIT_ENV, memory_limit

    files = [Path(p) for p in ([paths] if isinstance(paths, str) else list(paths or []))]
    sizes = []
    for f in files:
        try:
            raw = f.stat().st_size
        except OSError:
            continue
        gz = f.name.endswith(".gz")
        per = MEMORY_PER_SQLITE_BYTE if f.suffix in (".sqlite", ".nsys-rep") else MEMORY_PER_KINETO_BYTE * (10 if gz
                                                                                                             else 1)
        sizes.append(raw * per)
    total = sum(sizes)
    need = (f"; this input needs about {total / 2**30:.1f} GB" if total >= 2**30 else
            f"; this input needs about {max(total / 2**20, 1):.0f} MB") if sizes else ""
    limit = memory_limit() or "80% of memory less what the analysis holds"
    return (f"out of memory (limit: {limit}){need}: raise it with --memory-limit or ${MEMORY_LIMIT_ENV}, "
            "or capture a shorter window (docs/SCALE.md)")
