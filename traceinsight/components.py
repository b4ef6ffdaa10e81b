"""The names of a step's time components besides kernel families (the step breakdown's, and every report's that
reads it), in one place. A leaf module: any stage may import it, and a report rendered from kept tables
(`report/saved.py`) reads them without importing the model."""

from __future__ import annotations

PREFILL = "prefill"
IDLE_HOST = "idle-host"
IDLE_WAIT = "idle-wait"
IDLE_UNKNOWN = "idle-unknown"
IDLE = (IDLE_HOST, IDLE_WAIT, IDLE_UNKNOWN)
