#!/usr/bin/env python3
"""Kills ember with SIGKILL while it writes files, and checks what each kill leaves on disk.

For each writer (a command of the ember CLI and the file it writes) the trials start the command,
kill it at a random moment and look at the file: it must be absent (only if it was absent before),
or byte-identical (sha256) to the file that was there before the run, or to a file an
uninterrupted run writes (a checkpoint after epoch or step k, the quantized model, the .npy
outputs); files that are not bit-reproducible (the profiler's trace) must be the previous file or
a complete one. Every distinct file seen is loaded once by ember (or parsed), and the only other
files allowed beside it are the temporary files of killed writes, named `.<name>.tmp.<pid>.<n>`
(base/atomic_file.h), which the next write of the same path removes: each writer ends with an
uninterrupted run that must leave the reference file and no temporary file.

Half of the kills are aimed at a save: after the line a command prints just before it saves
(`epoch k/N`, `step k/N`; for commands that print none, from the start), either as soon as a new
temporary file appears (the folder polled) plus a random part of the time a write takes, or at a
time drawn around the window in which an uninterrupted, watched run wrote. The others fall
uniformly over the whole run. The timings follow the machine's load (the runs that finish before
their kill adjust them). A kill that leaves a temporary file landed inside a write (after the
temporary file was created, before the rename); those are counted. Nothing is slowed down
artificially: ember runs as it always does.

    kill_trials.py EMBER REPO_ROOT WORK_DIR [--trials N] [--writers a,b] [--seed S]
"""
import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time

TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.tmp\.\d+\.\d+$")


