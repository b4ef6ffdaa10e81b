"""The `kernel_labels` table: one row per distinct kernel name in the database, labelled by the labels stage."""

from __future__ import annotations

from traceinsight import labels
from traceinsight.ingest.store import TraceDB, arrow_table

_DDL = """
CREATE TABLE IF NOT EXISTS kernel_labels (
    name            VARCHAR NOT NULL,   -- kernels.name
    family          VARCHAR NOT NULL,   -- attention | merge | prepare | gemm | norm | communication | memory | ...
    backend         VARCHAR,            -- flashinfer-cuda-core | flashinfer-fa2 | flashinfer-sm90 | fa3 | ...
    kernel          VARCHAR NOT NULL,   -- short display name
    phase           VARCHAR NOT NULL,   -- decode | prefill | unknown (from the name alone)
    phase_evidence  VARCHAR,            -- why
    rule            VARCHAR NOT NULL,   -- id of the rule that matched
    params_json     VARCHAR             -- template parameters read from the name, as JSON
)
"""


def ensure_labels(db: TraceDB) -> None:
    """Label every kernel name not labelled yet (idempotent; cheap when nothing is new)."""
    db.con.execute(_DDL)
    new = [
        r[0]
        for r in db.con.execute(
            "SELECT DISTINCT name FROM kernels WHERE name NOT IN (SELECT name FROM kernel_labels)"
        ).fetchall()
    ]
    if not new:
        return
    rows = arrow_table(db.con, labels.label_rows(new))  # noqa: F841  (scanned by name below)
    db.con.execute("INSERT INTO kernel_labels BY NAME SELECT * FROM rows")
