"""Reference data for the shape area."""
from golden_lib import Recorder


def build():
    return Recorder()
