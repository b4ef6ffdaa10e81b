"""traceinsight: profiling-trace analyzer and diagnostics for LLM decode attention.

    >>> import traceinsight as ti
    >>> analysis = ti.open("trace.pt.trace.json.gz")    # doctest: +SKIP
    >>> analysis.findings                                # doctest: +SKIP

`open` and `Analysis` live in `traceinsight.api`, loaded on first use: the command line (`traceinsight analyze`)
and the stages that read `__version__` do not pay for them."""

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from traceinsight.api import Analysis, open

# The Python API, forwarded from traceinsight.api on first access (PEP 562).
_API = ("Analysis", "open")


def __getattr__(name: str) -> Any:
    if name in _API:
        from traceinsight import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Analysis", "__version__", "open"]
