"""The user's objects of one capture or restore as the C++ core takes them:
models (key -> nn.Module) and state adapters (tensor_extra key -> adapter).

Keys: a model given alone is the unnamed model; in a list or dict each has
its key ("0", "1", ... or the dict's), which qualifies its parameter names
("G/fc.weight"). Optimizers and schedulers are stored under
"python:optimizer" / "python:scheduler" when given alone, else
"python:optimizer:<key>" / "python:scheduler:<key>"; Python's RNG under
"python:rng"; every extra under its own key.
"""

import torch

from . import _state
from ._args import named, unwrap
from ._trainsnap import InvalidArgument

OPTIMIZER = "python:optimizer"
SCHEDULER = "python:scheduler"
RNG = "python:rng"


def _adapter_key(base, key):
    return base if key == "" else f"{base}:{key}"


def parameter_names(models):
    """id(tensor) -> qualified name, over `models` in the C++ contract's
    order (the unnamed model, then the named ones by key): a parameter two
    models share is named through the first."""
    names = {}
    for key in sorted(models):
        for name, p in models[key].named_parameters():
            names.setdefault(id(p), name if key == "" else f"{key}/{name}")
    return names


def resumable_sampler_of(loader):
    """The trainsnap.ResumableSampler a DataLoader draws from, or None."""
    from ._sampler import ResumableSampler
    for sampler in (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        if isinstance(sampler, ResumableSampler):
            return sampler
    return None


def _extra_adapter(extra, key):
    obj = extra[key]
    if isinstance(obj, torch.utils.data.DataLoader):
        sampler = resumable_sampler_of(obj)
        if sampler is None:
            raise InvalidArgument(f"extra `{key}`: a DataLoader's position is its sampler's; give it a "
                                  "trainsnap.ResumableSampler (sampler=...)")
        return _state.StatefulAdapter(f"extra `{key}`", sampler)
    if callable(getattr(obj, "state_dict", None)) or callable(getattr(obj, "load_state_dict", None)):
        return _state.StatefulAdapter(f"extra `{key}`", obj)
    return _state.PlainValueAdapter(extra, key)


class Parts:
    """models: {key: nn.Module} ("" = the unnamed model), adapters: {key: adapter}.
    partial (a partial restore's target): without rng, Python's generators are
    left out of the target, so that their state is neither read nor required."""

    def __init__(self, model=None, optimizer=None, scheduler=None, extra=None, rng=True,
                 restore_optimizer_options=True, partial=False):
        self.models = {}
        for key, module in named(model, "model").items():
            module = unwrap(module)
            if not isinstance(module, torch.nn.Module):
                raise InvalidArgument(f"model{'' if key == '' else ' `' + key + '`'}: a {_state.type_name(module)} "
                                      "is not a torch.nn.Module")
            self.models[key] = module
        names = parameter_names(self.models)
        self.adapters = {RNG: _state.PythonRngAdapter(bool(rng))} if rng or not partial else {}
        for key, opt in named(optimizer, "optimizer").items():
            kind = "optimizer" if key == "" else f"optimizer `{key}`"
            self.adapters[_adapter_key(OPTIMIZER, key)] = _state.OptimizerAdapter(kind, opt, names,
                                                                                  restore_optimizer_options)
        for key, sched in named(scheduler, "scheduler").items():
            kind = "scheduler" if key == "" else f"scheduler `{key}`"
            self.adapters[_adapter_key(SCHEDULER, key)] = _state.StatefulAdapter(kind, sched)
        if extra is not None and not isinstance(extra, dict):
            raise InvalidArgument(f"extra: a dict of name -> state, not a {_state.type_name(extra)}")
        for key in (extra or {}):
            if not isinstance(key, str) or key.startswith("python:"):
                raise InvalidArgument(f"extra key {key!r}: a str not starting with \"python:\"")
            self.adapters[key] = _extra_adapter(extra, key)
