"""The wheel as a user gets it: built from the source tree, installed with the [dashboard] extra into a fresh
virtual environment outside the checkout, and run from a folder outside it (so that nothing is imported from the
checkout): `analyze`, `sql`, `report`, `diff`, `collect --help`, `python -m traceinsight`, the collectors as
`python -m traceinsight.collectors`, and the dashboard served and rendered in headless Chromium.

Nothing is downloaded: the wheel is built without build isolation (setuptools pinned in [test]), and the fresh
environment sees the test environment's site-packages through a .pth file (its installed dependencies, not its
editable traceinsight: a folder named in a .pth file has its own .pth files ignored), so that `pip install
--no-index "WHEEL[dashboard]"` resolves every requirement of the wheel and the extra from what is installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_dashboard_browser import DONE_MARK, ERROR_MARKS, SMALL, DevTools, _render, _serve, browser  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
# The source folders and the package each becomes in the wheel (pyproject.toml's package-dir).
SHIPPED = {"traceinsight": "traceinsight", "collectors": "traceinsight.collectors",
           "dashboards": "traceinsight.dashboards"}


class Installed:
    """The fresh environment: its python and `traceinsight` script, and a working folder outside the checkout."""

    def __init__(self, root: Path, wheel: Path) -> None:
        self.root = root
        self.wheel = wheel
        self.python = str(root / "venv" / "bin" / "python")
        self.script = str(root / "venv" / "bin" / "traceinsight")
        self.cwd = root / "run"

    def run(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        r = subprocess.run(list(args), cwd=self.cwd, env=env, capture_output=True, text=True, timeout=120)
        if ok:
            assert r.returncode == 0, f"{' '.join(args)} -> {r.returncode}\n{r.stderr[-2000:]}"
        return r


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    src.mkdir()
    # A copy of what the wheel is built from: setuptools writes build/ and *.egg-info beside the sources.
    for name in [*SHIPPED, "pyproject.toml", "README.md"]:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(root / "dist"), str(src)],
                   check=True, capture_output=True)
    (wheel,) = (root / "dist").glob("*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    target = Installed(root, wheel)
    purelib = subprocess.run([target.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "_test_env_site.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([*pip, "--python", target.python, "install", "-q", "--no-index", f"{wheel}[dashboard]"],
                   check=True, capture_output=True)
    target.cwd.mkdir()
    yield target


def test_wheel_ships_one_top_level_package() -> None:
    """pyproject.toml lists every package of the source folders (a new subpackage left out would be missing from
    the wheel), each mapped to its folder."""
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = set()
    for folder, package in SHIPPED.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder).parts
            found.add(".".join([package, *rel]))
    assert set(cfg["packages"]) == found
    assert cfg["package-dir"] == {package: folder for folder, package in SHIPPED.items()}


def test_installed_wheel_runs_every_command(installed: Installed, h200: Path) -> None:
    names = {n.split("/")[0] for n in zipfile.ZipFile(installed.wheel).namelist()}
    assert names == {"traceinsight", f"{installed.wheel.name.split('-')[0]}-0.1.0.dist-info"}
    # The installed package, not the checkout, and no generic top-level names.
    where = installed.run(installed.python, "-c", "import traceinsight, traceinsight.collectors.cli, "
                          "traceinsight.dashboards.charts as c; print(traceinsight.__file__); print(c.__file__)")
    assert all(line.startswith(str(installed.root / "venv")) for line in where.stdout.split()), where.stdout
    for generic in ("collectors", "dashboards"):
        r = installed.run(installed.python, "-c", f"import {generic}", ok=False)
        assert r.returncode == 1 and "ModuleNotFoundError" in r.stderr

    trace = str(h200 / SMALL)
    doc = json.loads(installed.run(installed.script, "analyze", trace, "--format", "json", "--no-cache").stdout)
    assert doc["trace"]["path"].endswith(SMALL)
    assert "decode-on-prefill-kernel" in {f["id"] for f in doc["findings"]}
    text = installed.run(installed.script, "analyze", trace, "--no-cache", "--save", "saved").stdout
    assert "NVIDIA H200" in text
    assert installed.run(installed.script, "report", "saved").stdout == text
    # The HTML report's templates are package data: the installed wheel renders the page from them.
    installed.run(installed.script, "analyze", trace, "--no-cache", "--format", "html", "--out", "r.html")
    page = (installed.cwd / "r.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and 'data-section="verdict"' in page and "decode-on-prefill" in page
    rows = json.loads(installed.run(installed.script, "sql", trace, "select count(*) as n from kernels",
                                    "--format", "json").stdout)
    assert rows == [{"n": 48}]
    (installed.cwd / "a.json").write_text(json.dumps(doc))
    diff = installed.run(installed.script, "diff", "a.json", "a.json").stdout
    assert "steps 18 -> 18" in diff and "decode-on-prefill-kernel   same" in diff
    assert "KIND" in installed.run(installed.script, "collect", "--help").stdout
    assert "python -m traceinsight.collectors" in installed.run(installed.python, "-m", "traceinsight.collectors",
                                                                "--help").stdout
    assert installed.run(installed.python, "-m", "traceinsight", "--version").stdout.strip() == \
        "traceinsight, version 0.1.0"


@pytest.fixture()
def wheel_dashboard(installed: Installed, h200: Path, tmp_path: Path) -> Iterator[str]:
    yield from _serve([str(h200 / SMALL)], tmp_path, python=installed.python, checkout=False)


def test_installed_wheel_dashboard_renders_in_chromium(wheel_dashboard: str, browser: DevTools) -> None:  # noqa: F811
    text, _, dom = _render(browser, wheel_dashboard, DONE_MARK, "wheel-dashboard")
    assert not any(m in text for m in ERROR_MARKS), text[:2000]
    assert DONE_MARK in text, text[:2000]
    assert "decode-on-prefill-kernel" in text and "NVIDIA H200" in text
    assert dom.count("<canvas") + dom.count("<svg") >= 3