def sha256(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except FileNotFoundError:
        return None


def temp_files(folder, name):
    return sorted(n for n in os.listdir(folder) if (m := TEMP_NAME.match(n)) and m.group("name") == name)


class Process:
    """A command whose stdout lines are read as they come, each with the time it arrived."""

    def __init__(self, argv, env):
        self.start = time.monotonic()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.lines = []
        self.stderr = b""
        self.changed = threading.Condition()
        self.readers = [threading.Thread(target=self._read_stdout, daemon=True),
                        threading.Thread(target=self._read_stderr, daemon=True)]
        for reader in self.readers:
            reader.start()

    def _read_stdout(self):
        for raw in self.proc.stdout:
            with self.changed:
                self.lines.append((time.monotonic() - self.start, raw.decode(errors="replace")))
                self.changed.notify_all()
        with self.changed:
            self.lines.append((time.monotonic() - self.start, None))  # end of output
            self.changed.notify_all()

    def _read_stderr(self):
        self.stderr = self.proc.stderr.read()

    def wait_for_line(self, pattern, timeout):
        """Waits until a line matches; False when the output ends first."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self.changed:
            while True:
                for _, line in self.lines[seen:]:
                    if line is None:
                        return False
                    if pattern.search(line):
                        return True
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(left)

    def kill_after(self, seconds):
        """SIGKILL `seconds` after now (at once if <= 0); nothing if the process has ended."""
        if seconds > 0:
            time.sleep(seconds)  # (Popen.wait's timeout polls every few tens of ms: too coarse)
        self.proc.send_signal(signal.SIGKILL)  # a no-op once the process has exited

    def finish(self, timeout=600):
        code = self.proc.wait(timeout=timeout)
        for reader in self.readers:
            reader.join()
        return code

    def text(self):
        return "".join(line for _, line in self.lines if line is not None)


class Watch:
    """Polls a folder while a command runs: when a temporary file of `name` first appears and when
    the file at `name` is replaced (its inode changes). Used once per writer, to aim kills."""

    def __init__(self, folder, name):
        self.folder, self.name = folder, name
        self.events = []  # (time, "temp" | "renamed")
        self.stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self, origin):
        self.origin = origin
        self.thread.start()

    def _run(self):
        path = os.path.join(self.folder, self.name)
        def inode():
            try:
                return os.stat(path).st_ino
            except FileNotFoundError:
                return None
        last, in_write = inode(), False
        while not self.stop:
            now = time.monotonic() - self.origin
            writing = bool(temp_files(self.folder, self.name))
            if writing and not in_write:
                self.events.append((now, "temp"))
            in_write = writing
            current = inode()
            if current != last:
                self.events.append((now, "renamed"))
                last = current
            time.sleep(0.0002)

    def windows(self):
        """(start, end) of each write seen: a temporary file appearing, then the rename."""
        result, start = [], None
        for t, kind in self.events:
            if kind == "temp":
                start = t
            elif start is not None:
                result.append((start, t))
                start = None
        return result

    def close(self):
        self.stop = True
        self.thread.join()


class Failure(Exception):
    pass


class Writer:
    """One command that writes one file. Subclasses give the runs, the references and the check."""

    name = ""
    reproducible = True  # the complete file is bit-identical from run to run

    def __init__(self, ember, root, work, env, rng):
        self.ember, self.root, self.env, self.rng = ember, root, env, rng
        self.work = os.path.join(work, self.name)
        os.makedirs(self.work, exist_ok=True)
        self.refs = {}  # sha256 -> label ("epoch 2", "q8_0", ...)
        self.loaded = set()  # sha256 of the files ember has loaded
        self.trigger_window = None  # (start, end) of the write after a trigger line, from the line
        self.write_windows = []  # (start, end) from the process start, for writers without triggers
        self.duration = 1.0  # of an uninterrupted run from scratch, measured
        self.line_times = []  # when it printed the lines that come just before its saves
        self.watched_seconds = 1.0  # of the watched run, which the polling slows down
        self.pace = 1.0  # how long runs take now, against the measured ones
        self.temps = set()  # temporary files of killed writes now in the folder
        self.stats = {"trials": 0, "killed": 0, "finished_first": 0, "aimed_at_save": 0, "in_write": 0,
                      "temp_files_left": 0, "states": {}}

    @property
    def path(self):
        return os.path.join(self.work, self.file_name)

    def run(self, argv):
        proc = Process([self.ember] + argv, self.env)
        code = proc.finish()
        if code != 0:
            raise Failure(f"{self.name}: {' '.join(argv)} exited {code}:\n{proc.text()}{proc.stderr.decode()}")
        return proc

    def timed(self, argv, watch=False):
        """Runs uninterrupted; returns the seconds it took. Watched (slower: the polling takes a core),
        it also sets the trigger window and the write windows (as fractions of the run)."""
        observer = Watch(self.work, self.file_name) if watch else None
        proc = Process([self.ember] + argv, self.env)
        if observer:
            observer.start(proc.start)
        code = proc.finish()
        elapsed = time.monotonic() - proc.start
        if observer:
            observer.close()
        if code != 0:
            raise Failure(f"{self.name}: {' '.join(argv)} exited {code}:\n{proc.text()}{proc.stderr.decode()}")
        pattern = self.trigger_pattern()
        self.line_times = [t for t, line in proc.lines if line is not None and pattern and pattern.search(line)]
        if observer:
            self.write_windows += [(start / elapsed, end / elapsed) for start, end in observer.windows()]
            self.watched_seconds = elapsed
            # From each trigger line to the write that follows it: when its temporary file appeared,
            # when it was renamed.
            offsets = []
            for t in self.line_times:
                after = [(start - t, end - t) for start, end in observer.windows() if start >= t]
                if after:
                    offsets.append(after[0])
            if offsets:
                starts, ends = sorted(a for a, _ in offsets), sorted(b for _, b in offsets)
                self.trigger_window = (starts[len(starts) // 2], ends[len(ends) // 2])
        return elapsed

    def fastest_time(self, argv, runs=3):
        return min(self.timed(argv) for _ in range(runs))

    def trigger_pattern(self):
        return None

    def label(self, digest):
        if digest is None:
            return "absent"
        return self.refs.get(digest, "other")

    # Subclasses: references(), plan(before) -> (argv, allowed, triggers, expected seconds),
    # load(path) (raises Failure when ember cannot read it), finish() (an uninterrupted run at the end).

    def check_file(self, digest, allowed, before):
        if digest is None:
            if before is not None:
                raise Failure(f"{self.name}: the file {self.path} was there before the run and is gone")
            return
        if digest in allowed or (digest == before):
            return
        if not self.reproducible and self.complete(self.path):
            return
        raise Failure(f"{self.name}: after the kill {self.path} is neither the previous file nor a complete one "
                      f"(sha256 {digest}, {os.path.getsize(self.path)} bytes)")

    def complete(self, path):
        return False

    def write_seconds(self):
        """How long a write took in the watched run (from its temporary file to the rename)."""
        if self.trigger_window:
            start, end = self.trigger_window
            return (end - start) * self.duration / self.watched_seconds
        if self.write_windows:
            lengths = sorted(end - start for start, end in self.write_windows)
            return lengths[len(lengths) // 2] * self.duration
        return 0.002

    def wait_for_temp(self, proc, timeout):
        """Polls until a temporary file appears that was not there before; False if the process
        ends first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.proc.poll() is None:
            if set(temp_files(self.work, self.file_name)) - self.temps:
                return True
            time.sleep(0.0001)
        return False

    def trial(self):
        before = sha256(self.path)
        argv, allowed, triggers, planned = self.plan(before)
        expected = planned * self.pace
        proc = Process([self.ember] + argv, self.env)
        aimed = False
        choice = self.rng.random()
        if choice < 0.5:
            # Aimed at a save: after the line printed just before it (if the command prints one) ...
            if triggers and not proc.wait_for_line(self.rng.choice(triggers), timeout=expected * 3 + 10):
                choice = 1.0  # ended first: no save to aim at
        if choice < 0.25:
            # ... at the moment a new temporary file appears, then a little later, within the time
            # a write takes (under load the line can reach us late: this catches the write itself).
            aimed = True
            length = max(0.0005, self.write_seconds() * self.pace)
            if self.wait_for_temp(proc, timeout=expected * 3 + 10):
                proc.kill_after(self.rng.uniform(0, length))
        elif choice < 0.5 and (self.trigger_window if triggers else self.write_windows):
            # ... or at a time drawn around the window in which an uninterrupted run wrote.
            aimed = True
            if triggers:
                # (the window was measured in a watched run, slower than this one)
                start, end = (t * self.pace * self.duration / self.watched_seconds for t in self.trigger_window)
                margin = end - start
                proc.kill_after(self.rng.uniform(max(0.0, start - margin), end + margin))
            else:
                start, end = self.rng.choice(self.write_windows)
                margin = 0.5 * (end - start)
                when = self.rng.uniform(start - margin, end + margin) * expected
                proc.kill_after(when - (time.monotonic() - proc.start))
        if not aimed:
            proc.kill_after(self.rng.uniform(0, 1.1 * expected) - (time.monotonic() - proc.start))
        proc.kill_after(0)
        code = proc.finish()
        self.stats["trials"] += 1
        if code == -signal.SIGKILL:
            self.stats["killed"] += 1
        elif code == 0:
            self.stats["finished_first"] += 1
            # The machine's load changes how long a run takes: follow the runs that finish.
            self.pace = 0.7 * self.pace + 0.3 * (time.monotonic() - proc.start) / planned
        else:
            raise Failure(f"{self.name}: {' '.join(argv)} exited {code}:\n{proc.text()}{proc.stderr.decode()}")
        self.stats["aimed_at_save"] += aimed
        after = sha256(self.path)
        self.check_file(after, allowed, before)
        left = temp_files(self.work, self.file_name)
        others = sorted(set(os.listdir(self.work)) - set(left) - {self.file_name} - self.own_files())
        if others:
            raise Failure(f"{self.name}: unexpected files beside {self.file_name}: {others}")
        if set(left) - self.temps:
            self.stats["in_write"] += 1  # this kill left a new temporary file: it landed inside a write
        self.temps = set(left)
        self.stats["temp_files_left"] = len(left)
        label = self.label(after) if self.reproducible else "absent" if after is None else \
            "the previous file" if after == before else "a new complete file"
        self.stats["states"][label] = self.stats["states"].get(label, 0) + 1
        if after is not None and after not in self.loaded:
            self.load(self.path)
            self.loaded.add(after)

    def own_files(self):
        return set()

    def end(self):
        self.finish()
        left = temp_files(self.work, self.file_name)
        if left:
            raise Failure(f"{self.name}: a complete write left the temporary files {left} of killed writes")
        self.stats["temp_files_left"] = 0


class TrainMnist(Writer):
    """`ember train mnist --save`: the MLP, a checkpoint after each epoch, runs resumed from
    whatever a kill left (or started over when nothing is left or the run is complete)."""

    name = "train_mnist"
    file_name = "ckpt.safetensors"
    epochs = 3

    def base(self):
        return ["train", "mnist", "--model", "mlp", "--epochs", str(self.epochs), "--threads", "1", "--seed", "7",
                "--data", os.path.join(self.root, "data", "mnist")]

    def trigger_pattern(self):
        return re.compile(r"^epoch \d+/")

    def references(self):
        chain = os.path.join(self.work, "chain.safetensors")
        by_epoch = {}
        for epoch in range(1, self.epochs + 1):
            resume = ["--resume", chain] if epoch > 1 else []
            self.run(self.base() + resume + ["--stop-after", "1", "--save", chain])
            by_epoch[epoch] = sha256(chain)
        os.remove(chain)
        self.timed(self.base() + ["--save", self.path], watch=True)
        self.duration = self.timed(self.base() + ["--save", self.path])
        if len(self.line_times) != self.epochs:
            raise Failure(f"{self.name}: expected {self.epochs} lines before the saves, saw {self.line_times}")
        if sha256(self.path) != by_epoch[self.epochs]:
            raise Failure(f"{self.name}: the uninterrupted run's checkpoint differs from the resumed runs'")
        os.remove(self.path)
        self.refs = {digest: f"epoch {epoch}" for epoch, digest in by_epoch.items()}
        self.by_epoch = by_epoch

    def done(self, digest):
        return int(self.refs[digest].split()[1]) if digest in self.refs else 0

    def plan(self, before):
        done = self.done(before) if before else 0
        if before is None or done == self.epochs:
            argv, first = self.base() + ["--save", self.path], 1
        else:
            argv, first = self.base() + ["--resume", self.path, "--save", self.path], done + 1
        allowed = {self.by_epoch[e] for e in range(first, self.epochs + 1)}
        triggers = [re.compile(rf"^epoch {e}/{self.epochs} ") for e in range(first, self.epochs + 1)]
        return argv, allowed, triggers, self.expected_seconds(first)

    def expected_seconds(self, first):
        """How long a run takes that saves the checkpoints first..epochs, from the times of the lines
        printed before each save in an uninterrupted run (start-up, one period per save, the end)."""
        t = self.line_times
        period = (t[-1] - t[0]) / (len(t) - 1)
        return (t[0] - period) + (self.epochs - first + 1) * period + (self.duration - t[-1])

    def load(self, path):
        proc = self.run(["eval", "mnist", "--checkpoint", path, "--threads", "1", "--json",
                         "--data", os.path.join(self.root, "data", "mnist")])
        result = json.loads(proc.text().strip().splitlines()[-1])
        if not result["test_accuracy"] > 0.5:
            raise Failure(f"{self.name}: {path} loads but evaluates to {result}")

    def finish(self):
        before = sha256(self.path)
        resume = ["--resume", self.path] if before and self.done(before) < self.epochs else []
        self.run(self.base() + resume + ["--save", self.path])
        if sha256(self.path) != self.by_epoch[self.epochs]:
            raise Failure(f"{self.name}: the run completed after the kills ends with another checkpoint")


class TrainGpt(TrainMnist):
    """`ember train gpt --save`: a tiny GPT, a checkpoint at each of 4 evaluations."""

    name = "train_gpt"
    steps, every = 40, 10

    def base(self):
        return ["train", "gpt", "--layers", "1", "--heads", "2", "--dim", "32", "--context", "16", "--batch-size", "8",
                "--steps", str(self.steps), "--warmup", "2", "--eval-every", str(self.every), "--eval-batches", "2",
                "--sample", "0", "--lr", "3e-3", "--threads", "1", "--seed", "5",
                "--data", os.path.join(self.root, "data", "shakespeare", "input.txt")]

    def trigger_pattern(self):
        return re.compile(r"^step +\d+/")

    def references(self):
        chain = os.path.join(self.work, "chain.safetensors")
        by_epoch = {}
        for k in range(1, self.steps // self.every + 1):
            resume = ["--resume", chain] if k > 1 else []
            self.run(self.base() + resume + ["--stop-after", str(self.every), "--save", chain])
            by_epoch[k] = sha256(chain)
        os.remove(chain)
        self.timed(self.base() + ["--save", self.path], watch=True)
        self.duration = self.timed(self.base() + ["--save", self.path])
        self.epochs = self.steps // self.every
        if len(self.line_times) != self.epochs:
            raise Failure(f"{self.name}: expected {self.epochs} lines before the saves, saw {self.line_times}")
        if sha256(self.path) != by_epoch[self.epochs]:
            raise Failure(f"{self.name}: the uninterrupted run's checkpoint differs from the resumed runs'")
        os.remove(self.path)
        self.refs = {digest: f"step {k * self.every}" for k, digest in by_epoch.items()}
        self.by_epoch = by_epoch

    def done(self, digest):
        return int(self.refs[digest].split()[1]) // self.every if digest in self.refs else 0

    def plan(self, before):
        argv, allowed, _, expected = super().plan(before)
        done = self.done(before) if before else 0
        first = 1 if before is None or done == self.epochs else done + 1
        triggers = [re.compile(rf"^step +{k * self.every}/{self.steps} ") for k in range(first, self.epochs + 1)]
        return argv, allowed, triggers, expected

    def load(self, path):
        proc = self.run(["eval", "gpt", "--checkpoint", path, "--batches", "1", "--threads", "1", "--json",
                         "--data", os.path.join(self.root, "data", "shakespeare", "input.txt")])
        result = json.loads(proc.text().strip().splitlines()[-1])
        if not result["val_loss"] < 5:
            raise Failure(f"{self.name}: {path} loads but evaluates to {result}")


class Quantize(Writer):
    """`ember quantize` of the MNIST MLP to one GGUF path, alternately q8_0 and int8, so that the
    previous file is always the other type's complete output."""

    name = "quantize"
    file_name = "model.gguf"
    types = ("q8_0", "int8")

    def references(self):
        self.source = os.path.join(self.work, "mlp.safetensors")
        self.run(["train", "mnist", "--model", "mlp", "--epochs", "1", "--threads", "1", "--seed", "3", "--save",
                  self.source, "--data", os.path.join(self.root, "data", "mnist")])
        self.by_type = {}
        for kind in self.types:
            self.timed(self.argv(kind), watch=True)
            self.by_type[kind] = sha256(self.path)
        self.duration = self.fastest_time(self.argv(self.types[0]))
        if sha256(self.path) != self.by_type[self.types[0]]:
            raise Failure(f"{self.name}: two uninterrupted runs wrote different files")
        self.refs = {digest: kind for kind, digest in self.by_type.items()}

    def own_files(self):
        return {"mlp.safetensors"}

    def argv(self, kind):
        return ["quantize", self.source, self.path, "--type", kind, "--threads", "1"]

    def plan(self, before):
        kind = self.types[1] if self.refs.get(before) == self.types[0] else self.types[0]
        return self.argv(kind), {self.by_type[kind]}, [], self.duration

    def load(self, path):
        proc = self.run(["eval", "mnist", "--checkpoint", path, "--threads", "1", "--json",
                         "--data", os.path.join(self.root, "data", "mnist")])
        result = json.loads(proc.text().strip().splitlines()[-1])
        if not (result["test_accuracy"] > 0.5 and result["quantization"] in self.types):
            raise Failure(f"{self.name}: {path} loads but evaluates to {result}")

    def finish(self):
        self.run(self.argv(self.types[0]))
        if sha256(self.path) != self.by_type[self.types[0]]:
            raise Failure(f"{self.name}: the run completed after the kills wrote another file")


def read_npy(path):
    """(shape, values) of a little-endian float32 .npy file; raises on anything incomplete."""
    data = open(path, "rb").read()
    if data[:6] != b"\x93NUMPY":
        raise ValueError("not a .npy file")
    length = struct.unpack("<H", data[8:10])[0]
    header = eval(data[10:10 + length].decode(), {"__builtins__": {}})  # a Python dict literal
    count = 1
    for n in header["shape"]:
        count *= n
    body = data[10 + length:]
    if header["descr"] != "<f4" or len(body) != 4 * count:
        raise ValueError(f"{header}: {len(body)} bytes of data")
    return header["shape"], struct.unpack(f"<{count}f", body)


class OnnxRun(Writer):
    """`ember onnx run` writing logits.npy for the MNIST CNN, alternately for two inputs."""

    name = "onnx_run"
    file_name = "logits.npy"

    def references(self):
        cases = os.path.join(self.root, "tests", "data", "onnx", "mnist_cnn")
        self.inputs = [os.path.join(cases, "input.npy"), os.path.join(cases, "finetune_x.npy")]
        self.model = os.path.join(cases, "model.onnx")
        self.by_input = []
        for index in range(2):
            self.timed(self.argv(index), watch=True)
            self.by_input.append(sha256(self.path))
        self.duration = self.fastest_time(self.argv(1))
        self.refs = {digest: f"input {i}" for i, digest in enumerate(self.by_input)}

    def argv(self, index):
        return ["onnx", "run", self.model, "--input", f"input={self.inputs[index]}", "--output-dir", self.work,
                "--threads", "1"]

    def plan(self, before):
        index = 0 if self.refs.get(before) == "input 1" else 1
        return self.argv(index), {self.by_input[index]}, [], self.duration

    def load(self, path):
        try:
            shape, values = read_npy(path)
        except Exception as e:
            raise Failure(f"{self.name}: {path} does not read as a .npy file: {e}")
        if len(shape) != 2 or shape[1] != 10 or not all(v == v for v in values):
            raise Failure(f"{self.name}: {path} holds {shape}")

    def finish(self):
        self.run(self.argv(0))
        if sha256(self.path) != self.by_input[0]:
            raise Failure(f"{self.name}: the run completed after the kills wrote another file")


class ProfileTrace(Writer):
    """The profiler's Chrome trace of `ember train mnist --profile` (timings differ from run to run,
    so the file must be the previous one or a complete trace)."""

    name = "profile_trace"
    file_name = "trace.json"
    reproducible = False

    def argv(self):
        return ["train", "mnist", "--model", "mlp", "--epochs", "1", "--threads", "1", "--seed", "7", "--profile",
                self.path, "--data", os.path.join(self.root, "data", "mnist")]

    def trigger_pattern(self):
        return re.compile(r"^epoch 1/1 ")

    def references(self):
        self.timed(self.argv())  # the first run measures and caches the machine's peaks
        self.timed(self.argv(), watch=True)
        self.duration = self.fastest_time(self.argv())
        self.refs = {}

    def complete(self, path):
        try:
            with open(path) as f:
                trace = json.load(f)
        except (ValueError, OSError):
            return False
        return any(e.get("name") == "train step" for e in trace.get("traceEvents", []))

    def plan(self, before):
        return self.argv(), set(), [self.trigger_pattern()], self.duration

    def load(self, path):
        if not self.complete(path):
            raise Failure(f"{self.name}: {path} is not a complete trace")

    def finish(self):
        self.run(self.argv())
        self.load(self.path)


WRITERS = {w.name: w for w in (TrainMnist, TrainGpt, Quantize, OnnxRun, ProfileTrace)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ember")
    parser.add_argument("root", help="the repository (its data/ and tests/data/)")
    parser.add_argument("work", help="an empty folder for the files")
    parser.add_argument("--trials", default="8", help="trials per writer: N, or name=N,name=N")
    parser.add_argument("--writers", default=",".join(WRITERS), help="comma-separated: " + ", ".join(WRITERS))
    parser.add_argument("--seed", type=int, default=None, help="of the kill times (default: random, printed)")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    env = dict(os.environ, EMBER_PEAKS_CACHE=os.path.join(args.work, "peaks.json"))
    counts = {}
    for item in args.trials.split(","):
        name, _, n = item.rpartition("=")
        counts[name or "*"] = int(n)
    print(f"kill trials: seed {seed}")
    summary = {}
    for name in args.writers.split(","):
        writer = WRITERS[name](args.ember, args.root, args.work, env, rng)
        trials = counts.get(name, counts.get("*", 8))
        started = time.monotonic()
        try:
            writer.references()
            for _ in range(trials):
                writer.trial()
            writer.end()
        except Failure as e:
            print(f"FAILED (seed {seed}): {e}")
            print(json.dumps({name: writer.stats}))
            return 1
        s = writer.stats
        summary[name] = dict(s, seconds=round(time.monotonic() - started, 1))
        print(f"{name}: {s['trials']} kills ({s['killed']} killed, {s['finished_first']} finished first), "
              f"{s['aimed_at_save']} aimed at a save, {s['in_write']} inside a write; files after the kills: "
              + ", ".join(f"{k} {v}" for k, v in sorted(s["states"].items()))
              + f"; 0 lost or corrupt; {time.monotonic() - started:.1f}s", flush=True)
        shutil.rmtree(writer.work)
    print(json.dumps({"seed": seed, "writers": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
