"""Reference data for the reduce area."""
from golden_lib import Recorder


def build():
    return Recorder()
