"""The static checks CI relies on: mypy (strict, configured in pyproject.toml's [tool.mypy]) on the library and the
collectors, and ruff ([tool.ruff]) on the whole repository. Each runs as the command a developer would type, from
the repository root; a failure shows the tool's own report."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, check=False)


def test_mypy_is_clean():
    # The packages come from [tool.mypy]; the cache (.mypy_cache, git-ignored) makes a rerun take about a second.
    done = _run("mypy")
    assert done.returncode == 0, f"python -m mypy found errors:\n{done.stdout}{done.stderr}"


def test_ruff_is_clean():
    done = _run("ruff", "check", ".")
    assert done.returncode == 0, f"python -m ruff check . found errors:\n{done.stdout}{done.stderr}"
