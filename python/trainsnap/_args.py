"""Argument rules shared by every call: steps, and the one/list/dict shapes
of model=, optimizer= and scheduler=."""

import operator

from ._trainsnap import InvalidArgument

# The C++ API's steps are int64: every integer in [STEP_MIN, STEP_MAX].
STEP_MIN = -(1 << 63)
STEP_MAX = (1 << 63) - 1


def step_arg(step):
    """`step` as an int. InvalidArgument for a bool (True is no step 1), for
    anything that is not an integer (int() made 2.5 or "2" mean step 2, so
    that a typo could restore, roll back to or delete another snapshot than
    the one meant) and for an integer outside int64, the C++ API's range."""
    if isinstance(step, bool):
        raise InvalidArgument(f"a step is an integer, not bool {step!r}")
    try:
        value = operator.index(step)
    except TypeError:
        raise InvalidArgument(f"a step is an integer, not {type(step).__name__} {step!r}") from None
    if not STEP_MIN <= value <= STEP_MAX:
        raise InvalidArgument(f"step {value} is outside the steps trainsnap stores, "
                              f"[-2**63, 2**63 - 1] (a signed 64-bit integer)")
    return value


def is_step(value):
    """Whether `value` is a step step_arg accepts (`step in store`)."""
    try:
        step_arg(value)
    except InvalidArgument:
        return False
    return True


def named(value, what):
    """model=/optimizer=/scheduler= as {key: object}: one object -> {"": obj}
    (the unnamed part), a list or tuple -> {"0": ..., "1": ...} (positions),
    a dict -> its keys (non-empty strings without '/' or ':'). None -> {}."""
    if value is None:
        return {}
    if isinstance(value, dict):
        out = {}
        for key, obj in value.items():
            if not isinstance(key, str) or not key or "/" in key or ":" in key:
                raise InvalidArgument(f"{what} key {key!r}: a non-empty str without '/' or ':'")
            if obj is None:
                raise InvalidArgument(f"{what} `{key}` is None")
            out[key] = obj
        return out
    if isinstance(value, (list, tuple)):
        for i, obj in enumerate(value):
            if obj is None:
                raise InvalidArgument(f"{what} {i} is None")
        return {str(i): obj for i, obj in enumerate(value)}
    return {"": value}


def unwrap(module):
    """The module under nn.DataParallel / DistributedDataParallel wrappers:
    a snapshot names parameters without their "module." prefix, so that it
    moves between wrapped and bare models."""
    from torch import nn
    while isinstance(module, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
        module = module.module
    return module
