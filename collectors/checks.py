"""The one-line ValueErrors the collectors' plans raise for a value that cannot run (the CLI shows them as they are)."""

from __future__ import annotations

from collections.abc import Iterable


def one_of(value: str, choices: Iterable[str], what: str) -> None:
    """ValueError naming `what` and the choices unless `value` is one of `choices`."""
    names = list(choices)
    if value not in names:
        raise ValueError(f"unknown {what} {value!r} (choose from {', '.join(names)})")


def at_least(value: int, minimum: int, option: str) -> None:
    """ValueError naming `option` when `value` is below `minimum`."""
    if value < minimum:
        raise ValueError(f"{option} must be at least {minimum}, got {value}")
