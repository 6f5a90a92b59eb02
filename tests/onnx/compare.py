"""Runs ember's ONNX importer on reference cases (tests/onnx/make_onnx.py) and compares its outputs
with onnxruntime's.

    .venv/bin/python tests/onnx/compare.py --ember build/ember tests/data/onnx/*/
    .venv/bin/python tests/onnx/compare.py --ember build/ember --ember-args "--device cuda" data/onnx/resnet18

For each case folder (model.onnx, case.json, the input and expected .npy files) it runs

    EMBER onnx run CASE/model.onnx --input NAME=CASE/FILE.npy ... --output-dir TMP [EMBER_ARGS]

which writes each output as TMP/<output name>.npy, the name with every character outside
[A-Za-z0-9_.-] replaced by '_'. An output passes when its shape and dtype match the expected
array's and every element has |actual - expected| <= atol + rtol * |expected| (case.json's
tolerances unless --atol / --rtol are given; integer and bool outputs must be equal; NaN matches
NaN, an infinity the same infinity). Prints one line per output and exits 1 on any failure.
"""

import argparse
import json
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def sanitize(name):
    """The file stem ember gives an output: characters outside [A-Za-z0-9_.-] become '_'."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def compare(actual, expected, atol, rtol):
    """(passed, message) for one output."""
    if actual.shape != expected.shape:
        return False, f"shape {list(actual.shape)}, expected {list(expected.shape)}"
    if actual.dtype != expected.dtype:
        return False, f"dtype {actual.dtype}, expected {expected.dtype}"
    if expected.size == 0:
        return True, "empty"
    if expected.dtype.kind not in "fc":  # integers and bools: exact
        wrong = actual != expected
        count = int(np.count_nonzero(wrong))
        if count == 0:
            return True, "exact"
        first = tuple(int(i) for i in np.argwhere(wrong)[0])
        return False, (f"{count} of {expected.size} elements differ, first at {list(first)}: "
                       f"{actual[first]} vs {expected[first]}")
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        return compare_floats(actual, expected, atol, rtol)


def compare_floats(actual, expected, atol, rtol):
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    a_nan, e_nan = np.isnan(a), np.isnan(e)
    both_inf = np.isinf(a) & np.isinf(e) & (a == e)
    finite = np.isfinite(a) & np.isfinite(e)
    diff = np.where(finite, np.abs(a - e), 0.0)
    ok = np.where(finite, diff <= atol + rtol * np.abs(e), both_inf | (a_nan & e_nan))
    nonzero = finite & (e != 0)
    max_abs = float(diff.max())
    max_rel = float((diff[nonzero] / np.abs(e[nonzero])).max()) if nonzero.any() else 0.0
    # The worst element relative to its tolerance (<= 1 passes).
    ratio = np.where(finite, diff / (atol + rtol * np.abs(e)), np.where(ok, 0.0, np.inf))
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    message = (f"max abs {max_abs:.3e}  max rel {max_rel:.3e}  worst {float(ratio[worst]):.3f} of tolerance "
               f"at {[int(i) for i in worst]} ({actual[worst]} vs {expected[worst]})")
    bad = int(np.count_nonzero(~ok))
    if bad:
        message += f"; {bad} of {expected.size} elements out of tolerance"
    return bad == 0, message


def run_case(case_dir, args):
    """Runs one case; returns the number of failed outputs (all of them if ember fails)."""
    case_dir = Path(case_dir)
    spec = json.loads((case_dir / "case.json").read_text())
    atol = args.atol if args.atol is not None else float(spec.get("atol", 1e-4))
    rtol = args.rtol if args.rtol is not None else float(spec.get("rtol", 1e-4))
    outputs = spec["outputs"]
    with tempfile.TemporaryDirectory(prefix="ember_onnx_") as tmp:
        out_dir = Path(args.keep) / case_dir.name if args.keep else Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        command = [args.ember, "onnx", "run", str(case_dir / "model.onnx")]
        for name, file in spec["inputs"].items():
            command += ["--input", f"{name}={case_dir / file}"]
        command += ["--output-dir", str(out_dir)] + shlex.split(args.ember_args)
        if args.verbose:
            print("$ " + shlex.join(command), flush=True)
        start = time.perf_counter()
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print(f"FAIL {case_dir.name}: ember did not finish in {args.timeout} s")
            return len(outputs)
        except OSError as e:
            print(f"FAIL {case_dir.name}: cannot run {args.ember}: {e}")
            return len(outputs)
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            print(f"FAIL {case_dir.name}: ember exited with {proc.returncode}")
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-20:]
            for line in tail:
                print(f"    {line}")
            return len(outputs)
        if args.verbose and (proc.stdout or proc.stderr):
            print((proc.stdout + proc.stderr).rstrip())
        failures = 0
        for name, file in outputs.items():
            expected = np.load(case_dir / file)
            produced = out_dir / (sanitize(name) + ".npy")
            label = f"{case_dir.name}/{name}"
            if not produced.exists():
                print(f"FAIL {label}: ember wrote no {produced.name}")
                failures += 1
                continue
            try:
                actual = np.load(produced)
            except (ValueError, OSError) as e:
                print(f"FAIL {label}: cannot read {produced.name}: {e}")
                failures += 1
                continue
            passed, message = compare(actual, expected, atol, rtol)
            failures += 0 if passed else 1
            print(f"{'ok  ' if passed else 'FAIL'} {label} {list(expected.shape)} {expected.dtype}: {message}")
        print(f"     {case_dir.name}: {len(outputs) - failures}/{len(outputs)} outputs within atol {atol:g} "
              f"rtol {rtol:g} ({seconds:.2f} s)", flush=True)
        return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="+", metavar="CASE_DIR", help="case folders (model.onnx + case.json)")
    parser.add_argument("--ember", default="build/ember", help="the ember binary (default build/ember)")
    parser.add_argument("--ember-args", default="", help="more arguments for `ember onnx run` (one string)")
    parser.add_argument("--atol", type=float, default=None, help="override every case's atol")
    parser.add_argument("--rtol", type=float, default=None, help="override every case's rtol")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per case (default 600)")
    parser.add_argument("--keep", default=None, metavar="DIR", help="write ember's outputs to DIR/<case>/")
    parser.add_argument("-v", "--verbose", action="store_true", help="print the commands and ember's output")
    args = parser.parse_args()

    failed_cases = []
    for case_dir in args.cases:
        if not (Path(case_dir) / "case.json").exists():
            print(f"FAIL {case_dir}: no case.json")
            failed_cases.append(case_dir)
            continue
        if run_case(case_dir, args):
            failed_cases.append(Path(case_dir).name)
    print(f"{len(args.cases) - len(failed_cases)}/{len(args.cases)} cases passed"
          + (f"; failed: {', '.join(failed_cases)}" if failed_cases else ""))
    return 1 if failed_cases else 0


if __name__ == "__main__":
    sys.exit(main())
