"""Loading weights for evaluation: restore(partial=True) restores only the
objects given (the RNG only with rng=True), and trainsnap.load(path_or_store,
model, step=None) loads a model in one call and returns the step."""

import random

import pytest
import torch
from torch import nn

import trainsnap
from kit import first_difference, open_store
from loop import Run


def trained_store(tmp_path, steps=(2, 5)):
    """A store with full training snapshots (model, optimizer, scheduler,
    window, a cursor extra, RNG) of a Run at `steps`; the Run's model values at each."""
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    run = Run()
    models = {}
    done = 0
    for step in steps:
        while done < step:
            run.micro_step()
            done += 1
        ckpt.capture(step, **run.state())
        models[step] = model_values(run.model)
    rng = (torch.get_rng_state(), random.getstate())
    run.next_draws = (torch.rand(4), random.random())  # the draws right after the last capture
    torch.set_rng_state(rng[0])
    random.setstate(rng[1])
    ckpt.close()
    return store, run, models


def model_values(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_partial_restore_writes_the_model_only_and_leaves_the_rng_alone(tmp_path):
    store, run, models = trained_store(tmp_path)
    after_five = run.next_draws
    ckpt = trainsnap.Checkpointer(store)
    target = Run(seed=3)
    target.micro_step()
    before = target.snapshot()
    rng = (torch.get_rng_state(), random.getstate())
    with pytest.raises(trainsnap.ContractMismatch) as e:
        ckpt.restore(2, model=target.model)  # not partial: the optimizer is part of the snapshot
    assert str(e.value) == "restore step 2: accumulation window: in the snapshot, absent from the target"
    assert ckpt.restore(2, model=target.model, partial=True) == 2
    after = target.snapshot()
    assert first_difference(dict(target.model.state_dict()), models[2]) == ""
    for part in ("optimizer", "scheduler", "window", "cursor"):  # the model's gradients are the model's
        assert first_difference(after[part], before[part]) == "", part
    assert torch.equal(torch.get_rng_state(), rng[0]) and random.getstate() == rng[1]

    # rng=True restores the generators as well: the next draws are the run's.
    assert ckpt.restore(5, model=target.model, partial=True, rng=True) == 5
    assert first_difference(dict(target.model.state_dict()), models[5]) == ""
    assert torch.equal(torch.rand(4), after_five[0]) and random.random() == after_five[1]


def test_partial_restore_of_the_optimizer_alone(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    run = Run()
    for _ in range(4):
        run.micro_step()
    ckpt.capture(4, **run.state())
    target = Run(seed=2)
    before = model_values(target.model)
    ckpt.restore(4, model=target.model, optimizer=target.optimizer, partial=True)
    assert first_difference(target.optimizer.state_dict(), run.optimizer.state_dict()) == ""
    ckpt.restore(4, optimizer=target.optimizer, model=target.model, partial=True)
    # A window given alone is restored; the model's parameters were the snapshot's.
    window = trainsnap.AccumulationWindow(size=9)
    ckpt.restore(4, accumulation=window, partial=True)
    assert (window.size, window.micro_step) == (4, 0)
    assert first_difference(dict(target.model.state_dict()), dict(run.model.state_dict())) == ""
    assert first_difference(before, dict(run.model.state_dict())) != ""
    # Given nothing (and not the RNG), a partial restore is a mistake.
    with pytest.raises(trainsnap.InvalidArgument) as e:
        ckpt.restore(4, partial=True)
    assert str(e.value) == "restore step 4: partial restore: the target holds nothing to restore"


def test_partial_restore_of_one_model_of_two(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    torch.manual_seed(0)
    G, D = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)), nn.Linear(4, 1)
    opts = [torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters())]
    D(G(torch.randn(5, 3))).sum().backward()
    for opt in opts:
        opt.step()
    ckpt.capture(1, model={"G": G, "D": D}, optimizer=opts)
    torch.manual_seed(1)
    G2 = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    assert trainsnap.load(store, {"G": G2}) == 1
    assert first_difference(dict(G2.state_dict()), dict(G.state_dict())) == ""
    with pytest.raises(trainsnap.ContractMismatch) as e:
        trainsnap.load(store, G2)  # the unnamed model is not in the snapshot
    assert "models" in str(e.value)


def test_load_from_a_path_a_store_and_a_wrapped_model(tmp_path):
    store, run, models = trained_store(tmp_path)
    path = str(tmp_path / "store")
    # While the writer holds the store, load opens it read-only.
    target = Run(seed=4).model
    assert trainsnap.load(path, target) == 5
    assert first_difference(dict(target.state_dict()), models[5]) == ""
    assert trainsnap.load(path, nn.DataParallel(target), step=2) == 2
    assert first_difference(dict(target.state_dict()), models[2]) == ""
    assert trainsnap.load(store, target) == 5
    before = model_values(target)
    with pytest.raises(trainsnap.NotFound):
        trainsnap.load(path, target, step=3)
    for bad in (2.0, True, 2 ** 63):
        with pytest.raises(trainsnap.InvalidArgument):
            trainsnap.load(path, target, step=bad)
    wrong = nn.Linear(2, 2)
    with pytest.raises(trainsnap.ContractMismatch):
        trainsnap.load(path, wrong)
    assert first_difference(model_values(target), before) == ""
    empty = str(tmp_path / "empty")
    trainsnap.Store(empty).close()
    with pytest.raises(trainsnap.NotFound) as e:
        trainsnap.load(empty, target)
    assert str(e.value) == "restore latest: the store holds no snapshot"
