"""python/README.md's first program runs as printed and learns its task."""

import os
import re
import subprocess
import sys

from conftest import ROOT


def test_readme_program(tmp_path):
    text = (ROOT / "python" / "README.md").read_text()
    program = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    out = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, capture_output=True, text=True,
                         env=dict(os.environ), check=True).stdout
    loss = float(re.search(r"loss (\d+\.\d+)", out).group(1))
    assert loss < 0.2, out
    assert (tmp_path / "mlp.safetensors").stat().st_size > 0
