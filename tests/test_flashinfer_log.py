"""FlashInfer's own API log as a sidecar source (traceinsight/ingest/flashinfer_log.py, model/log_match.py), on the
captures of examples/flashinfer_log: one H200 run each of the collectors with FLASHINFER_LOGLEVEL set, so the
trace, the collector's sidecar and FlashInfer's log describe the same steps. The analysis with `--meta LOG` must
agree with the analysis with `--meta SIDECAR`: same batches, same split-KV state and same model time per launch."""

from __future__ import annotations

import gzip
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, read_json

from traceinsight.errors import FormatError
from traceinsight.ingest import detect, read_file
from traceinsight.pipeline import analyze

FILOG = EXAMPLES / "flashinfer_log"
LEVEL10 = ("sweep_l10", "sweep_l10st", "serving_l10")


def stage(name: str, into: Path, dumps: bool = True) -> Path:
    """The capture's log copied into `into`, its level-10 dump folder unpacked beside it as the run left it."""
    log = into / f"{name}.flashinfer.log.gz"
    shutil.copy(FILOG / log.name, log)
    packed = FILOG / f"{name}_dumps.tar.gz"
    if dumps and packed.exists():
        with tarfile.open(packed) as tar:
            tar.extractall(into, filter="data")
    return log


def rows(path: Path) -> list[dict[str, Any]]:
    ingest, _ = read_file(path)
    cols = ingest.lists("batches")
    return [dict(zip(cols, values, strict=True)) for values in zip(*cols.values(), strict=True)]


def per_step(analysis: Any) -> dict[str, dict[str, Any]]:
    sched = analysis.schedule
    out = {}
    for s in analysis.steps:
        if not s.launches:
            continue
        sb = sched.batches[s.index]
        models = [sched.models.get(x.attention.kernel_id) for x in s.launches]
        out[s.name] = {"source": sb.source, "batch_size": sb.batch_size, "kv_lens": sb.kv_lens,
                       "split": [m.split_kv if m else None for m in models],
                       "model_source": [m.source if m else None for m in models],
                       "predicted_ns": [m.predicted_ns if m else None for m in models],
                       "grid_matches": [m.grid_matches if m else None for m in models]}
    return out


def test_detected_by_content(tmp_path: Path) -> None:
    log = stage("sweep_l3", tmp_path)
    assert detect(log) == "flashinfer-log"
    plain = tmp_path / "renamed.json"
    plain.write_bytes(gzip.decompress(log.read_bytes()))
    assert detect(plain) == "flashinfer-log"


@pytest.mark.parametrize("name", LEVEL10)
def test_level10_rows_are_the_sidecar_batches(tmp_path: Path, name: str) -> None:
    """Every plan() dump gives the KV lengths the collector recorded for the steps it planned (the warm-up plans,
    one per path before the profile, have no sidecar step)."""
    got = rows(stage(name, tmp_path))
    sidecar = read_json(FILOG / f"{name}.sidecar.json.gz")
    assert all(r["kv_lens"] is not None and len(r["kv_lens"]) == r["batch_size"] for r in got)
    assert all(r["qo_lens"] == [1] * r["batch_size"] for r in got)  # decode wrappers: one query row per request
    assert {(r["qo_heads"], r["kv_heads"], r["head_dim"], r["page_size"], r["kv_dtype"]) for r in got} == {
        (32, 4, 128, 16, "bfloat16")}
    batches = [(r["path"], r["backend"], list(r["kv_lens"])) for r in got]
    for step in sidecar["steps"]:
        assert (step["path"], step["backend"], step["kv_lens"]) in batches, step["key"]
    ingest, _ = read_file(tmp_path / f"{name}.flashinfer.log.gz")
    assert ingest.format == "flashinfer-log" and ingest.format_version == "level 10"
    assert ingest.tool_version == "flashinfer 0.6.1, torch 2.11.0+cu130, cuda 13.0"
    assert not ingest.warnings


@pytest.mark.parametrize("name", [*LEVEL10, "sweep_l3"])
def test_log_and_sidecar_give_the_same_model(tmp_path: Path, name: str) -> None:
    """The trace analyzed with --meta SIDECAR and with --meta LOG: per step the same batch, per launch the same
    split-KV state and (level 10) the same planned work and predicted time."""
    trace = FILOG / f"{name}.pt.trace.json.gz"
    _, (by_sidecar,) = analyze([trace], meta=[FILOG / f"{name}.sidecar.json.gz"], cache=False)
    _, (by_log,) = analyze([trace], meta=[stage(name, tmp_path)], cache=False)
    a, b = per_step(by_sidecar), per_step(by_log)
    assert a.keys() == b.keys() and len(a) >= 4
    note = next(n for n in by_log.schedule.notes if n.startswith("FlashInfer API log:"))
    assert "the only stretch consistent" in note and f"{len(a)} steps got a batch" in note
    for step, x in a.items():
        y = b[step]
        assert y["source"] == "sidecar" and y["batch_size"] == x["batch_size"], step
        assert y["split"] == x["split"], step
        if name == "sweep_l3":  # level 3: no KV lengths, so the launch model is the trace's
            assert y["kv_lens"] is None and y["model_source"] == ["trace"]
        else:
            assert y["kv_lens"] == x["kv_lens"], step
            assert y["model_source"] == ["sidecar"] and y["grid_matches"] == [True], step
            assert y["predicted_ns"] == x["predicted_ns"], step
    splits = [s for v in a.values() for s in v["split"]]
    if name == "sweep_l10":  # both sides of both thresholds: CUDA-core 297, FA2 66
        assert splits.count(True) >= 10 and splits.count(False) >= 10


