"""The binding's capture/restore contract: bitwise round trips of the whole
Python training state, errors that name the problem and leave every live
object unchanged, and one real failure per exception class."""

import builtins
import random
import subprocess
import threading

import numpy as np
import pytest
import torch
from torch import nn

import trainsnap
from kit import open_store
from loop import Run, first_difference


def train(run, n):
    for _ in range(n):
        run.micro_step()


@pytest.mark.parametrize("config", ["adamw", "sgd"])
def test_mid_window_snapshot_restores_bitwise_and_training_continues_identically(tmp_path, config):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    run = Run(config)
    train(run, 6)  # one window of 4, then 2 micro-steps into the next
    assert run.window.micro_step == 2
    handle = ckpt.capture_async(6, **run.state())
    expected = run.snapshot()
    # The staging copy was taken: changing everything now does not reach the snapshot.
    train(run, 3)
    handle.wait()
    ckpt.flush()
    continued = run.snapshot()

    other = Run(config, seed=7)  # different weights, data order and RNG
    train(other, 5)
    assert first_difference(other.snapshot(), expected) != ""
    assert ckpt.restore(6, **other.state()) == 6
    assert first_difference(other.snapshot(), expected) == ""
    train(other, 3)
    assert first_difference(other.snapshot(), continued) == ""


def three_snapshots(tmp_path):
    """A store with steps 1-3 of a Run trained one step before each, its Checkpointer and the Run."""
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    run = Run()
    for step in range(1, 4):
        train(run, 1)
        ckpt.capture(step, **run.state())
    return store, ckpt, run


def test_a_step_that_is_not_an_integer_is_refused_and_changes_nothing(tmp_path):
    # int() made 2.5 or "2" mean step 2: a typo could then roll back to,
    # restore or delete another snapshot than the one meant.
    store, ckpt, run = three_snapshots(tmp_path)
    target = Run(seed=3)
    before = target.snapshot()
    for bad in (2.5, "2", None):
        with pytest.raises(trainsnap.InvalidArgument, match="a step is an integer"):
            ckpt.restore(bad, discard_later=True, **target.state())
        with pytest.raises(trainsnap.InvalidArgument, match="a step is an integer"):
            store.delete(bad)
        with pytest.raises(trainsnap.InvalidArgument, match="a step is an integer"):
            store.info(bad)
        with pytest.raises(trainsnap.InvalidArgument, match="a step is an integer"):
            ckpt.capture(bad, **run.state())
    for bad in (2.5, "2"):  # None is "every snapshot" here
        with pytest.raises(trainsnap.InvalidArgument, match="a step is an integer"):
            store.verify(bad)
    assert [i["step"] for i in store.list()] == [1, 2, 3]
    assert first_difference(target.snapshot(), before) == ""
    assert store.info(2)["step"] == 2 and store.verify(np.int64(2))["ok"]  # integers still work


def test_capture_is_capture_async_then_wait_and_restore_latest_returns_the_step(tmp_path):
    store, ckpt, run = three_snapshots(tmp_path)
    assert [i["step"] for i in store.list()] == [1, 2, 3]
    assert store.latest() == 3
    assert 2 in store and 4 not in store and -1 not in store
    assert 2.5 not in store and "2" not in store and None not in store  # not steps: never truncated to 2
    expected = run.snapshot()
    target = Run(seed=3)
    assert ckpt.restore_latest(**target.state()) == 3
    assert first_difference(target.snapshot(), expected) == ""
    report = store.verify()
    assert report["ok"] and report["snapshots"] == 3 and report["problems"] == []


