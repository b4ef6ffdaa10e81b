"""traceinsight: profiling-trace analyzer and diagnostics for LLM decode attention."""

__version__ = "0.1.0"
