"""Errors a user can see. Each becomes one line on stderr and exit code 2 in the CLI."""

from __future__ import annotations


class TraceInsightError(Exception):
    """Base of every error caused by the user's input; its message is the whole one-line explanation."""

    exit_code = 2


class InputError(TraceInsightError):
    """The path cannot be read: missing, a directory, empty, unreadable."""


class FormatError(TraceInsightError):
    """The file was read but is not a trace traceinsight understands (or is damaged)."""


class ToolMissingError(TraceInsightError):
    """An external tool (nsys) is needed and not installed."""


class QueryError(TraceInsightError):
    """A user-supplied SQL query failed."""


class LimitError(FormatError):
    """The input passes a configured limit (`traceinsight.ingest.limits`): a gzip that expands too far, a bad
    limit setting in the environment."""
