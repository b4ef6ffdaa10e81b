"""A Step's times as a row of int64 columns (`model.steps.StepTimes`): the constructor's values read back as Python
ints, a missing range as None; `step_times` gathers what each step's properties read, for the steps the pipeline
builds (in chunks of row_chunks.CHUNK) and for any subset and order of them; and a Step compares and prints field
by field, as the dataclass it replaced."""

from __future__ import annotations

import copy
import pickle
import random

from conftest import TRACES

from traceinsight.model.kernel_columns import Kernel
from traceinsight.model.steps import NO_TIME, ROW_FIELDS, STEP_FIELDS, TIME_FIELDS, Step, step_times
from traceinsight.pipeline import analyze

BIG = 2**45 + 3


def test_the_constructor_s_times_read_back() -> None:
    s = Step(3, "s3", "range:nvtx", 7, BIG, BIG + 10, 2, [], key=7, range_start_ns=BIG - 5, range_end_ns=BIG + 12,
             range_side="cpu")
    bare = Step(4, "s4", "launch", None, 1, 2, 0, [])
    assert (s.start_ns, s.end_ns, s.range_start_ns, s.range_end_ns) == (BIG, BIG + 10, BIG - 5, BIG + 12)
    assert all(type(v) is int for v in (s.start_ns, s.end_ns, s.range_start_ns, s.range_end_ns))
    assert (bare.range_start_ns, bare.range_end_ns, bare.dur_ns, bare.key) == (None, None, 1, 0)
    got = step_times([bare, s])
    assert [got[f].tolist() for f in TIME_FIELDS] == [[1, BIG], [2, BIG + 10], [NO_TIME, BIG - 5], [NO_TIME, BIG + 12]]
    twin = Step(3, "s3", "range:nvtx", 7, BIG, BIG + 10, 2, [], key=7, range_start_ns=BIG - 5, range_end_ns=BIG + 12,
                range_side="cpu")
    assert s == twin and s != bare
    assert repr(s).startswith("Step(index=3, name='s3', source='range:nvtx', range_id=7, start_ns=35184372088835,")
    assert [f for f in STEP_FIELDS if f in repr(s)] == list(STEP_FIELDS)


def test_step_times_of_the_pipeline_s_steps_match_their_properties() -> None:
    db, (a,) = analyze([TRACES / "h200/flashinfer_decode_sweep.pt.trace.json.gz"], cache=False)
    steps = a.steps
    assert len(steps) > 256  # more than one chunk
    subset = random.Random(1).sample(steps, len(steps) // 2)
    for chosen in (steps, subset, []):
        got = step_times(chosen)
        for f in TIME_FIELDS:
            assert got[f].tolist() == [NO_TIME if getattr(s, f) is None else getattr(s, f) for s in chosen]
        rows = step_times(chosen, ROW_FIELDS)  # the key and range id too
        for f in ROW_FIELDS:
            assert rows[f].tolist() == [NO_TIME if getattr(s, f) is None else getattr(s, f) for s in chosen]
    assert any(s.range_start_ns is not None for s in steps)
    # source, evidence and range side are the class's (one per combination): the same as a step built by hand
    s = steps[1]
    twin = Step(s.index, s.name, s.source, s.range_id, s.start_ns, s.end_ns, s.kernel_count, s.launches, s.key,
                s.range_start_ns, s.range_end_ns, s.range_side, s.breakdown, s.evidence, s.engine)
    assert twin == s and type(twin) is type(s) and repr(twin) == repr(s)
    assert len({type(x) for x in steps}) == len({(x.source, x.evidence, x.range_side) for x in steps})
    db.close()


def test_a_step_pickles_and_copies_as_it_did() -> None:
    """A notebook pickles or copies an analysis's steps (joblib, multiprocessing, copy.deepcopy): a step, its
    launches' kernels and its breakdown, each of a class made at run time (`step_class`, `shape_class`), come back
    equal (the step of the same class)."""
    db, (a,) = analyze([TRACES / "h200/flashinfer_decode_sweep.pt.trace.json.gz"], cache=False)
    chosen = [s for s in a.steps if s.breakdown is not None][:3] + [Step(4, "s4", "launch", None, 1, 2, 0, [])]
    for s in chosen:
        for back in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s)):
            assert back == s and type(back) is type(s) and back.breakdown == s.breakdown
            assert [x.attention for x in back.launches] == [x.attention for x in s.launches]
    made = len(Kernel.__subclasses__())
    assert any(back.range_id is not None for back in pickle.loads(pickle.dumps(chosen)))
    assert len(Kernel.__subclasses__()) == made  # no class per unpickled kernel (kernel_columns.kernel)
    assert any(s.launches for s in chosen)
    db.close()
