"""Every LR scheduler class of the installed torch (torch.optim.lr_scheduler)
captures and restores bitwise: its state_dict, and the learning rates and
momenta of the steps after the restore, equal those of the run that never
stopped. Callables (LambdaLR's lambdas, OneCycleLR's anneal_func, CyclicLR's
scale function) are the target's own, as load_state_dict leaves them."""

import inspect

import pytest
import torch
from torch import nn
from torch.optim import lr_scheduler as L

import trainsnap
from kit import first_difference, open_store


class Warmup:
    """A callable object with state of its own: LambdaLR stores its __dict__."""

    def __init__(self, steps):
        self.steps = steps
        self.calls = 0

    def __call__(self, step):
        self.calls += 1
        return min(1.0, (step + 1) / self.steps)


SCHEDULERS = {
    "LambdaLR": lambda opt: L.LambdaLR(opt, [lambda step: 0.9 ** step, Warmup(4)]),
    "MultiplicativeLR": lambda opt: L.MultiplicativeLR(opt, lambda step: 0.95),
    "StepLR": lambda opt: L.StepLR(opt, step_size=2, gamma=0.5),
    "MultiStepLR": lambda opt: L.MultiStepLR(opt, milestones=[2, 5, 6], gamma=0.3),
    "ConstantLR": lambda opt: L.ConstantLR(opt, factor=0.5, total_iters=5),
    "LinearLR": lambda opt: L.LinearLR(opt, start_factor=0.2, total_iters=6),
    "ExponentialLR": lambda opt: L.ExponentialLR(opt, gamma=0.9),
    "SequentialLR": lambda opt: L.SequentialLR(
        opt, [L.LinearLR(opt, start_factor=0.5, total_iters=3), L.OneCycleLR(opt, max_lr=0.2, total_steps=20)],
        milestones=[3]),
    "PolynomialLR": lambda opt: L.PolynomialLR(opt, total_iters=9, power=2.0),
    "CosineAnnealingLR": lambda opt: L.CosineAnnealingLR(opt, T_max=7, eta_min=0.001),
    "ChainedScheduler": lambda opt: L.ChainedScheduler([L.ExponentialLR(opt, gamma=0.95),
                                                        L.CyclicLR(opt, base_lr=0.01, max_lr=0.1, step_size_up=3)]),
    "ReduceLROnPlateau": lambda opt: L.ReduceLROnPlateau(opt, patience=1, factor=0.5),
    "CyclicLR": lambda opt: L.CyclicLR(opt, base_lr=0.01, max_lr=0.1, step_size_up=3, mode="exp_range",
                                       gamma=0.97),
    "CosineAnnealingWarmRestarts": lambda opt: L.CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=2),
    "OneCycleLR": lambda opt: L.OneCycleLR(opt, max_lr=0.2, total_steps=30, anneal_strategy="linear"),
}


def scheduler_classes():
    base = getattr(L, "LRScheduler", L._LRScheduler)
    return {name for name, cls in vars(L).items()
            if inspect.isclass(cls) and cls.__module__ == L.__name__ and not name.startswith("_")
            and (issubclass(cls, base) or cls is L.ReduceLROnPlateau) and cls is not base}


def test_every_scheduler_class_of_the_installed_torch_is_tested():
    assert scheduler_classes() == set(SCHEDULERS)


class Job:
    """A model, SGD with momentum (CyclicLR cycles it) over two param groups, and a scheduler."""

    def __init__(self, name, seed):
        torch.manual_seed(seed)
        self.model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
        self.opt = torch.optim.SGD([{"params": self.model[0].parameters()},
                                    {"params": self.model[1].parameters(), "lr": 0.05}], lr=0.1, momentum=0.9)
        self.scheduler = SCHEDULERS[name](self.opt)
        self.loss = None

    def step(self):
        self.loss = self.model(torch.randn(3, 4)).pow(2).mean()
        self.loss.backward()
        self.opt.step()
        self.opt.zero_grad()
        if isinstance(self.scheduler, L.ReduceLROnPlateau):
            self.scheduler.step(1.0)  # a plateau: the lr drops every patience + 1 steps
        else:
            self.scheduler.step()

    def rates(self):
        return [(g["lr"], g.get("momentum")) for g in self.opt.param_groups]


def without_callables(value):
    """A state_dict with every callable replaced by its type (they are the target's own)."""
    if callable(value) and not isinstance(value, torch.Tensor):
        return type(value).__name__
    if isinstance(value, dict):
        return {k: without_callables(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(without_callables(v) for v in value)
    return value


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_scheduler_captures_and_restores_bitwise(tmp_path, name):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    run = Job(name, seed=0)
    for _ in range(5):
        run.step()
    ckpt.capture(5, model=run.model, optimizer=run.opt, scheduler=run.scheduler, rng=True)
    expected = without_callables(run.scheduler.state_dict())
    after = []
    for _ in range(4):
        run.step()
        after.append(run.rates())

    other = Job(name, seed=1)  # another model and data; the same constructor arguments
    other.step()
    assert ckpt.restore(5, model=other.model, optimizer=other.opt, scheduler=other.scheduler) == 5
    assert first_difference(without_callables(other.scheduler.state_dict()), expected) == ""
    resumed = []
    for _ in range(4):
        other.step()
        resumed.append(other.rates())
    assert resumed == after
    assert first_difference(dict(other.model.state_dict()), dict(run.model.state_dict())) == ""
