"""Writes the reference data under tests/golden/ by running PyTorch on the same inputs ember's tests
use. Run from the repository root with the dev virtualenv (scripts/setup --dev):

    .venv/bin/python tests/golden/make_golden.py            # every area
    .venv/bin/python tests/golden/make_golden.py reduce     # one area

The tests read the committed files and never need PyTorch.
"""
import glob
import importlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# Every cases_<area>.py is an area; it writes <area>.json.
AREAS = sorted(os.path.basename(p)[len("cases_"):-len(".py")] for p in glob.glob(os.path.join(HERE, "cases_*.py")))


sys.path.insert(0, HERE)


def main():
    areas = sys.argv[1:] or AREAS
    for area in areas:
        module = importlib.import_module(f"cases_{area}")
        module.build().write(area)


if __name__ == "__main__":
    main()
