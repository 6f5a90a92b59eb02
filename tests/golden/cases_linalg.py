"""Reference data for the linalg area."""
from golden_lib import Recorder


def build():
    return Recorder()
