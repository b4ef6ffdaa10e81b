"""Kineto / torch.profiler JSON reader, on every real Kineto trace in ../shared/traces.

Expected values were computed independently of traceinsight, with the standard library's json reading floats as
Decimal (exact nanoseconds), e.g. for one file:

    python3 -c 'import gzip, json, collections; from decimal import Decimal as D
    d = json.loads(gzip.open("h200/flashinfer_decode_sweep.pt.trace.json.gz").read(), parse_float=D)
    ks = sorted((e for e in d["traceEvents"] if e.get("cat") in ("kernel", "Kernel")),
                key=lambda e: (D(e["ts"]), -D(e["dur"])))
    print(len(ks), sum(int(D(e["dur"]) * 1000) for e in ks), int(D(ks[0]["ts"]) * 1000), ks[0]["args"]["grid"])
    print(collections.Counter(e.get("cat") for e in d["traceEvents"]))'

(run in ../shared/traces; launches were counted as cuda_runtime/cuda_driver/Runtime events whose
args.correlation is that of a kernel or memcpy/memset; ProfilerStep ranges as user_annotation or 2021 Operator
events named ProfilerStep#N.)
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import FOREIGN, H200, sha256
from hypothesis import given, settings
from hypothesis import strategies as st

from traceinsight.errors import FormatError
from traceinsight.ingest import TraceDB, load
from traceinsight.ingest.kineto import from_document, load_json

SMALL = "flashinfer_decode_small.pt.trace.json.gz"
SWEEP = "flashinfer_decode_sweep.pt.trace.json.gz"
FA2 = "flashinfer_fa2_decode_sweep.pt.trace.json.gz"
HTA = "hta_a100_alexnet_critical_path_trace.json.gz"
TBPLUGIN_2021 = "kineto_tbplugin_v100_resnet50_worker0.1623143089861.pt.trace.json.gz"
TRACELENS = "tracelens_h100_Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


@dataclass(frozen=True)
class Expected:
    kernels: int
    kernel_dur_ns: int  # sum over all kernels
    first_kernel: tuple[int, int, tuple[int, int, int], tuple[int, int, int]]  # start_ns, dur_ns, grid, block
    memops: int
    launches: int
    ranges: dict[tuple[str, str], int]  # (kind, side) -> count
    devices: int
    device_name: str
    num_sms: int
    tool_version: str | None
    names: dict[str, int]  # kernel-name substring -> kernels whose name contains it


EXPECTED: dict[str, Expected] = {
    SMALL: Expected(
        48, 32_863_845, (5094641795369782, 1248, (256, 1, 1), (64, 1, 1)), 43, 91,
        {("annotation", "cpu"): 18, ("gpu_annotation", "gpu"): 18}, 1, "NVIDIA H200", 132, "cupti 130001",
        {"BatchDecodeWithPagedKVCacheKernel": 12, "PersistentVariableLengthMergeStatesKernel": 12,
         "PrefillWithKVCacheKernel<flashinfer::Sparse": 12},
    ),
    SWEEP: Expected(
        1074, 1_318_666_032, (5095372201730226, 896, (256, 1, 1), (64, 1, 1)), 911, 1985,
        {("annotation", "cpu"): 390, ("gpu_annotation", "gpu"): 390}, 1, "NVIDIA H200", 132, "cupti 130001",
        {"BatchDecodeWithPagedKVCacheKernel": 260, "PersistentVariableLengthMergeStatesKernel": 164,
         "PrefillWithKVCacheKernel": 260},
    ),
    FA2: Expected(
        547, 269_351_505, (5095486936738468, 960, (256, 1, 1), (64, 1, 1)), 456, 1003,
        {("annotation", "cpu"): 195, ("gpu_annotation", "gpu"): 195}, 1, "NVIDIA H200", 132, "cupti 130001",
        {"BatchPrefillWithPagedKVCacheKernel": 260, "PersistentVariableLengthMergeStatesKernel": 92},
    ),
    HTA: Expected(
        79, 10_692_000, (1695835573023613000, 71000, (864, 1, 1), (256, 1, 1)), 19, 98,
        {("annotation", "cpu"): 8}, 8, "NVIDIA A100-PG509-200", 108, None,
        {"cudnn::ops::nchwToNhwcKernel": 12},
    ),
    TBPLUGIN_2021: Expected(
        8772, 591_532_000, (1623142623531625000, 2000, (50, 1, 1), (256, 1, 1)), 324, 9096,
        {("profiler_step", "cpu"): 6}, 4, "Tesla V100-DGXS-32GB", 80, None,
        {"cudnn::bn_bw_1C11_kernel_new": 264, "cudnn::bn_fw_tr_1C11_singleread": 168},
    ),
    TRACELENS: Expected(
        1465, 45_432_698, (1428625731622250, 18112, (17888, 1, 1), (128, 1, 1)), 242, 1198,
        {("profiler_step", "cpu"): 1, ("gpu_annotation", "gpu"): 1}, 1, "NVIDIA H100 80GB HBM3", 132, "cupti 22",
        {"pytorch_flash::flash_fwd_kernel": 34, "sm90_xmma_gemm_bf16bf16": 241},
    ),
}


def kineto_files() -> list[Path]:
    """Every Kineto trace under h200/ and foreign/ (the *.meta.json.gz files are sidecars, not traces)."""
    files = [*H200.glob("*.json.gz"), *FOREIGN.glob("*.json.gz")]
    return sorted(p for p in files if not p.name.endswith(".meta.json.gz"))


@dataclass
class Loaded:
    db: TraceDB
    trace_id: int
    sha_before: str


_CACHE: dict[Path, Loaded] = {}


def loaded(path: Path) -> Loaded:
    """Ingest each real trace once per test session (through the public `load`)."""
    if path not in _CACHE:
        before = sha256(path)
        db, ids = load([path])
        _CACHE[path] = Loaded(db, ids[0], before)
    return _CACHE[path]


def one(db: TraceDB, sql: str) -> Any:
    return next(iter(db.rows(sql)[0].values()))


def assert_one_line_error(exc: pytest.ExceptionInfo[FormatError], path: Path, *words: str) -> None:
    msg = str(exc.value)
    assert msg.startswith(str(path)), msg
    assert "\n" not in msg, msg
    for w in words:
        assert w in msg, msg


# ------------------------------------------------------------------ every real trace
def test_expectations_cover_every_real_kineto_trace(h200: Path, foreign: Path) -> None:
    assert sorted(p.name for p in kineto_files()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_trace_contents(name: str, h200: Path, foreign: Path) -> None:
    path = (h200 if (h200 / name).exists() else foreign) / name
    exp = EXPECTED[name]
    got = loaded(path)
    db, t = got.db, got.trace_id

    trace = db.rows(f"SELECT * FROM traces WHERE trace_id = {t}")[0]
    assert (trace["format"], trace["format_version"], trace["tool_version"]) == ("kineto", "1", exp.tool_version)
    assert trace["warnings"] == []

    assert one(db, f"SELECT count(*) FROM kernels WHERE trace_id = {t}") == exp.kernels
    assert one(db, f"SELECT sum(dur_ns) FROM kernels WHERE trace_id = {t}") == exp.kernel_dur_ns
    first = db.rows(f"SELECT * FROM kernels WHERE trace_id = {t} AND kernel_id = 0")[0]
    start, dur, grid, block = exp.first_kernel
    assert (first["start_ns"], first["dur_ns"]) == (start, dur)
    assert (first["grid_x"], first["grid_y"], first["grid_z"]) == grid
    assert (first["block_x"], first["block_y"], first["block_z"]) == block
    for fragment, n in exp.names.items():
        assert one(db, f"SELECT count(*) FROM kernels WHERE trace_id = {t} AND contains(name, '{fragment}')") == n

    assert one(db, f"SELECT count(*) FROM memops WHERE trace_id = {t}") == exp.memops
    assert one(db, f"SELECT count(*) FROM launches WHERE trace_id = {t}") == exp.launches
    ranges = db.rows(f"SELECT kind, side, count(*) AS n FROM ranges WHERE trace_id = {t} GROUP BY ALL")
    assert {(r["kind"], r["side"]): r["n"] for r in ranges} == exp.ranges

    devices = db.rows(f"SELECT * FROM devices WHERE trace_id = {t} ORDER BY device_id")
    assert len(devices) == exp.devices
    assert {(d["name"], d["num_sms"]) for d in devices} == {(exp.device_name, exp.num_sms)}
    assert [d["device_id"] for d in devices] == list(range(exp.devices))

    assert sha256(path) == got.sha_before  # reading never modifies the input


# ------------------------------------------------------------------ details of particular traces
def test_sweep_first_batch_decode_kernel(h200: Path) -> None:
    db = loaded(h200 / SWEEP).db
    k = db.rows(
        "SELECT * FROM kernels WHERE contains(name, 'BatchDecodeWithPagedKVCacheKernel') ORDER BY kernel_id LIMIT 1"
    )[0]
    assert k["name"].startswith("void flashinfer::BatchDecodeWithPagedKVCacheKernel<(flashinfer::PosEncodingMode)0,")
    assert (k["grid_x"], k["grid_y"], k["grid_z"], k["block_x"], k["block_y"], k["block_z"]) == (296, 4, 1, 16, 8, 1)
    assert (k["registers_per_thread"], k["smem_bytes"]) == (56, 9216)
    assert (k["static_smem_bytes"], k["dynamic_smem_bytes"], k["mangled_name"]) == (None, None, None)
    assert k["dur_ns"] == 336_927  # "dur": 336.927
    assert (k["device_id"], k["stream_id"], k["correlation_id"]) == (0, 7, 190)
    # its launch: the cuda_runtime event with the same correlation id, on the Python thread
    launch = db.rows("SELECT * FROM launches WHERE correlation_id = 190")[0]
    assert (launch["name"], launch["process_id"], launch["thread_id"]) == ("cudaLaunchKernelExC", 1713, 1713)
    assert launch["start_ns"] == 5_095_372_248_727_976


def test_sweep_device_properties_and_ranges(h200: Path) -> None:
    db = loaded(h200 / SWEEP).db
    d = db.rows("SELECT * FROM devices")[0]
    assert (d["compute_major"], d["compute_minor"], d["regs_per_sm"], d["regs_per_block"]) == (9, 0, 65536, 65536)
    assert (d["smem_per_sm_bytes"], d["smem_per_block_optin_bytes"]) == (233472, 232448)
    assert (d["max_threads_per_sm"], d["max_threads_per_block"], d["warp_size"]) == (2048, 1024, 32)
    assert d["total_mem_bytes"] == 150_109_880_320
    cpu = db.rows("SELECT * FROM ranges WHERE side = 'cpu' ORDER BY range_id LIMIT 1")[0]
    assert cpu["name"] == "decode tc=0 dist=uniform bs=8 step=0"
    assert (cpu["start_ns"], cpu["dur_ns"]) == (5_095_372_249_347_521, 348_462)
    assert (cpu["process_id"], cpu["thread_id"], cpu["device_id"]) == (1713, 1713, None)
    gpu = db.rows("SELECT * FROM ranges WHERE side = 'gpu' ORDER BY range_id LIMIT 1")[0]
    assert (gpu["name"], gpu["device_id"], gpu["stream_id"], gpu["process_id"]) == (cpu["name"], 0, 7, None)


def test_2021_format(foreign: Path) -> None:
    db = loaded(foreign / TBPLUGIN_2021).db
    # GPU tid is the string "stream 7"; args say stream 7, device 0
    assert db.rows("SELECT DISTINCT device_id, stream_id FROM kernels") == [{"device_id": 0, "stream_id": 7}]
    # CPU tids are digit strings ("25738", "25772"): kept as thread ids
    threads = db.rows("SELECT thread_id, count(*) AS n FROM launches GROUP BY ALL ORDER BY thread_id")
    assert {r["thread_id"] for r in threads} <= {25738, 25772}
    steps = db.rows("SELECT name, start_ns, dur_ns, thread_id FROM ranges ORDER BY range_id LIMIT 2")
    assert steps == [
        {"name": "ProfilerStep#5", "start_ns": 1623142623460172000, "dur_ns": 176078000, "thread_id": 25738},
        {"name": "ProfilerStep#6", "start_ns": 1623142623636318000, "dur_ns": 173992000, "thread_id": 25738},
    ]
    memops = db.rows("SELECT kind, count(*) AS n, sum(bytes) AS b FROM memops GROUP BY ALL ORDER BY kind")
    assert [(r["kind"], r["n"]) for r in memops] == [("memcpy", 12), ("memset", 312)]
    assert sum(r["b"] for r in memops) == 482_082_960


def test_flash_attention_kernel_in_tracelens_trace(foreign: Path) -> None:
    db = loaded(foreign / TRACELENS).db
    k = db.rows("SELECT * FROM kernels WHERE contains(name, 'pytorch_flash::flash_fwd_kernel') ORDER BY kernel_id")[0]
    assert (k["grid_x"], k["grid_y"], k["grid_z"], k["block_x"]) == (5, 16, 16, 128)
    assert (k["registers_per_thread"], k["smem_bytes"], k["dur_ns"]) == (255, 49152, 114_047)
    assert k["start_ns"] == 1_428_625_732_686_213  # relative to baseTimeNanoseconds, as the file states it
    steps = db.rows("SELECT name, kind, side, device_id, stream_id, dur_ns FROM ranges ORDER BY side")
    assert steps == [
        {"name": "ProfilerStep#6", "kind": "profiler_step", "side": "cpu", "device_id": None, "stream_id": None,
         "dur_ns": 47_151_395},
        {"name": "ProfilerStep#6", "kind": "gpu_annotation", "side": "gpu", "device_id": 0, "stream_id": 7,
         "dur_ns": 34_892_421},
    ]


# ------------------------------------------------------------------ damaged and unusual input
@pytest.fixture(scope="module")
def small_json(h200: Path) -> bytes:
    """The small real trace, decompressed."""
    return gzip.decompress((h200 / SMALL).read_bytes())


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_json_that_is_not_a_trace(tmp_path: Path) -> None:
    p = write(tmp_path / "a.json", b'{"a": 1}')
    with pytest.raises(FormatError) as exc:
        load([p])
    assert_one_line_error(exc, p, "traceEvents")


def test_traceevents_not_a_list(tmp_path: Path) -> None:
    p = write(tmp_path / "t.json", b'{"traceEvents": {"ph": "X"}}')
    with pytest.raises(FormatError) as exc:
        load([p])
    assert_one_line_error(exc, p, "traceEvents is not a list")


def test_truncated_gzip(h200: Path, tmp_path: Path) -> None:
    """A gzip cut short inside traceEvents: the complete events before the cut are kept, with warnings. Checked
    with zlib.decompressobj(wbits=31).decompress(cut bytes) (24,285,111 bytes) and the json module on the text up
    to the last `\n  },`: 97,159 entries, 484 kernels. Cut before traceEvents: the one-line error."""
    data = (h200 / SWEEP).read_bytes()
    p = write(tmp_path / "cut.pt.trace.json.gz", data[: len(data) * 9 // 10])
    db, _ = load([p])
    assert one(db, "SELECT count(*) FROM kernels") == 484
    warnings = one(db, "SELECT warnings FROM traces")
    assert f"{p}: the data ends at byte 24285111 inside traceEvents (file cut short?): kept the 97159 events " \
        "before the cut" in warnings, warnings
    assert any("the gzip stream ends before its end-of-stream marker" in w for w in warnings), warnings
    p = write(tmp_path / "early.pt.trace.json.gz", data[:1000])
    with pytest.raises(FormatError) as exc:
        load_json(p)
    assert_one_line_error(exc, p, "damaged gzip stream", "truncated")


def test_corrupt_gzip(h200: Path, tmp_path: Path) -> None:
    data = bytearray((h200 / SMALL).read_bytes())
    mid = len(data) // 2
    data[mid : mid + 64] = bytes(64)
    p = write(tmp_path / "bad.json.gz", bytes(data))
    with pytest.raises(FormatError) as exc:
        load([p])
    assert_one_line_error(exc, p, "damaged gzip stream")


def test_multi_member_gzip_and_bom(small_json: bytes, tmp_path: Path) -> None:
    half = len(small_json) // 2
    p = write(tmp_path / "two.json.gz", gzip.compress(small_json[:half]) + gzip.compress(small_json[half:]))
    db, _ = load([p])
    assert one(db, "SELECT count(*) FROM kernels") == 48
    p = write(tmp_path / "bom.json", b"\xef\xbb\xbf" + small_json)
    db, _ = load([p])
    assert one(db, "SELECT count(*) FROM kernels") == 48


def test_truncated_json(small_json: bytes, tmp_path: Path) -> None:
    """Cut in the middle of traceEvents: the events before the cut are kept (json module on the text up to the
    last `\n  },` of the first 542,026 bytes: 1420 entries, 12 user_annotation, no kernel yet: Kineto writes
    the CPU events first). Cut before any complete event: the one-line error."""
    p = write(tmp_path / "cut.json", small_json[: len(small_json) // 2])
    db, _ = load([p])
    assert one(db, "SELECT count(*) FROM kernels") == 0
    assert one(db, "SELECT count(*) FROM ranges WHERE kind = 'annotation'") == 12
    warnings = one(db, "SELECT warnings FROM traces")
    assert warnings[0] == f"{p}: the data ends at byte 542026 inside traceEvents (file cut short?): kept the 1420 " \
        "events before the cut", warnings
    start = small_json.index(b"[", small_json.index(b'"traceEvents"')) + 1
    p = write(tmp_path / "early.json", small_json[: start + 40])
    with pytest.raises(FormatError) as exc:
        load([p])
    assert_one_line_error(exc, p, "not valid JSON at byte", "truncated")


def test_invalid_json(tmp_path: Path) -> None:
    p = write(tmp_path / "x.json", b'{"traceEvents": [}')
    with pytest.raises(FormatError) as exc:
        load_json(p)
    assert_one_line_error(exc, p, "not valid JSON at byte 17")


def test_not_utf8(small_json: bytes, tmp_path: Path) -> None:
    at = small_json.index(b"BatchDecodeWithPagedKVCacheKernel")
    p = write(tmp_path / "latin1.json", small_json[:at] + b"\xe9" + small_json[at + 1 :])
    with pytest.raises(FormatError) as exc:
        load([p])
    assert_one_line_error(exc, p, f"not valid UTF-8 at byte {at}")


def test_repairs_of_real_kineto_defects(small_json: bytes, tmp_path: Path) -> None:
    """Defects real Kineto versions wrote: a bare `inf` bandwidth for a 0 us copy (pytorch/kineto#105),
    unescaped backslashes (Windows paths, pytorch/kineto#336); an escaped lone surrogate as Python's json.dump
    writes one; and data after the document."""
    text = small_json.decode()
    key = '"memory bandwidth (GB/s)": '
    at = text.index(key) + len(key)
    end = text.index("\n", at)
    text = text[:at] + "inf" + text[end:]
    text = text.replace('"traceName": "/root/out/trace_raw.json"', '"traceName": "C:\\Users\\me\\trace.json"')
    text = text.replace('"name": "decode_step tc=0', '"name": "\\ud800decode_step tc=0', 1)  # Python's json.dump
    p = write(tmp_path / "repaired.json", text.encode() + b"\n}garbage")
    db, _ = load([p])
    assert (one(db, "SELECT count(*) FROM kernels"), one(db, "SELECT count(*) FROM memops")) == (48, 43)
    assert one(db, "SELECT count(*) FROM ranges WHERE starts_with(name, '\ufffddecode_step tc=0')") == 1
    warnings = one(db, "SELECT warnings FROM traces")
    assert warnings == [
        "repaired JSON: 1 bare non-finite or N/A numbers (inf, nan, ...) read as null",
        "repaired JSON: 1 escaped lone UTF-16 surrogates read as U+FFFD",
        "repaired JSON: 2 backslashes that start no JSON escape read literally",
        "repaired JSON: 8 characters after the end of the JSON document ignored",
    ]


def test_empty_trace_events(tmp_path: Path) -> None:
    p = write(tmp_path / "empty.json", b'{"schemaVersion": 1, "traceEvents": []}')
    db, _ = load([p])
    assert one(db, "SELECT count(*) FROM kernels") == 0
    trace = db.rows("SELECT * FROM traces")[0]
    assert (trace["format"], trace["format_version"], trace["start_ns"]) == ("kineto", "1", None)
    assert len(trace["warnings"]) == 1 and "no GPU kernels" in trace["warnings"][0]


@pytest.fixture(scope="module")
def events(small_json: bytes) -> dict[str, dict[str, Any]]:
    """One real event per category of interest, from the small trace."""
    out: dict[str, dict[str, Any]] = {}
    for e in json.loads(small_json)["traceEvents"]:
        if "BatchDecode" in e.get("name", "") and e.get("cat") == "kernel":
            out.setdefault("kernel", e)
        elif e.get("cat") in ("gpu_memcpy", "user_annotation", "cuda_runtime"):
            out.setdefault(e["cat"], e)
    return out


def test_bad_events_are_skipped_with_warnings(events: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    """Real events with fields removed or of the wrong type: skipped and counted, or kept with NULLs."""
    ev = events
    k = ev["kernel"]
    bad: list[Any] = [
        {**k, "ts": "5094641795369"},  # ts as a string
        {key: v for key, v in k.items() if key != "dur"},  # no dur
        {**k, "dur": -1.5},  # negative duration
        {**k, "name": 7},  # name not a string
        {**ev["gpu_memcpy"], "dur": -3},
        [1, 2],  # not an object
        {**k, "cat": ["kernel"]},  # unhashable category: ignored like any unknown category
    ]
    odd = [
        {**k, "args": "none"},  # args not an object: kernel kept, its fields NULL
        {**k, "args": {**k["args"], "grid": [1, 2], "block": "x", "registers per thread": 2**40}},
    ]
    doc = {"schemaVersion": 1, "traceEvents": [k, ev["user_annotation"], *bad, *odd], "deviceProperties": [{}, 3]}
    p = write(tmp_path / "bad_events.json", json.dumps(doc).encode())
    db, _ = load([p])
    kernels = db.rows("SELECT grid_x, block_x, registers_per_thread, device_id FROM kernels ORDER BY grid_x")
    assert kernels == [
        {"grid_x": 256, "block_x": 16, "registers_per_thread": 56, "device_id": 0},  # the real event, unchanged
        {"grid_x": None, "block_x": None, "registers_per_thread": None, "device_id": 0},  # device from pid
        {"grid_x": None, "block_x": None, "registers_per_thread": None, "device_id": 0},
    ]
    assert one(db, "SELECT count(*) FROM ranges") == 1
    warnings = sorted(one(db, "SELECT warnings FROM traces"))
    assert warnings == sorted([
        "2 deviceProperties entries skipped: not an object with a new integer id",
        "1 'gpu_memcpy' events skipped: negative duration",
        "2 'kernel' events skipped: missing or non-numeric ts/dur",
        "1 'kernel' events skipped: missing or non-string name",
        "1 'kernel' events skipped: negative duration",
        "1 traceEvents entries skipped: not a JSON object",
    ])


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)
KERNEL_FIELDS = ["ts", "dur", "name", "pid", "tid", "args", "cat", "ph"]
ARG_FIELDS = ["grid", "block", "device", "stream", "correlation", "registers per thread", "shared memory", "bytes"]


@pytest.fixture(scope="module")
def fuzz_db() -> TraceDB:
    return TraceDB()


@settings(max_examples=100, deadline=None)
@given(
    field=st.sampled_from(KERNEL_FIELDS + ARG_FIELDS),
    value=JSON_VALUES,
    which=st.sampled_from(["kernel", "gpu_memcpy", "user_annotation", "cuda_runtime"]),
)
def test_any_field_value_never_crashes(
    events: dict[str, dict[str, Any]], fuzz_db: TraceDB, field: str, value: Any, which: str
) -> None:
    """Whatever type or value a field of a real event has, the reader skips or keeps the event; it never raises,
    and every kept value fits its column."""
    e = dict(events[which])
    if field in ARG_FIELDS:
        e["args"] = {**e["args"], field: value}
    else:
        e[field] = value
    ingest = from_document({"traceEvents": [e, events["kernel"]]}, Path("fuzz.json"))
    t = fuzz_db.add(ingest, Path("fuzz.json"))
    assert one(fuzz_db, f"SELECT count(*) FROM kernels WHERE trace_id = {t}") >= 1
