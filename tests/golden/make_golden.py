"""Writes the reference data under tests/golden/ by running PyTorch on the same inputs ember's tests
use. Run from the repository root with the dev virtualenv (scripts/setup --dev):

    .venv/bin/python tests/golden/make_golden.py            # every area
    .venv/bin/python tests/golden/make_golden.py reduce     # one area

The tests read the committed files and never need PyTorch.
"""
import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

AREAS = ["core", "elementwise", "reduce", "linalg", "shape"]


def main():
    areas = sys.argv[1:] or AREAS
    for area in areas:
        module = importlib.import_module(f"cases_{area}")
        module.build().write(area)


if __name__ == "__main__":
    main()
