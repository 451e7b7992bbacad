"""Checkpointer(overhead_budget=...): captures that would take the training
thread over its budget are skipped (handle.skipped, not an error), the rest
commit and restore bit-exactly."""

import math
import time

import pytest
import torch
from torch import nn

import trainsnap
from kit import open_store


def run_loop(ckpt, model, steps, called=None):
    committed, skipped, weights, handles = [], [], {}, []
    for step in range(1, steps + 1):
        with torch.no_grad():
            model.weight.add_(1.0 / 64)
        time.sleep(0.001)
        if called is not None:
            called[step] = time.monotonic()
        handle = ckpt.capture_async(step, model=model, rng=False)
        assert handle.step == step
        if handle.skipped:
            assert handle.done() and handle.result() is None
            skipped.append(step)
        else:
            committed.append(step)
            weights[step] = model.weight.detach().clone()
            handles.append(handle)
    for handle in handles:
        assert handle.result() is None and not handle.skipped
    ckpt.flush()
    return committed, skipped, weights


def test_a_tight_budget_skips_most_captures_and_commits_the_rest(tmp_path):
    store = open_store(tmp_path)
    opened = time.monotonic()
    ckpt = trainsnap.Checkpointer(store, overhead_budget=0.02)
    model = nn.Linear(1024, 1024)
    called = {}
    committed, skipped, weights = run_loop(ckpt, model, 400, called)
    # The first capture is estimated from its 4,198,400 bytes at 1 GB/s
    # (4.1984 ms): it waits until that fits 2 % of the wall time since the
    # opening, i.e. 205.72 ms.
    assert skipped[0] == 1 and committed[0] > 1
    assert called[committed[0]] - opened >= 0.20572
    assert len(skipped) > 300
    assert [i["step"] for i in store.list()] == committed
    stats = ckpt.pipeline_stats()
    assert stats["captures_skipped"] == len(skipped)
    assert stats["last_committed_step"] == committed[-1]
    if len(committed) >= 2:
        assert stats["steps_between_last_commits"] == committed[-1] - committed[-2]
    else:
        assert stats["steps_between_last_commits"] is None
    for step in committed:
        target = nn.Linear(1024, 1024)
        ckpt.restore(step, model=target, rng=False)
        assert torch.equal(target.weight, weights[step])
    ckpt.close()


def test_a_loose_budget_skips_nothing(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store, overhead_budget=0.99, max_captures_in_flight=0)
    model = nn.Linear(256, 256)
    committed, skipped, _ = run_loop(ckpt, model, 10)
    assert skipped == [] and committed == list(range(1, 11))
    assert ckpt.pipeline_stats()["captures_skipped"] == 0
    assert ckpt.pipeline_stats()["steps_between_last_commits"] == 1
    ckpt.close()


def test_without_a_budget_no_handle_is_skipped(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    handle = ckpt.capture_async(1, model=nn.Linear(4, 4), rng=False)
    assert handle.skipped is False
    handle.wait()
    assert ckpt.pipeline_stats()["captures_skipped"] == 0
    assert ckpt.pipeline_stats()["steps_between_last_commits"] is None
    ckpt.close()


@pytest.mark.parametrize("budget", [-0.1, 1.0, 1.5, math.nan])
def test_a_budget_out_of_range_is_invalid_argument(tmp_path, budget):
    store = open_store(tmp_path)
    with pytest.raises(trainsnap.InvalidArgument, match="overhead_budget"):
        trainsnap.Checkpointer(store, overhead_budget=budget)
    # The store is not held by the refused checkpointer.
    trainsnap.Checkpointer(store, overhead_budget=0.5).close()
    store.close()
