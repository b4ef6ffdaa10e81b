"""Markdown tables: a cell made safe and a GitHub-flavoured table, shared by every Markdown writer (the report, the
run section, the fleet summary) without importing the whole report."""

from __future__ import annotations

from typing import Any


def cell(value: Any) -> str:
    """Text safe inside a Markdown table cell."""
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def md_table(headers: list[str], rows: list[list[Any]], right: set[int] | None = None) -> str:
    right = right or set()
    head = "| " + " | ".join(headers) + " |"
    rule = "|" + "|".join("---:" if i in right else "---" for i in range(len(headers))) + "|"
    body = ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join([head, rule, *body])