def test_optimizer_state_is_keyed_by_parameter_name_not_position(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store, model_state="trainable")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    params = dict(model.named_parameters())
    opt = torch.optim.Adam([params["1.weight"], params["0.weight"], params["0.bias"], params["1.bias"]], lr=0.1)
    model(torch.randn(5, 3)).sum().backward()
    opt.step()
    opt.zero_grad()
    ckpt.capture(1, model=model, optimizer=opt, rng=False)
    expected = opt.state_dict()

    torch.manual_seed(1)
    model2 = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    p2 = dict(model2.named_parameters())
    opt2 = torch.optim.Adam([p2["1.weight"], p2["0.weight"], p2["0.bias"], p2["1.bias"]], lr=0.5)
    ckpt.restore(1, model=model2, optimizer=opt2, rng=False)
    assert first_difference(opt2.state_dict(), expected) == ""
    # Index 0 is 1.weight in both: its exp_avg has 1.weight's shape.
    assert opt2.state_dict()["state"][0]["exp_avg"].shape == (2, 4)
    assert opt2.param_groups[0]["lr"] == 0.1

    # restore_optimizer_options=False: the state comes back, the target's lr stays.
    opt2.param_groups[0]["lr"] = 0.25
    ckpt.restore(1, model=model2, optimizer=opt2, rng=False, restore_optimizer_options=False)
    assert opt2.param_groups[0]["lr"] == 0.25
    assert first_difference(opt2.state_dict()["state"], expected["state"]) == ""

    # The same parameters in another order: named, not matched by position.
    opt3 = torch.optim.Adam([p2["0.weight"], p2["1.weight"], p2["0.bias"], p2["1.bias"]], lr=0.5)
    with pytest.raises(trainsnap.ContractMismatch) as e:
        ckpt.restore(1, model=model2, optimizer=opt3, rng=False)
    assert "param group 0, parameter 0: `1.weight` in the snapshot, `0.weight` in the target" in str(e.value)


