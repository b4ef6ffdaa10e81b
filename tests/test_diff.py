"""`traceinsight diff BEFORE AFTER`: per kernel family and attention kernel what changed (time, split-KV state),
thresholds, findings; as text, JSON (traceinsight.diff/1) and HTML; BEFORE/AFTER may be traces or saved JSON.

Counts checked independently:
- flashinfer_decode_small.pt.trace.json.gz (zcat | python -c json.load): 12 BatchDecodeWithPagedKVCacheKernel,
  12 PersistentVariableLengthMergeStatesKernel (every CUDA-core launch split), 12 SM90 PrefillWithKVCacheKernel.
- flashinfer_decode.sqlite (sqlite3 on CUPTI_ACTIVITY_KIND_KERNEL joined to StringIds): 8 BatchDecode, 5 merges
  (split-KV on at B = 32/128 uniform and 32/128/256 skew80, off at B = 256 uniform and 384), 8 SM90 Prefill.
- flashinfer_fa2_decode_sweep.pt.trace.json.gz: 260 BatchPrefillWithPagedKVCacheKernel (FA2), 92 merges.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from traceinsight.cli import main


@pytest.fixture(scope="module")
def small_json(h200: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("diff") / "small.json"
    r = CliRunner().invoke(main, ["analyze", str(h200 / "flashinfer_decode_small.pt.trace.json.gz"),
                                  "--format", "json", "--out", str(out)])
    assert r.exit_code == 0, r.output
    return out


def _diff(*args: str) -> dict:  # type: ignore[type-arg]
    r = CliRunner().invoke(main, ["diff", *args, "--format", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _kernel(d: dict, name: str) -> dict:  # type: ignore[type-arg]
    return next(k for k in d["kernels"] if k["kernel"] == name)


def test_same_analysis_has_no_change(small_json: Path) -> None:
    d = _diff(str(small_json), str(small_json))
    assert d["schema"] == "traceinsight.diff/1"
    assert {k["status"] for k in d["kernels"]} == {"same"}
    assert {f["status"] for f in d["families"]} == {"same"}
    assert all(f["status"] == "same" for f in d["findings"])
    assert all(t["status"] == "same" for t in d["thresholds"])
    assert d["summary"][0].startswith("median step")
    # the saved document holds the steps that matter: the diff says its steps were matched among those only
    assert len(d["summary"]) == 2 and d["summary"][1].startswith("steps matched by name among the steps the")


def test_saved_json_against_an_nsys_export(small_json: Path, h200: Path) -> None:
    """Kineto JSON saved earlier vs an Nsight Systems export of a sweep that crosses B_th: the same kernels are
    matched across formats, and the CUDA-core kernel's split-KV state goes from always on to mixed."""
    d = _diff(str(small_json), str(h200 / "flashinfer_decode.sqlite"))
    decode = _kernel(d, "BatchDecodeWithPagedKVCacheKernel")
    assert decode["backend"] == "flashinfer-cuda-core"
    assert (decode["before"]["count"], decode["after"]["count"]) == (12, 8)
    before = decode["split_kv"]["before"]  # every launch in a step is split (a merge follows each of the 12)
    assert before["on"] > 0 and before["off"] == 0 and before["unknown"] == 0
    assert decode["split_kv"]["after"] == {"on": 5, "off": 3, "unknown": 0}
    assert decode["split_kv"]["changed"] is True
    assert "BatchDecodeWithPagedKVCacheKernel: split-KV on -> mixed" in d["summary"]
    sm90 = _kernel(d, "PrefillWithKVCacheKernel")
    assert (sm90["before"]["count"], sm90["after"]["count"]) == (12, 8)
    assert d["before"]["format"] == "kineto" and d["after"]["format"].startswith("nsys")


def test_backend_switch_shows_new_and_gone_kernels(small_json: Path, h200: Path) -> None:
    """CUDA-core + SM90 (small trace) -> the FA2 tensor-core path: kernels appear and disappear, and the FA2
    kernel brings its own split-KV threshold, B_th = 66 on the H200 with 4 KV heads (traces/README.md)."""
    d = _diff(str(small_json), str(h200 / "flashinfer_fa2_decode_sweep.pt.trace.json.gz"))
    statuses = {k["kernel"]: k["status"] for k in d["kernels"]}
    assert statuses["BatchPrefillWithPagedKVCacheKernel"] == "new"
    assert statuses["BatchDecodeWithPagedKVCacheKernel"] == "gone"
    assert statuses["PrefillWithKVCacheKernel"] == "gone"
    fa2 = _kernel(d, "BatchPrefillWithPagedKVCacheKernel")
    assert fa2["after"]["count"] == 260 and fa2["before"] is None
    assert "kernel BatchPrefillWithPagedKVCacheKernel [flashinfer-fa2] appears" in d["summary"]
    new_th = [t for t in d["thresholds"] if t["kernel"] == "BatchPrefillWithPagedKVCacheKernel"]
    assert [(t["status"], t["after"]["b_threshold"]) for t in new_th] == [("new", 66)]


class _Sections(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section" and a.get("data-section"):
            self.sections.append(str(a["data-section"]))


def test_text_and_html_formats(small_json: Path, h200: Path, tmp_path: Path) -> None:
    after = str(h200 / "flashinfer_decode.sqlite")
    r = CliRunner().invoke(main, ["diff", str(small_json), after])
    assert r.exit_code == 0, r.output
    assert "\x1b[" not in r.stdout
    lines = r.stdout.splitlines()
    assert lines[0].startswith("before: ") and lines[1].startswith("after:  ")
    assert any("split-KV on -> mixed" in line for line in lines)
    out = tmp_path / "diff.html"
    r = CliRunner().invoke(main, ["diff", str(small_json), after, "--format", "html", "--out", str(out)])
    assert r.exit_code == 0, r.output
    text = out.read_text(encoding="utf-8")
    p = _Sections()
    p.feed(text)
    assert p.sections == ["summary", "gate", "side-by-side", "findings", "kernels", "families", "thresholds"]
    assert "http://" not in text and "https://" not in text
    assert "on → mixed" in text


def test_missing_input_is_one_line_exit_2(small_json: Path, tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["diff", str(small_json), str(tmp_path / "nope.json")])
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and "nope.json" in r.stderr
