"""labels stage: what each kernel is (family, backend, phase with evidence, template parameters).

The taxonomy is data: `rules.toml` beside this file, an ordered first-match-wins table (docs/LABELS.md).
User rules (same format) from `$TRACEINSIGHT_RULES` or an explicit path are tried first.

    >>> from traceinsight.labels import label
    >>> lab = label("void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0, "
    ...             "2u, 1u, 8u, 16u, 8u, 1u, flashinfer::DefaultAttention<false, false, false, false>, "
    ...             "Params>(Params)")
    >>> lab.family, lab.backend, lab.phase, lab.params["group_size"], lab.params["head_dim"]
    ('attention', 'flashinfer-cuda-core', 'decode', 8, 128)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from traceinsight.labels.engine import RuleSet
from traceinsight.labels.extract import fill
from traceinsight.labels.result import FAMILIES, PHASES, Label
from traceinsight.labels.rules import BUILTIN, RuleData, read_rules_file

__all__ = [
    "FAMILIES",
    "PHASES",
    "LABEL_COLUMNS",
    "Label",
    "RuleSet",
    "label",
    "label_rows",
    "load_rules",
    "phase_in_context",
    "rules_env_path",
]

ENV_VAR = "TRACEINSIGHT_RULES"
LABEL_COLUMNS = ("name", "family", "backend", "kernel", "phase", "phase_evidence", "rule", "params_json")


@lru_cache(maxsize=1)
def _builtin_rules() -> RuleData:
    return read_rules_file(BUILTIN)


def rules_env_path() -> Path | None:
    """The user rules file named by $TRACEINSIGHT_RULES, if set."""
    v = os.environ.get(ENV_VAR, "").strip()
    return Path(v).expanduser() if v else None


def load_rules(extra: Path | None = None) -> RuleSet:
    """The built-in rules, preceded by a user rules file (`extra`, else $TRACEINSIGHT_RULES when set).

    Raises InputError (missing file) or FormatError (bad file) with a one-line message naming the path.
    """
    builtin = _builtin_rules()
    user_path = extra if extra is not None else rules_env_path()
    if user_path is None:
        return RuleSet([builtin])
    user = read_rules_file(Path(user_path), builtin.extractors)
    return RuleSet([user, builtin])


@lru_cache(maxsize=4)
def _default_rules(env_value: str) -> RuleSet:
    return load_rules(Path(env_value).expanduser() if env_value else None)


def default_rules() -> RuleSet:
    """The rule set `label()` uses: built-in rules plus $TRACEINSIGHT_RULES (re-read when it changes)."""
    return _default_rules(os.environ.get(ENV_VAR, "").strip())


def label(name: str) -> Label:
    """Label one kernel name (demangled, Nsight Systems style, Nsight Compute style or mangled).

    Unknown names get family 'other', backend None, rule 'fallback' and a short base name.
    """
    return _label_cached(name, os.environ.get(ENV_VAR, "").strip())


@lru_cache(maxsize=65536)
def _label_cached(name: str, env_value: str) -> Label:
    return _default_rules(env_value).label(name)


def label_rows(names: Iterable[str], rules: RuleSet | None = None) -> dict[str, list[object]]:
    """Columns for a DuckDB table `kernel_labels`: one row per distinct name, in first-seen order.

    params_json is a JSON object with sorted keys ('{}' when there are none).
    """
    rs = rules or default_rules()
    cols: dict[str, list[object]] = {c: [] for c in LABEL_COLUMNS}
    seen: set[str] = set()
    for n in names:
        if n in seen:
            continue
        seen.add(n)
        lab = rs.label(n)
        cols["name"].append(n)
        cols["family"].append(lab.family)
        cols["backend"].append(lab.backend)
        cols["kernel"].append(lab.kernel)
        cols["phase"].append(lab.phase)
        cols["phase_evidence"].append(lab.phase_evidence)
        cols["rule"].append(lab.rule)
        cols["params_json"].append(json.dumps(dict(lab.params), sort_keys=True))
    return cols


def phase_in_context(
    label: Label,
    *,
    range_name: str | None,
    q_rows_per_request: int | None = None,
    rules: RuleSet | None = None,
) -> tuple[str, str]:
    """(phase, evidence) of a kernel given where it ran.

    The [[context]] rules are tried in order: by default an enclosing range/step name with the word
    'decode' or 'prefill' wins; else one query row per request means decode; else the label's own phase.
    """
    rs = rules or default_rules()
    values = {"range_name": range_name, "q_rows_per_request": q_rows_per_request}
    for c in rs.contexts:
        if c.range_word is not None:
            if not range_name or not c.range_word.search(range_name):
                continue
            if c.unless_word is not None and c.unless_word.search(range_name):
                continue
        elif q_rows_per_request is None or q_rows_per_request != c.q_rows_per_request:
            continue
        return c.phase, fill(c.evidence, values)
    return label.phase, label.phase_evidence
