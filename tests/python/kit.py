"""Shared set-up of the binding's tests: stores, child processes, and the
bitwise comparison (loop.first_difference)."""

import os
import subprocess
import sys

import trainsnap
from loop import first_difference  # noqa: F401  (re-exported: the tests' one comparison)

HERE = os.path.dirname(os.path.abspath(__file__))


def open_store(tmp_path, name="store", **kw):
    """A store under tmp_path, unsynced (tests) with 2 threads."""
    kw.setdefault("sync", False)
    kw.setdefault("threads", 2)
    return trainsnap.Store(str(tmp_path / name), **kw)


def python_env():
    """The environment for a child interpreter: this one's sys.path first,
    so that it imports the same trainsnap and test helpers."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([HERE] + [p for p in sys.path if p])
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_until_held(argv, timeout=120):
    """Runs `argv` (a script that prints "held N" and blocks on stdin at its
    hold point), SIGKILLs it once it is held; returns N."""
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=python_env())
    held = None
    try:
        for line in child.stdout:
            if line.startswith("held "):
                held = int(line.split()[1])
                break
        child.kill()
        assert child.wait(timeout=timeout) == -9
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
        child.stdin.close()
    assert held is not None, f"{argv} ended without reaching its hold point"
    return held


def run_to_end(argv, timeout=120):
    subprocess.run(argv, check=True, timeout=timeout, stdout=subprocess.DEVNULL, env=python_env())
