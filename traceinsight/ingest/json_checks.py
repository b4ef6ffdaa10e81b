"""Checks of JSON values at a JSON path, for the readers that validate a document before using it (the sidecar and
its legacy forms): each raises `Problem("$.steps[3].kv_lens", "has 7 entries but batch_size is 8")` at the first
value that is not what the format says, naming its JSON type (`json_type`)."""

from __future__ import annotations

from typing import Any

# Largest values the `batches` columns hold: INTEGER fields are int32, list elements (kv_lens, plan_info) int64.
INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class Problem(Exception):
    """A validation failure at a JSON path ('$.steps[3].kv_lens')."""

    def __init__(self, where: str, what: str) -> None:
        super().__init__(f"{where}: {what}")


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_int(
    obj: dict[str, Any],
    key: str,
    where: str,
    *,
    minimum: int,
    maximum: int = INT32_MAX,
    required: bool = False,
    nullable: bool = False,
) -> None:
    if key not in obj:
        if required:
            raise Problem(where, f"missing required field {key!r}")
        return
    v = obj[key]
    if v is None and nullable and not required:
        return
    if not is_int(v):
        raise Problem(f"{where}.{key}", f"expected an integer, got {json_type(v)}")
    if v < minimum:
        raise Problem(f"{where}.{key}", f"expected an integer >= {minimum}, got {v}")
    if v > maximum:
        raise Problem(f"{where}.{key}", f"expected an integer <= {maximum}, got {v}")


def check_str(obj: dict[str, Any], key: str, where: str, *, required: bool = False) -> None:
    if key not in obj:
        if required:
            raise Problem(where, f"missing required field {key!r}")
        return
    v = obj[key]
    if not isinstance(v, str) or not v.strip():
        raise Problem(f"{where}.{key}", f"expected a non-empty string, got {json_type(v)}")


def check_bool(obj: dict[str, Any], key: str, where: str, *, nullable: bool = False) -> None:
    if key in obj and not isinstance(obj[key], bool) and not (nullable and obj[key] is None):
        raise Problem(f"{where}.{key}", f"expected true or false, got {json_type(obj[key])}")


def check_obj(v: Any, where: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise Problem(where, f"expected an object, got {json_type(v)}")
    return v


def int_list(v: Any, where: str, *, minimum: int | None) -> list[int]:
    """A list of int64 integers, each >= `minimum` when given."""
    if not isinstance(v, list):
        raise Problem(where, f"expected a list of integers, got {json_type(v)}")
    low = INT64_MIN if minimum is None else minimum
    for i, x in enumerate(v):
        if not is_int(x):
            raise Problem(f"{where}[{i}]", f"expected an integer, got {json_type(x)}")
        if x < low:
            raise Problem(f"{where}[{i}]", f"expected an integer >= {low}, got {x}")
        if x > INT64_MAX:
            raise Problem(f"{where}[{i}]", f"expected an integer <= {INT64_MAX}, got {x}")
    return v


def json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return f"the integer {v}"
    if isinstance(v, float):
        return f"the number {v}"
    if isinstance(v, str):
        return f"the string {v!r}" if len(v) <= 40 else "a string"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__
