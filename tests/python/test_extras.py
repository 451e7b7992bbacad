"""extra= takes plain values besides Stateful objects: numbers, strings,
bools, None, lists, tuples, dicts of them, and tensors; a restore updates
the dict passed (a dict or list value in place)."""

import math

import pytest
import torch

import trainsnap
from kit import first_difference, open_store


def plain():
    return {"epoch": 7, "lr": 0.1 + 0.2, "name": "run-α", "done": False, "best": None,
            "history": [1, 2.5, [3, {"k": None}]], "shape": (2, 3), "ids": {3: "three", 4: "four"},
            "limits": {"low": -math.inf, "high": math.inf}, "ema": torch.arange(6, dtype=torch.bfloat16),
            "counters": {"seen": torch.tensor([1, 2], dtype=torch.int64), "nested": [torch.ones(2, 2)]}}


def test_plain_values_round_trip_exactly_and_the_dict_is_updated(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    saved = plain()
    ckpt.capture(1, extra=saved, rng=False)
    expected = plain()
    target = {"epoch": 0, "lr": 1.0, "name": "", "done": True, "best": 3, "history": ["x"], "shape": None,
              "ids": {}, "limits": {}, "ema": torch.zeros(1), "counters": {}}
    history, limits = target["history"], target["limits"]
    assert ckpt.restore(1, extra=target, rng=False) == 1
    assert first_difference(target, expected) == ""
    assert math.isinf(target["limits"]["low"]) and type(target["shape"]) is tuple
    # dict and list values are updated in place: other references see them.
    assert target["history"] is history and target["limits"] is limits
    # The restored tensors are the caller's own (not views of anything else).
    target["ema"].add_(1)
    assert first_difference(saved["ema"], expected["ema"]) == ""


def test_plain_values_and_stateful_extras_together(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    torch.manual_seed(0)
    ema = torch.nn.Linear(2, 2)
    ckpt.capture(1, model=ema, extra={"ema": ema, "epoch": 3}, rng=False)
    torch.manual_seed(1)
    other = torch.nn.Linear(2, 2)
    extra = {"ema": other, "epoch": 0}
    ckpt.restore(1, model=other, extra=extra, rng=False)
    assert extra["epoch"] == 3 and torch.equal(other.weight, ema.weight)
    with pytest.raises(trainsnap.ContractMismatch) as e:
        ckpt.restore(1, model=other, extra={"ema": 5, "epoch": 0}, rng=False)
    assert str(e.value) == ("restore step 1: extra state `ema`: the snapshot holds a torch.nn.modules.linear.Linear, "
                            "the target is a plain value")
    with pytest.raises(trainsnap.ContractMismatch) as e:
        ckpt.restore(1, model=other, extra={"ema": other, "epoch": other}, rng=False)
    assert str(e.value) == ("restore step 1: extra state `epoch`: the snapshot holds a trainsnap.plain, "
                            "the target is a torch.nn.modules.linear.Linear")


def test_a_value_that_is_not_plain_is_invalid_argument_and_nothing_is_stored(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    for value, message in (({"ids": {1, 2}}, "`ids` is a builtins.set"),
                           ([1, object()], "`1` is a builtins.object"),
                           ({"f": len}, "`f` is a builtins.builtin_function_or_method"),
                           ({(1, 2): 3}, "`` has a key of type tuple")):
        with pytest.raises(trainsnap.InvalidArgument) as e:
            ckpt.capture(1, extra={"bad": value}, rng=False)
        assert str(e.value).startswith(f"capture step 1: extra state `bad`: {message}"), str(e.value)
    assert store.list() == []


def test_a_failed_restore_leaves_the_dict_as_it_was(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    ckpt.capture(1, extra={"a": [1, 2], "b": {"x": 1}}, optimizer=None, rng=False)

    class Refuses:
        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            raise ValueError("no")

    ckpt.capture(2, extra={"a": [1, 2], "b": {"x": 1}, "z": Refuses()}, rng=False)
    a, b = [9], {"y": 2}
    extra = {"a": a, "b": b, "z": Refuses()}
    with pytest.raises(trainsnap.Aborted):
        ckpt.restore(2, extra=extra, rng=False)
    assert extra["a"] is a and a == [9] and extra["b"] is b and b == {"y": 2}
