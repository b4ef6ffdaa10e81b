"""examples/notebook.ipynb, executed as a user's Jupyter would run it (nbclient, on the python3 kernel of ipykernel,
in the examples/ folder): every cell runs without an error and shows what the analysis of the bundled sweep trace
holds. The notebook is committed without outputs; the run here writes none back."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbclient import NotebookClient

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NOTEBOOK = EXAMPLES / "notebook.ipynb"
CELL_TIMEOUT_S = 300


def _text(cell: nbformat.NotebookNode) -> str:
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            out.append(o["text"])
        elif "data" in o:
            out.append(o["data"].get("text/plain", ""))
    return "\n".join(out)


def test_notebook_runs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit the notebook without outputs"
    NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                   resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert not [o for c in code for o in c.outputs if o.get("output_type") == "error"]
    shown = [_text(c) for c in code]
    assert "390 steps, 44 findings" in shown[0]
    assert shown[1].split("\n")[1].split()[:3] == ["0", "critical", "split-kv-off"]
    assert "flashinfer-cuda-core    260" in shown[3]  # 260 launches of the CUDA-core decode kernel
    assert shown[5] == "('split-kv-off', 13816404, 341326)"  # step 150's cause, wall time and baseline
    # The report printed in the notebook is laid out as the command's (no notebook display of rich's own).
    report = shown[8]
    assert report.splitlines()[3].startswith("Findings: 7 root causes (44 findings")
    assert all(line == line.rstrip() for line in report.splitlines())
