"""ember.profiler: op-level timing with FLOP and byte counts, as a context manager.

    with ember.profiler.profile() as prof:
        loss = model(x).sum(); loss.backward()
    print(prof.table(row_limit=10))
    prof.export_chrome_trace("trace.json")
"""

import contextlib as _contextlib

from . import _ember

Profiler = _ember.profiler.Profiler


class profile:
    """Records every op (and each Module's forward) inside the block; then table(), summary(),
    op_stats() and export_chrome_trace() read the recording."""

    def __init__(self) -> None:
        self._profiler = Profiler(False)

    def __enter__(self) -> "profile":
        self._profiler.start()
        return self

    def __exit__(self, *exc) -> None:
        self._profiler.stop()

    def table(self, sort_by: str = "total", row_limit: int = 0) -> str:
        return self._profiler.table(sort_by, row_limit)

    def summary(self) -> str:
        return self._profiler.summary()

    def op_stats(self, sort_by: str = "total") -> list:
        return self._profiler.op_stats(sort_by)

    def export_chrome_trace(self, path: str) -> None:
        self._profiler.export_chrome_trace(path)


@_contextlib.contextmanager
def record_function(name: str):
    """A named range in the profile (torch.profiler.record_function)."""
    scope = _ember.profiler._Range(name)
    try:
        yield
    finally:
        del scope


__all__ = ["profile", "record_function", "Profiler"]
