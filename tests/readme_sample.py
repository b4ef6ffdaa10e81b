"""The README's sample output is the real output: the header and findings of `traceinsight analyze` on the bundled
demo trace, at README_WIDTH columns, between the README's `<!-- analyze-sample -->` markers.

tests/test_postmortem.py holds the README to it; after a change meant to alter the output, regenerate:

    .venv/bin/python tests/readme_sample.py            # rewrites the block in README.md
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
README_WIDTH = 120
COMMAND = ("traceinsight analyze examples/h200/flashinfer_decode_sweep.pt.trace.json.gz "
           "--meta examples/h200/flashinfer_decode_sweep.meta.json.gz")
START, END = "<!-- analyze-sample -->", "<!-- /analyze-sample -->"


def sample() -> str:
    """The command's output up to the first table after the findings (header and findings), as the README shows
    it: the command line, then the output."""
    env = {**os.environ, "COLUMNS": str(README_WIDTH), "NO_COLOR": "1", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "traceinsight", *COMMAND.split()[1:]], cwd=REPO, env=env,
                         capture_output=True, text=True, check=True).stdout
    head = out.split("\nSplit-KV thresholds")[0].rstrip("\n").replace(f"{REPO}/", "")
    return f"$ {COMMAND}\n{head}\n"


def block(text: str) -> str:
    return f"{START}\n```\n{text}```\n{END}"


def current() -> str:
    """The block as the README holds it now."""
    text = README.read_text(encoding="utf-8")
    return text[text.index(START):text.index(END) + len(END)]


def write() -> None:
    text = README.read_text(encoding="utf-8")
    README.write_text(text.replace(current(), block(sample())), encoding="utf-8")


if __name__ == "__main__":
    write()
