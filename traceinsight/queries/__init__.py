"""Named SQL queries. Each `NAME.sql` file beside this module holds one query, documented in its header;
`sql("NAME")` returns its text. Parameters are DuckDB named parameters ($trace, ...), never pasted strings."""

from __future__ import annotations

from functools import cache
from importlib import resources


@cache
def sql(name: str) -> str:
    return resources.files(__name__).joinpath(f"{name}.sql").read_text()


def names() -> list[str]:
    return sorted(p.name[:-4] for p in resources.files(__name__).iterdir() if p.name.endswith(".sql"))
