"""model=, optimizer= and scheduler= as one object, a list or a dict;
optimizer state keyed by qualified parameter name through whichever model
holds the parameter, with the same checks for every optimizer; DDP and
DataParallel wrappers unwrapped at capture and at restore."""

import os

import pytest
import torch
import torch.distributed as dist
from torch import nn

import trainsnap
from kit import first_difference, open_store


class Pair:
    """Two models with BatchNorm, an optimizer and a scheduler each, and one
    optimizer over parameters of both (its state named through each)."""

    def __init__(self, seed):
        torch.manual_seed(seed)
        self.G = nn.Sequential(nn.Linear(3, 6), nn.BatchNorm1d(6), nn.Linear(6, 3))
        self.D = nn.Sequential(nn.Linear(3, 6), nn.BatchNorm1d(6), nn.Linear(6, 1))
        self.opt_G = torch.optim.Adam(self.G.parameters(), lr=0.01)
        self.opt_D = torch.optim.SGD(self.D[:2].parameters(), lr=0.05, momentum=0.9)
        self.opt_both = torch.optim.RMSprop([self.G[2].weight, self.D[2].weight], lr=0.001)
        self.sched_G = torch.optim.lr_scheduler.ExponentialLR(self.opt_G, 0.9)
        self.sched_D = torch.optim.lr_scheduler.StepLR(self.opt_D, 2)

    def step(self):
        out = self.D(self.G(torch.randn(4, 3))).pow(2).mean()
        out.backward()
        for opt in (self.opt_G, self.opt_D, self.opt_both):
            opt.step()
            opt.zero_grad()
        self.sched_G.step()
        self.sched_D.step()

    def as_dict(self):
        return dict(model={"G": self.G, "D": self.D},
                    optimizer={"G": self.opt_G, "D": self.opt_D, "both": self.opt_both},
                    scheduler={"G": self.sched_G, "D": self.sched_D})

    def as_list(self):
        return dict(model=[self.G, self.D], optimizer=[self.opt_G, self.opt_D, self.opt_both],
                    scheduler=[self.sched_G, self.sched_D])

    def values(self):
        return {"G": dict(self.G.state_dict()), "D": dict(self.D.state_dict()),
                "opt": [o.state_dict() for o in (self.opt_G, self.opt_D, self.opt_both)],
                "sched": [self.sched_G.state_dict(), self.sched_D.state_dict()]}


@pytest.mark.parametrize("shape", ["as_dict", "as_list"])
def test_several_models_optimizers_and_schedulers_round_trip_bitwise(tmp_path, shape):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    run = Pair(0)
    for _ in range(3):
        run.step()
    ckpt.capture(3, **getattr(run, shape)())
    expected = run.values()
    other = Pair(1)
    other.step()
    assert first_difference(other.values(), expected) != ""
    ckpt.restore(3, **getattr(other, shape)())  # the RNG too: both draw the same batch next
    assert first_difference(other.values(), expected) == ""
    rng = torch.get_rng_state()
    run.step()
    torch.set_rng_state(rng)
    other.step()
    assert first_difference(other.values(), run.values()) == ""


