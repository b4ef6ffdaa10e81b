"""The batch-size sweep as the reports draw it: the panels the analysis computed (`model.sweep`, the document's
`sweep`), which of them a figure draws, and where split-KV was seen to switch off. Nothing here derives a panel
from the steps."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (imported when a sweep is drawn: the model package loads numpy, which a text report from
    from traceinsight.model.sweep import SweepPanel  # kept tables does without, tests/test_analysis_cache.py)


def sweep(doc: dict[str, Any]) -> list[SweepPanel]:
    """The sweep's panels of the document (empty when the trace is not a sweep, or the document predates them)."""
    if not doc.get("sweep"):
        return []
    from traceinsight.model.sweep import SweepPanel

    return [SweepPanel.from_json(p) for p in doc["sweep"]]


# Sweeps drawn side by side at most (a trace of call variants has dozens; the notes list them all).
MAX_SWEEP_PANELS = 4


def plotted_panels(panels: list[SweepPanel]) -> list[SweepPanel]:
    """The sweeps a figure draws: at most MAX_SWEEP_PANELS, those with the most batch sizes and distributions
    (in their own order)."""
    if len(panels) <= MAX_SWEEP_PANELS:
        return panels
    keep = set(sorted(range(len(panels)), key=lambda i: (-len(panels[i].batch_sizes), -len(panels[i].series),
                                                         i))[:MAX_SWEEP_PANELS])
    return [p for i, p in enumerate(panels) if i in keep]


def observed_switch(panel: SweepPanel) -> tuple[int | None, int | None]:
    """From a sweep panel: (largest batch size below the switch with split-KV on in some case, smallest batch size
    from which every case of every distribution ran split-KV off). (None, None) when the panel never switches
    (e.g. a backend that never splits). A uniform batch may run unsplit below the threshold (each request fits
    one chunk), so the switch is where the state stays off, not the first case that is off."""
    cases = sorted((b, o) for s in panel.series for b, o in zip(s.batch, s.split_off, strict=True))
    if not cases or all(o for _, o in cases) or not any(o for _, o in cases):
        return None, None
    last_on = max(b for b, o in cases if not o)
    after = [b for b, o in cases if b > last_on]
    return (last_on, min(after)) if after else (None, None)


def observed_switches(doc: dict[str, Any]) -> dict[tuple[str | None, str | None], str]:
    """Per (kernel, backend) of a sweep, where split-KV was seen to switch off, in words for the thresholds
    table ("on ≤ 256, off ≥ 297")."""
    observed: dict[tuple[str | None, str | None], str] = {}
    for p in sweep(doc):
        last_on, first_off = observed_switch(p)
        if first_off:
            observed[(p.kernel, p.backend)] = f"on ≤ {last_on}, off ≥ {first_off}" if last_on else f"off ≥ {first_off}"
    return observed
