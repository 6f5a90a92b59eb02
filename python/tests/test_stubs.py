"""The committed type stubs (python/ember/_ember/*.pyi, made by nanobind's stubgen) match the
extension as built: regenerate them after changing a binding with

    PYTHONPATH=build/python .venv/bin/python -m nanobind.stubgen -q -m ember._ember -r -P -O python/ember
"""

import pathlib
import subprocess
import sys

import pytest

from conftest import ROOT


def test_stubs_are_current(tmp_path):
    pytest.importorskip("nanobind.stubgen")
    subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "ember._ember", "-r", "-P", "-O",
                    str(tmp_path)], check=True)
    committed = ROOT / "python" / "ember" / "_ember"
    fresh = sorted(p.relative_to(tmp_path / "_ember") for p in (tmp_path / "_ember").rglob("*.pyi"))
    assert fresh == sorted(p.relative_to(committed) for p in committed.rglob("*.pyi"))
    stale = [str(p) for p in fresh if (committed / p).read_text() != (tmp_path / "_ember" / p).read_text()]
    assert not stale, f"stale stubs (regenerate them, see this file's docstring): {stale}"