def test_python_and_numpy_rng_round_trip(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    torch.manual_seed(5)
    random.seed(5)
    np.random.seed(5)
    ckpt.capture(1, rng=True)
    expected = (torch.rand(3), random.random(), np.random.rand())
    torch.rand(7), random.random(), np.random.rand(4)
    ckpt.restore(1, rng=True)
    got = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(got[0], expected[0]) and got[1] == expected[1] and got[2] == expected[2]
    # rng=False leaves the generators alone.
    before = (torch.get_rng_state(), random.getstate())
    ckpt.restore(1, rng=False)
    assert torch.equal(torch.get_rng_state(), before[0]) and random.getstate() == before[1]


def everything(run):
    return run.snapshot()


def test_wrong_model_shapes_raise_contract_mismatch_and_change_nothing(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    run = Run()
    train(run, 5)
    ckpt.capture(5, **run.state())

    other = Run(seed=9)
    train(other, 2)
    other.model.norm.weight = nn.Parameter(torch.ones(17))
    before = everything(other)
    with pytest.raises(trainsnap.ContractMismatch) as e:
        ckpt.restore(5, **other.state())
    assert "norm.weight" in str(e.value) and "[16]" in str(e.value) and "[17]" in str(e.value)
    assert first_difference(everything(other), before) == ""


def test_wrong_optimizer_type_raises_contract_mismatch_and_changes_nothing(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    run = Run("adamw")
    train(run, 5)
    ckpt.capture(5, **run.state())
    other = Run("sgd", seed=4)
    train(other, 6)
    before = everything(other)
    with pytest.raises(trainsnap.ContractMismatch) as e:
        ckpt.restore(5, **other.state())
    assert str(e.value) == ("restore step 5: extra state `python:optimizer`: the snapshot holds a "
                            "torch.optim.adamw.AdamW, the target is a torch.optim.sgd.SGD")
    # The cursor ("data", loaded before the optimizer) was rolled back too.
    assert first_difference(everything(other), before) == ""


def test_refusing_extra_rolls_back_the_optimizer_and_scheduler(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    run = Run()
    train(run, 6)
    ckpt.capture(6, **run.state())

    class Refuses:
        def state_dict(self):
            return {"x": 1}

        def load_state_dict(self, state):
            raise ValueError("not today")

    other = Run(seed=2)
    train(other, 5)
    before = everything(other)
    state = other.state()
    ckpt.capture(100, **{**run.state(), "extra": {"data": run.cursor, "zz": Refuses()}})
    state["extra"] = {"data": other.cursor, "zz": Refuses()}
    with pytest.raises(trainsnap.Aborted) as e:
        ckpt.restore(100, **state)
    assert str(e.value) == "restore step 100: extra state `zz`: ValueError: not today"
    assert first_difference(everything(other), before) == ""


def test_missing_or_extra_parts_are_named(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    run = Run()
    train(run, 2)
    ckpt.capture(2, **run.state())
    other = Run(seed=1)
    state = other.state()
    del state["scheduler"]
    with pytest.raises(trainsnap.ContractMismatch) as e:
        ckpt.restore(2, **state)
    assert "extra state `python:scheduler`: in the snapshot, absent from the target" in str(e.value)
    state = other.state()
    state["extra"] = {}
    with pytest.raises(trainsnap.ContractMismatch) as e:
        ckpt.restore(2, **state)
    assert "extra state `data`: in the snapshot, absent from the target" in str(e.value)
    state = other.state()
    state["accumulation"] = None
    with pytest.raises(trainsnap.ContractMismatch) as e:
        ckpt.restore(2, **state)
    assert "accumulation window: in the snapshot, absent from the target" in str(e.value)


# --- each exception class, raised by a real failure -------------------------

def test_not_found_for_a_step_that_is_not_stored(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    with pytest.raises(trainsnap.NotFound) as e:
        ckpt.restore_latest(rng=False)
    assert "holds no snapshot" in str(e.value)
    ckpt.capture(1, rng=False)
    with pytest.raises(trainsnap.NotFound):
        ckpt.restore(2, rng=False)
    assert issubclass(trainsnap.NotFound, trainsnap.Error) and trainsnap.NotFound.code == "NotFound"


def test_invalid_argument_for_a_frozen_parameter_holding_a_gradient(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    model = nn.Linear(3, 3)
    model.weight.requires_grad_(False)
    model.weight.grad = torch.ones(3, 3)
    with pytest.raises(trainsnap.InvalidArgument) as e:
        ckpt.capture(1, model=model)
    assert "weight" in str(e.value) and "gradient" in str(e.value)
    assert store.list() == []


def test_already_exists_for_a_step_captured_twice(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    ckpt.capture(1, rng=False)
    with pytest.raises(trainsnap.AlreadyExists) as e:
        ckpt.capture(1, rng=False)
    assert str(e.value).startswith("capture step 1: already stored")
    ckpt.flush()  # raised once: by capture, not again by flush


def test_not_supported_for_a_meta_parameter_and_for_unstorable_state(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    with pytest.raises(trainsnap.NotSupported) as e:
        ckpt.capture(1, model=nn.Linear(2, 2, device="meta"), rng=False)
    assert "meta" in str(e.value)

    class Odd:
        def state_dict(self):
            return {"ids": {1, 2}}

        def load_state_dict(self, state):
            pass

    with pytest.raises(trainsnap.NotSupported) as e:
        ckpt.capture(2, extra={"odd": Odd()}, rng=False)
    assert str(e.value) == ("capture step 2: extra state `odd`: `ids` is a builtins.set, which trainsnap "
                            "cannot store (state_dict() values: tensors, numbers, strings, None, and lists/tuples/dicts of them)")


def test_busy_when_another_writer_holds_the_store(tmp_path):
    path = str(tmp_path / "held")
    writer = trainsnap.Store(path)
    with pytest.raises(trainsnap.Busy) as e:
        trainsnap.Store(path)
    assert "held by another writer" in str(e.value)
    reader = trainsnap.Store.open_read_only(path)  # readers may inspect it meanwhile
    assert reader.list() == [] and writer.latest() is None


def test_io_error_when_the_store_path_is_under_a_file(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(trainsnap.IOError):
        trainsnap.Store(str(tmp_path / "file" / "store"))


def test_corruption_when_a_chunk_on_disk_is_damaged(tmp_path):
    path = tmp_path / "store"
    store = trainsnap.Store(str(path), compress=False)
    ckpt = trainsnap.Checkpointer(store)
    torch.manual_seed(0)
    model = nn.Linear(256, 1024, bias=False)  # one 1 MiB chunk
    ckpt.capture(1, model=model, rng=False)
    ckpt.close()
    store.close()
    packs = [f for f in (path / "packs").iterdir() if f.suffix == ".pack" and f.stat().st_size > 0]
    assert packs, sorted(p.name for p in path.iterdir())
    for f in packs:
        data = bytearray(f.read_bytes())
        data[len(data) // 2] ^= 0x40
        f.write_bytes(bytes(data))
    store = trainsnap.Store(str(path), compress=False)
    ckpt = trainsnap.Checkpointer(store)
    before = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.add_(1)
    expected = model.weight.detach().clone()
    with pytest.raises(trainsnap.Corruption) as e:
        ckpt.restore(1, model=model, rng=False)
    assert "tensor `weight` role param: chunk 0" in str(e.value) and "hash mismatch" in str(e.value)
    assert torch.equal(model.weight, expected) and not torch.equal(expected, before)
    assert not store.verify()["ok"]


def test_no_space_on_a_full_file_system(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)]).returncode != 0:
        pytest.fail("mounting a tmpfs needs root (CI runs the tests as root)")
    try:
        store = trainsnap.Store(str(mount / "store"), compress=False, sync=True)
        ckpt = trainsnap.Checkpointer(store)
        torch.manual_seed(0)
        model = nn.Linear(1024, 1024, bias=False)  # 4 MiB of random floats: more than the disk holds
        with pytest.raises(trainsnap.NoSpace):
            ckpt.capture(1, model=model, rng=False)
        ckpt.close()
        store.close()
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_store_close_is_refused_while_a_checkpointer_uses_it(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    with pytest.raises(trainsnap.Busy) as e:
        store.close()
    assert "1 Checkpointer(s) still use it" in str(e.value)
    ckpt.close()
    store.close()
    with pytest.raises(trainsnap.InvalidArgument):
        store.latest()


def test_rollback_to_discards_later_steps_so_they_can_be_captured_again(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    run = Run()
    snapshots = {}
    for step in range(1, 4):
        train(run, 1)
        ckpt.capture(step, **run.state())
        snapshots[step] = run.snapshot()
    assert ckpt.rollback_to(1, **run.state()) == 1
    assert [i["step"] for i in store.list()] == [1]
    assert first_difference(run.snapshot(), snapshots[1]) == ""
    train(run, 1)
    ckpt.capture(2, **run.state())
    assert first_difference(run.snapshot(), snapshots[2]) == ""  # the same trajectory again
    assert store.latest() == 2


def test_options_are_checked(tmp_path):
    store = open_store(tmp_path)
    with pytest.raises(trainsnap.InvalidArgument) as e:
        trainsnap.Checkpointer(store, model_state="adapters")
    assert str(e.value) == 'model_state must be "trainable", "trainable_and_buffers" or "full", not "adapters"'
    ckpt = trainsnap.Checkpointer(store)
    with pytest.raises(trainsnap.InvalidArgument) as e:
        ckpt.capture(1, extra={"python:x": Run().cursor})
    assert str(e.value) == "extra key 'python:x': a str not starting with \"python:\""
    with pytest.raises(trainsnap.InvalidArgument) as e:
        ckpt.capture(1, optimizer=torch.optim.SGD([nn.Parameter(torch.ones(2))], lr=0.1))
    assert str(e.value) == ("capture step 1: extra state `python:optimizer`: param group 0 holds a tensor (2,) "
                            "that is no parameter of the model")
    assert store.list() == []


class Gate:
    """An extra whose load_state_dict blocks until released: holds a restore in flight."""

    def __init__(self):
        self.entered = threading.Event()
        self.release = threading.Event()
        self.n = 1

    def state_dict(self):
        return {"n": self.n}

    def load_state_dict(self, state):
        self.entered.set()
        assert self.release.wait(30)
        self.n = state["n"]


def check_close_during_restore(tmp_path, ckpt, store, gate):
    assert gate.entered.wait(30)
    # Both wrappers close while the restore runs in the C++ core; the objects
    # live until it returns.
    ckpt.close()
    with pytest.raises(trainsnap.InvalidArgument) as e:
        ckpt.flush()
    assert str(e.value) == "the Checkpointer is closed"
    store.close()
    with pytest.raises(trainsnap.InvalidArgument) as e:
        store.latest()
    assert str(e.value) == f"store `{tmp_path / 'store'}` is closed"
    # The C++ Store is still open under the restore: a second writer is refused.
    with pytest.raises(trainsnap.Busy):
        open_store(tmp_path)


def test_checkpointer_and_store_close_from_another_thread_during_a_restore(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    run = Run()
    train(run, 3)
    ckpt.capture(3, **{**run.state(), "extra": {"data": run.cursor, "gate": Gate()}})
    expected = run.snapshot()

    other = Run(seed=5)
    train(other, 2)
    gate = Gate()
    gate.n = 2
    state = other.state()
    state["extra"] = {"data": other.cursor, "gate": gate}
    result = {}
    restoring = threading.Thread(target=lambda: result.update(step=ckpt.restore(3, **state)))
    restoring.start()
    try:
        check_close_during_restore(tmp_path, ckpt, store, gate)
    finally:
        gate.release.set()
        restoring.join(30)
    assert not restoring.is_alive()
    assert result == {"step": 3}
    assert gate.n == 1
    assert first_difference(other.snapshot(), expected) == ""
    # The restore's end released the last reference: the store is closed.
    again = open_store(tmp_path)
    assert again.latest() == 3


def test_store_close_while_another_thread_verifies_and_lists(tmp_path):
    store = open_store(tmp_path, compress=False)
    ckpt = trainsnap.Checkpointer(store, model_state="full")
    for step in range(1, 9):
        torch.manual_seed(step)
        ckpt.capture(step, model=nn.Linear(512, 512), rng=False)
    ckpt.close()
    store.close()
    # Rounds, so that close() lands inside verify() or list() (it freed the
    # RocksDB instance under them: an abort within a few rounds).
    for _ in range(30):
        store = open_store(tmp_path)
        seen, errors = [], []
        calls = threading.Event()

        def loop():
            try:
                while True:
                    report = store.verify()
                    seen.append((report["ok"], report["snapshots"], report["problems"]))
                    calls.set()
                    seen.append([i["step"] for i in store.list()])
            except trainsnap.Error as e:
                errors.append(e)
            finally:
                calls.set()

        worker = threading.Thread(target=loop)
        worker.start()
        assert calls.wait(30)
        store.close()
        worker.join(60)
        assert not worker.is_alive()
        assert len(errors) == 1 and type(errors[0]) is trainsnap.InvalidArgument
        assert str(errors[0]) == f"store `{tmp_path / 'store'}` is closed"
        assert seen and all(s in [(True, 8, []), list(range(1, 9))] for s in seen)
    assert open_store(tmp_path).latest() == 8


class WithCache(nn.Module):
    def __init__(self, cache_size):
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.register_buffer("cache", torch.zeros(cache_size), persistent=False)
        self.register_buffer("count", torch.tensor(7))


def test_non_persistent_buffers_are_left_out_like_state_dict_does(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    torch.manual_seed(0)
    model = WithCache(4)
    assert sorted(model.state_dict()) == ["count", "lin.bias", "lin.weight"]
    ckpt.capture(1, model=model, rng=False)
    assert store.info(1)["tensors"] == 3

    torch.manual_seed(1)
    target = WithCache(9)  # the cache's shape differs: it is no part of the contract
    target.cache.fill_(5)
    target.count.fill_(0)
    assert ckpt.restore(1, model=target, rng=False) == 1
    assert torch.equal(target.lin.weight, model.lin.weight) and torch.equal(target.lin.bias, model.lin.bias)
    assert target.count.item() == 7
    assert torch.equal(target.cache, torch.full((9,), 5.0))


class Interrupting:
    """An extra whose state_dict / load_state_dict raise a given BaseException."""

    def __init__(self):
        self.on_save = None
        self.on_load = None
        self.x = 1

    def state_dict(self):
        if self.on_save is not None:
            raise self.on_save
        return {"x": self.x}

    def load_state_dict(self, state):
        if self.on_load is not None:
            raise self.on_load
        self.x = state["x"]


@pytest.mark.parametrize("make", [lambda: KeyboardInterrupt(), lambda: SystemExit(3)])
def test_keyboard_interrupt_and_system_exit_in_an_adapter_propagate_as_they_are(tmp_path, make):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    run = Run()
    train(run, 2)
    ckpt.capture(2, **{**run.state(), "extra": {"data": run.cursor, "zz": Interrupting()}})

    other = Run(seed=3)
    train(other, 1)
    before = everything(other)
    zz = Interrupting()
    zz.x = 5
    zz.on_load = make()
    state = other.state()
    state["extra"] = {"data": other.cursor, "zz": zz}
    with pytest.raises(type(zz.on_load)) as e:
        ckpt.restore(2, **state)
    assert e.value is zz.on_load
    assert first_difference(everything(other), before) == "" and zz.x == 5  # rolled back first

    zz.on_load = None
    zz.on_save = make()
    with pytest.raises(type(zz.on_save)) as e:
        ckpt.capture(3, **state)
    assert e.value is zz.on_save
    # The failed capture is still the first error since the last flush.
    with pytest.raises(trainsnap.Aborted) as e:
        ckpt.flush()
    assert str(e.value) == f"capture step 3: extra state `zz`: {type(zz.on_save).__name__}: {zz.on_save}"
    assert [i["step"] for i in store.list()] == [2]


def test_star_import_does_not_shadow_the_builtin_io_error():
    namespace = {}
    exec("from trainsnap import *", namespace)
    assert "IOError" not in namespace
    assert namespace["Busy"] is trainsnap.Busy and namespace["Store"] is trainsnap.Store
    assert trainsnap.IOError is not builtins.IOError
    assert issubclass(trainsnap.IOError, trainsnap.Error) and trainsnap.IOError.code == "IOError"


class CountingLinear(nn.Linear):
    """An nn.Module extra (an EMA copy, say) that counts its loads."""

    def __init__(self):
        super().__init__(4, 3)
        self.loads = 0

    def load_state_dict(self, state, strict=True):
        self.loads += 1
        return super().load_state_dict(state, strict)


def test_an_nn_module_extra_loaded_in_place_is_rolled_back_when_the_optimizer_is_refused(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    run = Run("adamw")
    train(run, 4)
    torch.manual_seed(11)
    ema = CountingLinear()
    ckpt.capture(4, **{**run.state(), "extra": {"data": run.cursor, "ema": ema}})

    other = Run("sgd", seed=4)
    train(other, 3)
    torch.manual_seed(12)
    other_ema = CountingLinear()
    assert not torch.equal(other_ema.weight, ema.weight)
    before = everything(other)
    before_ema = {k: v.clone() for k, v in other_ema.state_dict().items()}
    state = other.state()
    state["extra"] = {"data": other.cursor, "ema": other_ema}
    with pytest.raises(trainsnap.ContractMismatch) as e:
        ckpt.restore(4, **state)
    assert str(e.value) == ("restore step 4: extra state `python:optimizer`: the snapshot holds a "
                            "torch.optim.adamw.AdamW, the target is a torch.optim.sgd.SGD")
    # "ema" sorts before "python:optimizer": it was loaded (in place, into its
    # live parameters), then given its previous state back.
    assert other_ema.loads == 2
    after_ema = other_ema.state_dict()
    assert sorted(after_ema) == sorted(before_ema)
    for name, value in before_ema.items():
        assert torch.equal(after_ema[name].view(torch.int32), value.view(torch.int32)), name
    assert first_difference(everything(other), before) == ""


def test_an_extra_key_with_a_slash_is_refused_at_capture(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    with pytest.raises(trainsnap.InvalidArgument) as e:
        ckpt.capture(1, extra={"a/b": Run().cursor}, rng=False)
    assert str(e.value) == ("capture step 1: extra state `a/b`: the key contains '/', which tensor IDs reserve "
                            "(\"extra:<key>/<tensor>\")")
    ckpt.flush()  # raised once, by capture
    assert store.list() == []
