"""The Jinja environment of the HTML pages (analysis report, diff, fleet): the templates are package data
(`report/templates/*.html.j2`), autoescaped, with undefined names an error (StrictUndefined); built once.

Every `{{ value }}` is escaped as `html.escape(value, quote=True)` would (the `finalize` hook: `'` becomes `&#x27;`
as the pages always wrote it, where markupsafe writes `&#39;`; None prints as nothing); autoescape then passes the
result through. Markup (a macro's output, a plot's SVG) is never escaped twice."""

from __future__ import annotations

import html
from functools import cache
from typing import Any

import jinja2
from markupsafe import Markup

from traceinsight.units import fmt_ns


def escaped(value: Any) -> Any:
    """What `{{ value }}` prints: Markup as it is, anything else escaped (None as '')."""
    if hasattr(value, "__html__"):
        return value
    return Markup(html.escape("" if value is None else str(value), quote=True))


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("traceinsight.report", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, finalize=escaped, keep_trailing_newline=True,
                             auto_reload=False)
    env.filters["ns"] = fmt_ns
    return env


def render(name: str, **context: Any) -> str:
    """The template `name` rendered with `context`."""
    return environment().get_template(name).render(**context)


def macros(name: str) -> Any:
    """The macros of template `name`, as attributes (each returns Markup)."""
    return environment().get_template(name).module


def trusted(text: str) -> Markup:
    """Markup made by a library that writes it (matplotlib's SVG), inserted as it is."""
    return Markup(text)
