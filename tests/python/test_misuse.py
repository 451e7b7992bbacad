"""Misuse gets trainsnap.InvalidArgument and changes nothing: steps that are
not int64 integers, a Store or Checkpointer used in a forked child; a Store
used as a context manager closes its Checkpointers and never replaces the
exception in flight; the frozen base's identity is checked by default."""

import os
import time

import pytest
import torch
from torch import nn

import trainsnap
from kit import first_difference, open_store
from loop import Run


def test_steps_are_int64_integers_everywhere(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    run = Run()
    run.micro_step()
    ckpt.capture(1, **run.state())
    target = Run(seed=2)
    before = target.snapshot()
    bad_steps = (True, False, 1.0, 2.5, "1", None, 2 ** 63, -2 ** 63 - 1, 2 ** 64)
    calls = {
        "capture": lambda s: ckpt.capture(s, **run.state()),
        "capture_async": lambda s: ckpt.capture_async(s, **run.state()),
        "restore": lambda s: ckpt.restore(s, **target.state()),
        "rollback_to": lambda s: ckpt.rollback_to(s, **target.state()),
        "info": store.info,
        "delete": store.delete,
        "load": lambda s: trainsnap.load(store, target.model, step=s),
    }
    for name, call in calls.items():
        for step in bad_steps:
            if step is None and name == "load":
                continue  # load's default: the latest step
            with pytest.raises(trainsnap.InvalidArgument) as e:
                call(step)
            assert "step" in str(e.value), (name, step, str(e.value))
    for step in bad_steps:
        if step is not None:
            with pytest.raises(trainsnap.InvalidArgument):
                store.verify(step)
        assert step not in store
    assert first_difference(target.snapshot(), before) == ""
    assert [i["step"] for i in store.list()] == [1]
    ckpt.flush()
    # The whole int64 range is accepted, as by the C++ API.
    for step in (trainsnap.STEP_MIN, -1, 0, trainsnap.STEP_MAX):
        ckpt.capture(step, rng=False)
        assert step in store and store.info(step)["step"] == step
    assert (trainsnap.STEP_MIN, trainsnap.STEP_MAX) == (-2 ** 63, 2 ** 63 - 1)


def test_store_exit_flushes_and_closes_its_checkpointers_and_keeps_the_error_in_flight(tmp_path):
    path = tmp_path / "store"
    model = nn.Linear(32, 32)
    with pytest.raises(RuntimeError, match="the user's error"):
        with trainsnap.Store(str(path), sync=False) as store:
            ckpt = trainsnap.Checkpointer(store)
            for step in range(1, 4):
                ckpt.capture_async(step, model=model, rng=False)
            raise RuntimeError("the user's error")
    with pytest.raises(trainsnap.InvalidArgument, match="the Checkpointer is closed"):
        ckpt.flush()
    with trainsnap.Store(str(path), sync=False) as store:  # closed: it opens again
        assert [i["step"] for i in store.list()] == [1, 2, 3]  # the captures in flight committed
        trainsnap.Checkpointer(store).capture_async(4, model=model, rng=False)
    with trainsnap.Store(str(path), sync=False) as store:
        assert store.latest() == 4

    class Interrupts:
        def state_dict(self):
            raise KeyboardInterrupt()

        def load_state_dict(self, state):
            pass

    # A KeyboardInterrupt from an extra leaves an unreported Aborted for
    # flush; in flight, the interrupt is what leaves the with block.
    with pytest.raises(KeyboardInterrupt):
        with trainsnap.Store(str(path), sync=False) as store:
            trainsnap.Checkpointer(store).capture_async(5, extra={"x": Interrupts()}, rng=False)
    # Without an exception in flight, __exit__ raises the unreported error once everything is closed.
    with pytest.raises(trainsnap.Aborted, match="capture step 6: extra state `x`: KeyboardInterrupt"):
        with trainsnap.Store(str(path), sync=False) as store:
            ckpt = trainsnap.Checkpointer(store)
            try:
                ckpt.capture_async(6, extra={"x": Interrupts()}, rng=False)
            except KeyboardInterrupt:
                pass
    with trainsnap.Store(str(path), sync=False) as store:
        assert store.latest() == 4


def test_a_forked_child_gets_invalid_argument_at_once_and_the_parent_is_unaffected(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    run = Run()
    run.micro_step()
    ckpt.capture(1, **run.state())
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what each call raised, then let the objects die
        code = 1
        try:
            os.close(read)
            lines = []
            for name, call in (("capture", lambda: ckpt.capture(2, **run.state())),
                               ("restore", lambda: ckpt.restore(1, **run.state())),
                               ("list", store.list), ("close", ckpt.close), ("store_close", store.close)):
                try:
                    call()
                    lines.append(f"{name} returned")
                except trainsnap.InvalidArgument as e:
                    lines.append(f"{name} {e}")
            del ckpt, store  # dropped in the child: never closed there (the parent's lock, threads)
            import gc
            gc.collect()
            os.write(write, "\n".join(lines).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        assert time.monotonic() < deadline, "the forked child hangs"
        time.sleep(0.05)
    with os.fdopen(read) as f:
        lines = f.read().splitlines()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    parent = os.getpid()
    assert len(lines) == 5
    for line, name in zip(lines, ("capture", "restore", "list", "close", "store_close")):
        what = f"store `{tmp_path / 'store'}`" if name in ("list", "store_close") else "the Checkpointer"
        assert line.startswith(f"{name} {what} was opened by process {parent}; process "), line
        assert line.endswith("is a fork of it and cannot use it: open it again in the child (its threads, locks "
                             "and connections stay with the parent)"), line
    # The parent goes on: its store is still open (and locked) and captures commit.
    run.micro_step()
    ckpt.capture(2, **run.state())
    assert [i["step"] for i in store.list()] == [1, 2]
    with pytest.raises(trainsnap.Busy):
        open_store(tmp_path)


class Lora(nn.Module):
    def __init__(self, base_seed):
        super().__init__()
        torch.manual_seed(base_seed)
        self.base = nn.Linear(16, 16)
        self.base.requires_grad_(False)
        torch.manual_seed(100)
        self.a = nn.Parameter(torch.randn(2, 16))
        self.b = nn.Parameter(torch.zeros(16, 2))


def test_the_frozen_base_content_is_checked_by_default(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store, model_state="trainable")
    ckpt.capture(1, model=Lora(base_seed=0), rng=False)
    other_base = Lora(base_seed=1)  # the same names and shapes, other bytes
    before = {k: v.clone() for k, v in other_base.state_dict().items()}
    with pytest.raises(trainsnap.ContractMismatch) as e:
        ckpt.restore(1, model=other_base, rng=False)
    assert "frozen base: content hash differs" in str(e.value)
    assert first_difference(dict(other_base.state_dict()), before) == ""
    assert ckpt.restore(1, model=Lora(base_seed=0), rng=False) == 1
    # Off, another base of the same shapes is accepted (the old default).
    unchecked = trainsnap.Checkpointer(open_store(tmp_path, "unchecked"), model_state="trainable",
                                       hash_base_content=False)
    unchecked.capture(1, model=Lora(base_seed=0), rng=False)
    assert unchecked.restore(1, model=Lora(base_seed=1), rng=False) == 1
