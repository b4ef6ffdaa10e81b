"""A fleet dataset on disk: its layout, its manifest, and writing one trace's outcome into it.

    DIR/manifest.json                        schema traceinsight.fleet/1: inputs, digests, status, errors, rows
    DIR/<table>/trace=<key>/part-0.parquet   one file per table and analyzed trace (hive partitioning)
    DIR/reports/<key>.json | .html           each trace's own report

Only the coordinator writes here (workers return values), each file under a temporary name renamed into place.
The manifest is rewritten after each trace unless that would take more than a tenth of the time (a manifest of
thousands of traces is then rewritten less often) and at the end: a fleet that is killed loses at most the
latest few outcomes' bookkeeping, and its next run analyzes those traces again and replaces their files.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from traceinsight import __version__
from traceinsight.errors import InputError

SCHEMA = "traceinsight.fleet/1"
MANIFEST = "manifest.json"
PART = "part-0.parquet"
SUMMARY = "summary"
REPORTS = "reports"
SAVE_SHARE = 0.1  # the most of a run's time that rewriting the manifest may take

# The per-trace summary table, typed here so that every partition has the same columns and types (times in ns).
SUMMARY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("path", "string"), ("format", "string"), ("gpu", "string"), ("kernels", "int64"), ("kernel_ns", "int64"),
    ("attention_share", "float64"), ("steps", "int64"), ("split_kv_on", "int64"), ("split_kv_off", "int64"),
    ("split_kv_off_share", "float64"), ("step_p50_ns", "int64"), ("step_p99_ns", "int64"),
    ("step_max_ns", "int64"), ("slowest_step", "string"), ("critical", "int64"), ("warning_findings", "int64"),
    ("infos", "int64"), ("findings", "int64"), ("top_finding", "string"), ("root_causes", "list<string>"),
    ("steps_wall_ns", "int64"), ("between_steps_ns", "int64"), ("saving_ns", "int64"),
    ("input_warnings", "list<string>"), ("digest", "string"), ("seconds", "float64"), ("analyzed", "string"),
)


@cache
def summary_schema() -> Any:
    import pyarrow as pa

    types = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(),
             "list<string>": pa.list_(pa.string())}
    return pa.schema([(name, types[t]) for name, t in SUMMARY_COLUMNS])


# Sources that do not decide what a trace's analysis holds: the commands, and the fleet's own report (which reads
# the dataset). Editing them does not re-analyze a fleet.
NOT_ANALYSIS = ("cli/", "fleet/report.py", "queries/fleet_")


def analysis_version() -> str:
    """What decides an analysis's result besides its input: the traceinsight version and the package's sources
    (code, SQL, rule and remedy data; NOT_ANALYSIS aside). A change re-analyzes every trace on the next run."""
    h = hashlib.blake2b(__version__.encode(), digest_size=8)
    root = resources.files("traceinsight")
    stack: list[tuple[str, Any]] = [("", root)]
    files = []
    while stack:
        prefix, d = stack.pop()
        for entry in d.iterdir():
            rel = prefix + entry.name
            if entry.is_dir():
                if entry.name != "__pycache__":
                    stack.append((rel + "/", entry))
            elif entry.name.endswith((".py", ".sql", ".toml")) and not rel.startswith(NOT_ANALYSIS):
                files.append((rel, entry))
    for rel, entry in sorted(files, key=lambda x: x[0]):
        h.update(rel.encode())
        h.update(entry.read_bytes())
    return h.hexdigest()


def analysis_key(digest: str | None, version: str, options: Mapping[str, Any]) -> str | None:
    """The identity of one analysis: content digest, code version and the options that change results."""
    if digest is None:
        return None
    text = json.dumps({"digest": digest, "version": version, "options": dict(options)}, sort_keys=True)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


class Dataset:
    """An open fleet dataset (created when missing). `entries` maps each trace key to its manifest entry."""

    def __init__(self, root: Path, options: Mapping[str, Any] | None = None) -> None:
        self.root = root
        manifest = read_manifest(root)
        self.entries: dict[str, dict[str, Any]] = {e["trace"]: e for e in manifest.get("traces", [])}
        self.options = dict(options or {})
        self.tables: list[str] = list(manifest.get("tables", []))
        self._saved = 0.0  # when the manifest was last written (monotonic s), and how long that took
        self._save_cost = 0.0
        # Looked up once per input: indexes, not scans of every entry (a fleet has thousands).
        self._source_of_key = {k: e["source"] for k, e in self.entries.items()}
        self._key_of_source = {src: k for k, src in self._source_of_key.items()}
        self._done: dict[str, str] = {}  # analysis key -> trace key, of the entries analyzed ('ok')
        for k, e in self.entries.items():
            if e.get("status") == "ok" and e.get("analysis_key"):
                self._done.setdefault(e["analysis_key"], k)

    # --- planning -------------------------------------------------------------------------------------------
    def known_digests(self) -> dict[str, tuple[str, str]]:
        """source -> (fingerprint, digest) of every entry with a digest (reused while the files are unchanged)."""
        return {e["source"]: (e["fingerprint"], e["digest"]) for e in self.entries.values()
                if e.get("digest") and e.get("fingerprint")}

    def key_for(self, source: str) -> str:
        """The trace key of `source`: its entry's when it has one, else a new unique one (docs/FLEET.md)."""
        from traceinsight.ingest.parquet import trace_key

        if source in self._key_of_source:
            return self._key_of_source[source]
        return trace_key(source, self._source_of_key)

    def done_as(self, akey: str | None) -> str | None:
        """The key of an entry analyzed with this analysis key whose files are all there, if any."""
        key = self._done.get(akey) if akey else None
        return key if key is not None and self._complete(key, self.entries[key]) else None

    def _complete(self, key: str, entry: Mapping[str, Any]) -> bool:
        return all((self.root / t / f"trace={key}" / PART).is_file() for t in entry.get("rows", {})) and all(
            (self.root / rel).is_file() for rel in entry.get("reports", {}).values())

    # --- writing ----------------------------------------------------------------------------------------------
    def reserve(self, key: str, entry: dict[str, Any]) -> None:
        """Claim `key` for an input about to be analyzed (so that later inputs get other keys). Its status is
        'pending' until its outcome is written: a run killed before then analyzes it again next time."""
        old = self.entries.get(key, {})
        self.entries[key] = {"aliases": [], **old, **entry, "status": "pending", "error": None}
        self._key_of_source[entry["source"]] = key
        self._source_of_key[key] = entry["source"]

    def add_alias(self, key: str, source: str) -> None:
        aliases = self.entries[key].setdefault("aliases", [])
        if source != self.entries[key]["source"] and source not in aliases:
            aliases.append(source)

    def write(self, key: str, outcome: Any) -> dict[str, Any]:
        """Write a task's outcome (`task.Outcome`) under `key` and update its manifest entry; return the entry."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        entry = self.entries[key]
        self._remove_files(key, entry)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        entry.update(status=outcome.status, error=outcome.error, seconds=round(outcome.seconds, 3),
                     worker=outcome.worker, analyzed=stamp, warnings=list(outcome.warnings), rows={}, reports={})
        if outcome.status != "ok":
            self.save()
            return entry
        summary = {**outcome.summary, "digest": entry.get("digest"), "seconds": round(outcome.seconds, 3),
                   "analyzed": stamp}
        tables = {SUMMARY: pa.Table.from_pylist([summary], schema=summary_schema()), **outcome.tables}
        for name, table in tables.items():
            dest = self.root / name / f"trace={key}" / PART
            _atomic(dest, lambda tmp, t=table: pq.write_table(t, tmp, compression="zstd"))
            entry["rows"][name] = table.num_rows
            if name not in self.tables:
                self.tables.append(name)
        for fmt, content in outcome.reports.items():
            rel = f"{REPORTS}/{key}.{fmt}"
            _atomic(self.root / rel, lambda tmp, c=content: Path(tmp).write_bytes(c))
            entry["reports"][fmt] = rel
        self.save()
        return entry

    def _remove_files(self, key: str, entry: Mapping[str, Any]) -> None:
        """The files of an earlier analysis of `key` (they describe other content, or another run's options)."""
        for table in set(entry.get("rows", {})) | set(self.tables):
            (self.root / table / f"trace={key}" / PART).unlink(missing_ok=True)
        for rel in entry.get("reports", {}).values():
            (self.root / rel).unlink(missing_ok=True)

    def save(self, force: bool = False) -> None:
        """Rewrite the manifest (atomically); unless `force`, only when that keeps its share of the time under
        SAVE_SHARE."""
        now = time.monotonic()
        if not force and now - self._saved < self._save_cost / SAVE_SHARE:
            return
        import duckdb
        import pyarrow

        traces = sorted(self.entries.values(), key=lambda e: e["trace"])
        manifest = {
            "schema": SCHEMA,
            "layout": {"tables": "<table>/trace=<trace>/" + PART, "reports": REPORTS + "/<trace>.<format>"},
            "tables": sorted(self.tables),
            "versions": {"traceinsight": __version__, "duckdb": duckdb.__version__, "pyarrow": pyarrow.__version__},
            "options": self.options,
            "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "counts": {s: sum(1 for e in traces if e.get("status") == s) for s in ("ok", "error", "pending")},
            "traces": traces,
        }
        self.root.mkdir(parents=True, exist_ok=True)
        _atomic(self.root / MANIFEST, lambda tmp: Path(tmp).write_text(json.dumps(manifest, indent=2) + "\n"))
        self._saved = time.monotonic()
        self._save_cost = self._saved - now


def read_manifest(root: Path, must_exist: bool = False) -> dict[str, Any]:
    """The manifest of the fleet dataset at `root`: {} when there is none yet (unless `must_exist`). An InputError
    (one line) when `root` is not a folder, or holds another kind of manifest or a damaged one: never read or write
    such a folder as a fleet dataset."""
    if root.exists() and not root.is_dir():
        raise InputError(f"{root}: not a folder (a fleet dataset is the folder `traceinsight fleet analyze --out` "
                         "writes)")
    path = root / MANIFEST
    if not path.is_file():
        if not must_exist:
            return {}
        if not root.exists():
            raise InputError(f"{root}: no such folder")
        raise InputError(f"{root}: not a fleet dataset (no {MANIFEST}; make one with "
                         "`traceinsight fleet analyze PATHS --out DIR`)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: unreadable manifest ({type(exc).__name__}); remove it to start again") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else None
        raise InputError(f"{root}: not a fleet dataset (its {MANIFEST} has schema {found!r}, expected {SCHEMA!r}); "
                         "choose another folder")
    if not isinstance(data.get("traces", []), list):
        raise InputError(f"{path}: damaged manifest ('traces' is not a list)")
    return data


def _atomic(dest: Path, write: Any) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(str(tmp))
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def _umask() -> int:
    from traceinsight.report.files import current_umask

    return current_umask()
