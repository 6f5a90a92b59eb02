"""Shared fixtures: the repository's folders, and the ember CLI the MNIST test compares with."""

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
DATA = pathlib.Path(os.environ.get("EMBER_DATA_DIR", ROOT / "data"))


@pytest.fixture
def data_dir() -> pathlib.Path:
    if not (DATA / "mnist").is_dir():
        pytest.skip(f"no MNIST data under {DATA} (scripts/setup downloads it)")
    return DATA


@pytest.fixture
def cli() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("EMBER_CLI", ROOT / "build" / "ember"))
    if not path.exists():
        pytest.skip(f"no ember CLI at {path} (set EMBER_CLI)")
    return path