def test_level3_log_warns_that_lengths_are_missing(tmp_path: Path) -> None:
    ingest, _ = read_file(stage("sweep_l3", tmp_path))
    assert ingest.format_version == "level 3"
    assert ingest.warnings and "5 of 5 plan() calls without KV lengths" in ingest.warnings[0]
    assert [r["batch_size"] for r in rows(tmp_path / "sweep_l3.flashinfer.log.gz")] == [8, 16, 297, 16, 297]


def test_missing_dumps_fall_back_to_shapes(tmp_path: Path) -> None:
    log = stage("sweep_l10st", tmp_path, dumps=False)
    got = rows(log)
    assert [r["kv_lens"] for r in got] == [None] * 10 and [r["batch_size"] for r in got][2:] == [64, 66, 296, 297] * 2
    ingest, _ = read_file(log)
    assert "10 named dumps not found beside the log" in ingest.warnings[0]


def test_dumps_found_in_a_moved_folder(tmp_path: Path) -> None:
    """The log names its dumps relative to the process's working directory; a dump folder copied one level
    below the log's folder under another root name is still found by the call's own folder name."""
    stage("sweep_l10st", tmp_path)
    (tmp_path / "sweep_l10st_dumps").rename(tmp_path / "elsewhere")
    assert all(r["kv_lens"] is not None for r in rows(tmp_path / "sweep_l10st.flashinfer.log.gz"))


def test_level1_log_is_refused(tmp_path: Path) -> None:
    text = gzip.decompress((FILOG / "sweep_l3.flashinfer.log.gz").read_bytes()).decode()
    calls = [ln for ln in text.splitlines() if "] FlashInfer API Call: " in ln]
    path = tmp_path / "l1.log"
    path.write_text("\n".join(calls) + "\n")  # what level 1 writes: the call lines alone
    with pytest.raises(FormatError, match=r"^.*l1\.log: a FlashInfer API log at level 1 \(function names only\)"):
        read_file(path)


def test_cut_log_leaves_out_its_last_call(tmp_path: Path) -> None:
    lines = gzip.decompress((FILOG / "sweep_l3.flashinfer.log.gz").read_bytes()).decode().splitlines()
    last_plan = max(i for i, ln in enumerate(lines) if ln.endswith("FlashInfer API Call: "
                                                                   "BatchDecodeWithPagedKVCacheWrapper.plan"))
    path = tmp_path / "cut.log"
    path.write_text("\n".join(lines[: last_plan + 8]) + "\n")
    ingest, _ = read_file(path)
    assert len(ingest.lists("batches")["batch_size"]) == 4
    assert any("the log ends inside its last call" in w for w in ingest.warnings)


def test_two_fitting_stretches_match_nothing(tmp_path: Path) -> None:
    """The same calls logged twice: two stretches fit the trace, so no step gets a batch (and a note says so)."""
    text = gzip.decompress((FILOG / "sweep_l3.flashinfer.log.gz").read_bytes())
    path = tmp_path / "twice.log"
    path.write_bytes(text + text)
    _, (analysis,) = analyze([FILOG / "sweep_l3.pt.trace.json.gz"], meta=[path], cache=False)
    assert all(sb.source == "trace" for sb in analysis.schedule.batches.values())
    assert any("several stretches" in n for n in analysis.schedule.notes)


def test_log_of_another_run_matches_nothing(tmp_path: Path) -> None:
    _, (analysis,) = analyze([FILOG / "sweep_l3.pt.trace.json.gz"], meta=[stage("sweep_l10st", tmp_path)],
                             cache=False)
    assert all(sb.source == "trace" for sb in analysis.schedule.batches.values())
    assert any("no stretch of its" in n for n in analysis.schedule.notes)


def test_hostile_dump_pickle_is_refused(tmp_path: Path) -> None:
    """A dump whose pickle names another global than torch's tensor rebuild is refused, never called."""
    import zipfile

    log = stage("sweep_l10", tmp_path)
    dump = sorted((tmp_path / "sweep_l10_dumps").glob("*call0003"))[0] / "inputs.pt"
    with zipfile.ZipFile(dump) as z:
        entries = {n: z.read(n) for n in z.namelist()}
    pkl = next(n for n in entries if n.endswith("data.pkl"))
    entries[pkl] = entries[pkl].replace(b"torch._utils\n_rebuild_tensor_v2", b"posix_______\nsystem___________")
    assert b"posix" in entries[pkl]
    with zipfile.ZipFile(dump, "w") as z:
        for n, data in entries.items():
            z.writestr(n, data)
    with pytest.raises(FormatError, match=r"inputs\.pt: not a torch\.save file of integer tensors this reader "
                                          r"knows \(refused global posix_______\.system"):
        read_file(log)


def test_log_given_as_a_trace_warns(tmp_path: Path) -> None:
    _, (analysis,) = analyze([stage("sweep_l3", tmp_path)], cache=False)
    assert any(w.startswith("a FlashInfer API log (the batches of its plan() calls), not a trace")
               for w in analysis.warnings)