def test_each_optimizer_is_keyed_by_qualified_names_with_the_same_checks(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    run = Pair(0)
    run.step()
    ckpt.capture(1, **run.as_dict())
    other = Pair(1)
    before = other.values()
    # The optimizer over both models holds its parameters in another order.
    other.opt_both = torch.optim.RMSprop([other.D[2].weight, other.G[2].weight], lr=0.001)
    with pytest.raises(trainsnap.ContractMismatch) as e:
        ckpt.restore(1, **other.as_dict())
    assert str(e.value) == ("restore step 1: extra state `python:optimizer:both`: param group 0, parameter 0: "
                            "`G/2.weight` in the snapshot, `D/2.weight` in the target")
    # G's and D's optimizers swapped: the class and the names are checked for each.
    other.opt_both = torch.optim.RMSprop([other.G[2].weight, other.D[2].weight], lr=0.001)
    state = other.as_dict()
    state["optimizer"] = {"G": other.opt_D, "D": other.opt_G, "both": other.opt_both}
    with pytest.raises(trainsnap.ContractMismatch) as e:
        ckpt.restore(1, **state)
    assert str(e.value) == ("restore step 1: extra state `python:optimizer:D`: the snapshot holds a "
                            "torch.optim.sgd.SGD, the target is a torch.optim.adam.Adam")
    assert first_difference(other.values(), before) == ""
    # A parameter of no model given.
    with pytest.raises(trainsnap.InvalidArgument) as e:
        ckpt.capture(2, model={"G": run.G}, optimizer={"D": run.opt_D})
    assert str(e.value) == ("capture step 2: extra state `python:optimizer:D`: param group 0 holds a tensor (6, 3) "
                            "that is no parameter of the model")


def test_a_dict_and_a_list_are_different_compositions_named_in_the_error(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    run = Pair(0)
    ckpt.capture(1, **run.as_dict())
    with pytest.raises(trainsnap.ContractMismatch) as e:
        ckpt.restore(1, **run.as_list())
    assert str(e.value) == 'restore step 1: models: expected ["D", "G"], actual ["0", "1"]'
    for bad, message in (({"": run.G}, "model key '': a non-empty str without '/' or ':'"),
                         ({"a/b": run.G}, "model key 'a/b': a non-empty str without '/' or ':'"),
                         ([run.G, None], "model 1 is None"),
                         ({"G": run.opt_G}, "model `G`: a torch.optim.adam.Adam is not a torch.nn.Module")):
        with pytest.raises(trainsnap.InvalidArgument) as e:
            ckpt.capture(2, model=bad)
        assert str(e.value) == message
    assert [i["step"] for i in store.list()] == [1]


def test_a_snapshot_moves_between_data_parallel_and_the_bare_model(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    torch.manual_seed(0)
    bare = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    wrapped = nn.DataParallel(bare)  # no GPU: it runs the module itself
    opt = torch.optim.AdamW(wrapped.parameters(), lr=0.1)
    wrapped(torch.randn(4, 3)).sum().backward()
    opt.step()
    ckpt.capture(1, model=wrapped, optimizer=opt)
    expected = (dict(bare.state_dict()), opt.state_dict())

    torch.manual_seed(1)
    target = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    target_opt = torch.optim.AdamW(target.parameters(), lr=0.1)
    ckpt.restore(1, model=target, optimizer=target_opt)
    assert first_difference((dict(target.state_dict()), target_opt.state_dict()), expected) == ""
    assert sorted(target.state_dict()) == sorted(bare.state_dict())  # no "module." prefix anywhere

    ckpt.capture(2, model=target, optimizer=target_opt)
    torch.manual_seed(2)
    again = nn.DataParallel(nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3)))
    again_opt = torch.optim.AdamW(again.parameters(), lr=0.1)
    ckpt.restore(2, model=again, optimizer=again_opt)
    assert first_difference((dict(again.module.state_dict()), again_opt.state_dict()), expected) == ""


@pytest.fixture
def one_rank_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rdv", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_snapshot_moves_between_ddp_and_the_bare_model(tmp_path, one_rank_group):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    torch.manual_seed(0)
    ddp = nn.parallel.DistributedDataParallel(nn.Linear(3, 2))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    ddp(torch.randn(4, 3)).sum().backward()
    opt.step()
    ckpt.capture(1, model=ddp, optimizer=opt)
    torch.manual_seed(1)
    bare = nn.Linear(3, 2)
    bare_opt = torch.optim.SGD(bare.parameters(), lr=0.1, momentum=0.9)
    ckpt.restore(1, model=bare, optimizer=bare_opt)
    assert first_difference((dict(bare.state_dict()), bare_opt.state_dict()),
                            (dict(ddp.module.state_dict()), opt.state_dict())) == ""
