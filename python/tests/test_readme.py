"""The Python programs of README.md and python/README.md run as printed (the latter learns its task)."""

import os
import pathlib
import re
import subprocess
import sys

import ember
from conftest import ROOT


def run_first_program(readme: pathlib.Path, cwd: pathlib.Path) -> str:
    program = re.search(r"```python\n(.*?)```", readme.read_text(), re.S).group(1)
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(ember.__file__).resolve().parents[1]))  # this ember
    return subprocess.run([sys.executable, "-c", program], cwd=cwd, capture_output=True, text=True, env=env,
                          check=True).stdout


def test_python_readme_program(tmp_path):
    out = run_first_program(ROOT / "python" / "README.md", tmp_path)
    loss = float(re.search(r"loss (\d+\.\d+)", out).group(1))
    assert loss < 0.2, out
    assert (tmp_path / "mlp.safetensors").stat().st_size > 0


def test_readme_python_section(tmp_path):
    run_first_program(ROOT / "README.md", tmp_path)
