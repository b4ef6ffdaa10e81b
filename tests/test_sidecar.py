"""Sidecars: the legacy H200 meta files and the versioned traceinsight.sidecar/1 format.

Expected numbers were read independently with `zcat FILE | python -c 'import json...'`: case counts, the sum of
every kv_lens, and plan_info[-1] (split_kv) per case; range names from the traces' `user_annotation` events
(json) and the nsys `NVTX_EVENTS` table (sqlite3).
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from traceinsight.errors import FormatError
from traceinsight.ingest import TraceDB, load, read_file, sidecar, sidecar_legacy

SWEEP = "flashinfer_decode_sweep"
FA2 = "flashinfer_fa2_decode_sweep"


def _json(path: Path) -> Any:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _batches(path: Path) -> list[dict[str, Any]]:
    db = TraceDB()
    ingest, _ = read_file(path)
    assert ingest.format == "sidecar"
    t = db.add(ingest, path)
    return db.rows("SELECT * FROM batches WHERE trace_id = $t", {"t": t})


def _annotation_names(trace: Path) -> list[str]:
    return [e["name"] for e in _json(trace)["traceEvents"] if e.get("cat") == "user_annotation"]


def _nvtx_names(sqlite_path: Path) -> list[str]:
    con = sqlite3.connect(f"file:{sqlite_path}?mode=ro&immutable=1", uri=True)
    try:
        return [r[0] for r in con.execute("SELECT text FROM NVTX_EVENTS WHERE eventType = 59")]
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------- legacy files
def test_sweep_meta(h200: Path) -> None:
    rows = _batches(h200 / f"{SWEEP}.meta.json.gz")
    assert len(rows) == 130  # 2 paths x 5 distributions x 13 batch sizes
    assert len({r["step_key"] for r in rows}) == 130
    assert rows[0]["step_key"] == "tc=0 dist=uniform bs=8"
    assert sum(sum(r["kv_lens"]) for r in rows) == 34065768
    assert all(len(r["kv_lens"]) == r["batch_size"] for r in rows)
    assert {(r["qo_heads"], r["kv_heads"], r["head_dim"], r["page_size"], r["kv_dtype"]) for r in rows} == {
        (32, 4, 128, 16, None)
    }
    cuda_core = [r for r in rows if r["path"] == "cuda-core"]
    sm90 = [r for r in rows if r["path"] == "tensor-core"]
    assert {r["backend"] for r in cuda_core} == {"flashinfer-cuda-core"}
    assert {r["backend"] for r in sm90} == {"flashinfer-sm90"}
    assert sum(r["planned_split_kv"] for r in cuda_core) == 41 and len(cuda_core) == 65
    assert {r["planned_split_kv"] for r in sm90} == {False}
    assert {r["planned_padded_batch"] for r in sm90} == {None}
    assert {r["cuda_graph"] for r in cuda_core} == {False}
    # The split-KV threshold on the CUDA-core path: B = 296 still splits, B = 297 does not (README: 297).
    skew80 = {r["batch_size"]: r for r in cuda_core if "dist=skew80" in r["step_key"]}
    assert (skew80[296]["planned_split_kv"], skew80[296]["planned_padded_batch"]) == (True, 297)
    assert (skew80[297]["planned_split_kv"], skew80[297]["planned_padded_batch"]) == (False, 297)
    assert skew80[512]["plan_info"] == [512, 0, 0, 0, 2048, 4096, 0, 6148, 0, 0]


def test_fa2_meta(h200: Path) -> None:
    rows = _batches(h200 / f"{FA2}.meta.json.gz")
    assert len(rows) == 65
    assert rows[0]["step_key"] == "tc=1 backend=fa2 dist=uniform bs=8"
    assert sum(sum(r["kv_lens"]) for r in rows) == 17035449
    assert {(r["path"], r["backend"], r["cuda_graph"]) for r in rows} == {("tensor-core", "flashinfer-fa2", False)}
    assert sum(r["planned_split_kv"] for r in rows) == 23
    first = rows[0]  # plan_info [64, 8, 0, 16, 0, 256, 512, 816, 768, 804, 0, 16777216, 864, 0, 1]
    assert (first["planned_padded_batch"], first["planned_split_kv"]) == (64, True)
    # README: the FA2 planner stops splitting at B >= 66 for H_kv = 4.
    assert {r["batch_size"] for r in rows if r["planned_split_kv"]} <= {8, 16, 32, 48, 64}


def test_nsys_meta(h200: Path) -> None:
    rows = _batches(h200 / "flashinfer_decode.nsys.meta.json")
    assert len(rows) == 16
    assert [r["step_key"] for r in rows[:2]] == ["tc=0 dist=uniform bs=32", "tc=0 dist=uniform bs=128"]
    assert {r["kv_lens"] for r in rows} == {None}  # the nsys meta has max_len only
    assert {r["qo_heads"] for r in rows} == {None}  # and no model shape
    split = {r["step_key"] for r in rows if r["planned_split_kv"]}
    assert split == {
        "tc=0 dist=uniform bs=32",
        "tc=0 dist=uniform bs=128",
        "tc=0 dist=skew80 bs=32",
        "tc=0 dist=skew80 bs=128",
        "tc=0 dist=skew80 bs=256",
    }
    assert {r["backend"] for r in rows if r["path"] == "tensor-core"} == {"flashinfer-sm90"}


@pytest.mark.parametrize(
    ("trace", "meta", "ranges_per_key"),
    [
        (f"{SWEEP}.pt.trace.json.gz", f"{SWEEP}.meta.json.gz", 3),  # "decode tc=0 dist=uniform bs=8 step=0..2"
        (f"{FA2}.pt.trace.json.gz", f"{FA2}.meta.json.gz", 3),  # "decode tc=1 backend=fa2 dist=... step=0..2"
        ("flashinfer_decode.sqlite", "flashinfer_decode.nsys.meta.json", 1),  # NVTX "tc=0 dist=skew80 bs=128"
    ],
)
def test_step_keys_match_range_names(h200: Path, trace: str, meta: str, ranges_per_key: int) -> None:
    names = _nvtx_names(h200 / trace) if trace.endswith(".sqlite") else _annotation_names(h200 / trace)
    keys = [r["step_key"] for r in _batches(h200 / meta)]
    # Read independently of our trace readers: every key names exactly `ranges_per_key` ranges and every range
    # is named by exactly one key.
    assert all(sum(sidecar.key_matches(k, n) for n in names) == ranges_per_key for k in keys)
    assert all(sum(sidecar.key_matches(k, n) for k in keys) == 1 for n in names)
    # The same through load() and the SQL form of the rule.
    db, ids = load([h200 / trace], meta=[h200 / meta])
    pairs = db.rows(
        f"""SELECT b.step_key, count(r.range_id) AS n FROM batches b
            LEFT JOIN ranges r ON r.trace_id = b.trace_id AND r.side = 'cpu'
             AND {sidecar.key_matches_sql("b.step_key", "r.name")}
            WHERE b.trace_id = $t GROUP BY b.step_key""",
        {"t": ids[0]},
    )
    assert len(pairs) == len(keys) and {p["n"] for p in pairs} == {ranges_per_key}


def test_key_matches() -> None:
    assert sidecar.key_matches("tc=0 dist=uniform bs=8", "decode tc=0 dist=uniform bs=8 step=0")
    assert sidecar.key_matches("bs=8 tc=0", "decode tc=0 dist=uniform bs=8 step=0")  # order ignored
    assert not sidecar.key_matches("tc=0 dist=uniform bs=8", "decode tc=0 dist=uniform bs=80 step=0")
    assert not sidecar.key_matches("tc=0 dist=uniform bs=8", "decode tc=1 dist=uniform bs=8 step=0")
    assert not sidecar.key_matches("", "anything")
    assert not sidecar.key_matches("   ", "anything")
    db = TraceDB()
    for key, name in [("a b", "x  a\tb"), ("a b", "a"), ("", "a"), ("bs=8", "bs=80")]:
        got = db.rows(f"SELECT {sidecar.key_matches_sql('$k', '$n')} AS m", {"k": key, "n": name})[0]["m"]
        assert got == sidecar.key_matches(key, name), (key, name)


def test_is_sidecar(h200: Path) -> None:
    for name in (f"{SWEEP}.meta.json.gz", f"{FA2}.meta.json.gz", "flashinfer_decode.nsys.meta.json"):
        assert sidecar.is_sidecar(_json(h200 / name))
    assert not sidecar.is_sidecar(_json(h200 / "flashinfer_decode_small.pt.trace.json.gz"))
    assert not sidecar.is_sidecar([])
    assert sidecar.is_sidecar({"schema": "traceinsight.sidecar/7"})  # recognised, then rejected by the reader


# ---------------------------------------------------------------------------------------------- format /1
def _v1_from_sweep(h200: Path, n: int = 6) -> dict[str, Any]:
    """A traceinsight.sidecar/1 document built from the first `n` cases of the real sweep meta."""
    meta = _json(h200 / f"{SWEEP}.meta.json.gz")
    steps = []
    for case in meta["cases"][:n]:
        plan = case["plan_info"]
        steps.append(
            {
                "key": f"tc={case['tc']} dist={case['dist']} bs={case['B']}",
                "batch_size": case["B"],
                "kv_lens": case["kv_lens"],
                "path": "cuda-core",
                "backend": "flashinfer-cuda-core",
                "cuda_graph": bool(plan[8]),
                "plan": {
                    "padded_batch_size": plan[0],
                    "split_kv": bool(plan[9]),
                    "chunk_tokens": None,
                    "plan_info": plan,
                },
            }
        )
    steps[-1]["model"] = {"kv_dtype": "float8_e4m3fn"}
    return {
        "schema": "traceinsight.sidecar/1",
        "gpu": {"name": "NVIDIA H200", "num_sms": 132},
        "software": {"flashinfer": "0.6.1", "torch": "2.11", "cuda": "13.0"},
        "model": {
            "qo_heads": meta["QH"],
            "kv_heads": meta["KH"],
            "head_dim": meta["HD"],
            "page_size": meta["PAGE"],
            "kv_dtype": "bfloat16",
            "q_dtype": "bfloat16",
        },
        "steps": steps,
    }


@pytest.mark.parametrize("name", ["steps.sidecar.json", "steps.sidecar.json.gz"])
def test_write_and_read_back(tmp_path: Path, h200: Path, name: str) -> None:
    doc = _v1_from_sweep(h200)
    out = tmp_path / name
    sidecar.write_sidecar(out, doc)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no temporary file left behind
    assert (out.read_bytes()[:2] == b"\x1f\x8b") == name.endswith(".gz")
    assert _json(out) == doc
    rows = _batches(out)
    assert [r["step_key"] for r in rows] == [s["key"] for s in doc["steps"]]
    first = rows[0]
    assert first["kv_lens"] == [32768] * 8 and first["batch_size"] == 8
    plan = (first["planned_padded_batch"], first["planned_split_kv"], first["planned_chunk_tokens"])
    assert plan == (296, True, None)
    assert (first["qo_heads"], first["kv_heads"], first["head_dim"], first["page_size"]) == (32, 4, 128, 16)
    assert [r["kv_dtype"] for r in rows] == ["bfloat16"] * 5 + ["float8_e4m3fn"]  # the per-step override
    assert first["plan_info"] == doc["steps"][0]["plan"]["plan_info"]


def test_v1_attached_to_trace(tmp_path: Path, h200: Path) -> None:
    out = tmp_path / "sweep.sidecar.json"
    sidecar.write_sidecar(out, _v1_from_sweep(h200))
    db, ids = load([h200 / f"{SWEEP}.pt.trace.json.gz"], meta=[out])
    n = db.rows(
        f"SELECT count(*) AS n FROM batches b JOIN ranges r ON r.trace_id = b.trace_id AND r.side = 'cpu' "
        f"AND {sidecar.key_matches_sql('b.step_key', 'r.name')} WHERE b.trace_id = $t",
        {"t": ids[0]},
    )[0]["n"]
    assert n == 6 * 3


def test_minor_version_and_unknown_keys_accepted(h200: Path, tmp_path: Path) -> None:
    """A later minor version with a key this reader does not know validates, and its step loads as before."""
    doc = _v1_from_sweep(h200, n=1)
    doc["schema"] = "traceinsight.sidecar/1.3"
    doc["steps"][0]["future_field"] = {"anything": 1}
    sidecar.validate(doc)
    out = tmp_path / "future.sidecar.json"
    out.write_text(json.dumps(doc))
    rows = _batches(out)
    assert [(r["step_key"], r["batch_size"], r["kv_lens"]) for r in rows] == [
        (doc["steps"][0]["key"], 8, [32768] * 8)]
    doc["schema"] = "traceinsight.sidecar/2.0"  # a major version this reader does not know is refused
    with pytest.raises(FormatError):
        sidecar.validate(doc)


def _mutate(doc: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    target: Any = doc
    for part in path[:-1]:
        target = target[part]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return doc


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["schema"], "traceinsight.sidecar/2", "$.schema: version 2 of the sidecar format is not supported"),
        (["schema"], "traceinsight.sidecar", "$.schema: expected 'traceinsight.sidecar/1'"),
        (["steps"], [], "$.steps: expected a non-empty list of steps"),
        (["steps"], _DELETE, "$: missing required field 'steps'"),
        (["steps", 1, "kv_lens"], [1, 2, 3], "$.steps[1].kv_lens: has 3 entries but batch_size is 16"),
        (["steps", 0, "kv_lens", 2], 1.5, "$.steps[0].kv_lens[2]: expected an integer, got the number 1.5"),
        (["steps", 0, "batch_size"], "8", "$.steps[0].batch_size: expected an integer, got the string '8'"),
        (["steps", 0, "batch_size"], True, "$.steps[0].batch_size: expected an integer, got a boolean"),
        (["steps", 0, "batch_size"], _DELETE, "$.steps[0]: missing required field 'batch_size'"),
        (["steps", 0, "cuda_graph"], 1, "$.steps[0].cuda_graph: expected true or false, got the integer 1"),
        (["steps", 2, "plan", "split_kv"], 0, "$.steps[2].plan.split_kv: expected true or false"),
        (["steps", 2, "plan", "chunk_tokens"], 0, "$.steps[2].plan.chunk_tokens: expected an integer >= 1, got 0"),
        (["steps", 3, "key"], "tc=0 dist=uniform bs=8", "$.steps[3].key: duplicate key 'tc=0 dist=uniform bs=8'"),
        (["steps", 3], "step", "$.steps[3]: expected an object, got the string 'step'"),
        (["model", "kv_heads"], 0, "$.model.kv_heads: expected an integer >= 1, got 0"),
        (["gpu", "num_sms"], "132", "$.gpu.num_sms: expected an integer"),
        (["software", "torch"], 2.11, "$.software.torch: expected a version string"),
    ],
)
def test_invalid_v1(tmp_path: Path, h200: Path, path: list[Any], value: Any, message: str) -> None:
    doc = _mutate(_v1_from_sweep(h200), path, value)
    with pytest.raises(FormatError) as info:
        sidecar.validate(doc)
    assert str(info.value).startswith(f"sidecar {message}")
    # Through the reader: one line starting with the file's path; write_sidecar refuses to write it.
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(FormatError) as info:
        read_file(bad)
    text = str(info.value)
    assert text.startswith(f"{bad}: sidecar {message}") and "\n" not in text
    with pytest.raises(FormatError):
        sidecar.write_sidecar(tmp_path / "out.json", doc)
    assert not (tmp_path / "out.json").exists()


def test_invalid_legacy(tmp_path: Path, h200: Path) -> None:
    meta = _json(h200 / f"{SWEEP}.meta.json.gz")
    meta["cases"][5]["kv_lens"] = meta["cases"][5]["kv_lens"][:-1]  # case 5: tc=0 uniform B=128
    bad = tmp_path / "sweep.meta.json"
    bad.write_text(json.dumps(meta))
    with pytest.raises(FormatError) as info:
        read_file(bad)
    assert str(info.value) == f"{bad}: legacy meta sidecar $.cases[5].kv_lens: has 127 entries but B is 128"

    cases = _json(h200 / "flashinfer_decode.nsys.meta.json")
    cases[2]["tc"] = 2
    bad.write_text(json.dumps(cases))
    with pytest.raises(FormatError) as info:
        read_file(bad)
    assert str(info.value) == f"{bad}: legacy meta sidecar $[2].tc: expected 0 (CUDA-core) or 1 (tensor-core), got 2"


def test_legacy_plan_layouts() -> None:
    decode = [297, 0, 4866048, 0, 1200, 2400, 3600, 3592, 1, 1]  # enable_cuda_graph set
    assert sidecar_legacy.legacy_plan(0, decode, None) == {
        "backend": "flashinfer-cuda-core",
        "planned_padded_batch": 297,
        "planned_split_kv": True,
        "cuda_graph": True,
    }
    fa2 = [64, 8, 0, 16, 0, 256, 512, 816, 768, 804, 0, 16777216, 864, 0, 1]
    assert sidecar_legacy.legacy_plan(1, fa2, None)["backend"] == "flashinfer-fa2"
    sm90 = [0, 4096, 8192, 12288, 16384, 20480, 24576, 25120, 0]
    assert sidecar_legacy.legacy_plan(1, sm90, None) == {
        "backend": "flashinfer-sm90",
        "planned_padded_batch": None,
        "planned_split_kv": False,
        "cuda_graph": None,
    }
