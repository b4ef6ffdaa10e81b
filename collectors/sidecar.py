"""Writing the `traceinsight.sidecar/1` file of a run (docs/SIDECAR.md is the specification; `/1.1` adds a
step's `qo_lens`, `/1.2` a step's `call` and FA3's plan fields, docs/COLLECTORS.md).

Stdlib only, because it also runs on the GPU machine, where traceinsight's analyzer dependencies (duckdb) are
absent. Where `traceinsight.ingest.sidecar` imports, the document is checked with its `validate()` before it is
written, so a collector never writes a sidecar the analyzer would reject.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "traceinsight.sidecar/1"
SCHEMA_QO = "traceinsight.sidecar/1.1"  # the minor version that adds a step's `qo_lens` (docs/SIDECAR.md)
SCHEMA_CALL = "traceinsight.sidecar/1.2"  # adds a step's `call` and FA3's plan fields (docs/COLLECTORS.md)


@dataclass
class PlanRecord:
    """The planner's decision read back from the wrapper (FlashInfer 0.6.1 private `_plan_info`).

    `padded_batch_size`: CTAs along grid x (None for the SM90 backend, which does not record it);
    `split_kv`: whether KV was split into chunks (a merge kernel follows); `chunk_tokens`: the KV chunk length
    in tokens (None where the backend has none); `plan_info`: the raw integers (None: left out of the file);
    `extra`: further plan fields of a backend (FA3: `num_splits_static`, `splits`), written after the others.
    """

    padded_batch_size: int | None
    split_kv: bool | None  # None: not known (a backend whose decision the collector cannot read)
    chunk_tokens: int | None
    plan_info: list[int] | None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = {"padded_batch_size": self.padded_batch_size, "split_kv": self.split_kv,
               "chunk_tokens": self.chunk_tokens, "plan_info": self.plan_info}
        if self.plan_info is None:
            del out["plan_info"]
        return {**out, **self.extra}


@dataclass
class StepRecord:
    """One annotated decode step: the key its range name carries and what the batch held."""

    key: str
    kv_lens: list[int]
    path: str  # cuda-core | tensor-core
    backend: str  # flashinfer-cuda-core | flashinfer-fa2 | flashinfer-sm90
    cuda_graph: bool
    plan: PlanRecord
    extra: dict[str, Any] = field(default_factory=dict)  # dist, live requests, ... (readers ignore them)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "batch_size": len(self.kv_lens), "kv_lens": self.kv_lens, "path": self.path,
                "backend": self.backend, "cuda_graph": self.cuda_graph, "plan": self.plan.to_json(), **self.extra}


def document(gpu: dict[str, Any], software: dict[str, str], model: dict[str, Any], steps: list[StepRecord],
             run: dict[str, Any] | None = None) -> dict[str, Any]:
    """The sidecar document. `run` (optional) records how the collection was made (kind, command, profiler)."""
    schema = (SCHEMA_CALL if any("call" in s.extra for s in steps)
              else SCHEMA_QO if any("qo_lens" in s.extra for s in steps) else SCHEMA)
    doc: dict[str, Any] = {"schema": schema, "gpu": gpu, "software": software, "model": model}
    if run:
        doc["run"] = run
    doc["steps"] = [s.to_json() for s in steps]
    return doc


def _validator() -> Any:
    """traceinsight's sidecar validator when the analyzer's dependencies are importable, else None."""
    try:
        from traceinsight.ingest.sidecar import validate
    except ImportError:
        return None
    return validate


def dumps(doc: dict[str, Any]) -> str:
    """JSON with one line per step (readable, and a fraction of the size of fully indented output)."""
    head = {k: v for k, v in doc.items() if k != "steps"}
    lines = json.dumps(head, indent=1)[:-2].rstrip()  # drop the closing brace; reopened below
    steps = ",\n  ".join(json.dumps(s, separators=(", ", ": ")) for s in doc["steps"])
    return f'{lines},\n "steps": [\n  {steps}\n ]\n}}\n'


def write(path: Path, doc: dict[str, Any]) -> Path:
    """Validate (where possible) and write `doc` to `path` atomically, gzip-compressed when the name ends with
    '.gz'. Returns the path."""
    validate = _validator()
    if validate is not None:
        validate(doc, source=path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = dumps(doc).encode()
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
