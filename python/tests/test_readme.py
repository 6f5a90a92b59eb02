"""python/README.md's first program runs as printed and learns its task."""

import os
import re
import subprocess
import pathlib
import sys

import ember
from conftest import ROOT


def test_readme_program(tmp_path):
    text = (ROOT / "python" / "README.md").read_text()
    program = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(ember.__file__).resolve().parents[1]))  # this ember
    out = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True, env=env,
                         check=True).stdout
    loss = float(re.search(r"loss (\d+\.\d+)", out).group(1))
    assert loss < 0.2, out
    assert (tmp_path / "mlp.safetensors").stat().st_size > 0
