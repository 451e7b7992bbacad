"""trainsnap.ResumableSampler: the C++ sampler's order (same Mix, same
orders), the distributed split of a global position and its resize, and the
consumed count with DataLoader workers prefetching ahead."""

import os
import re

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, TensorDataset

import trainsnap
from trainsnap import _sampler

SAMPLER_CC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "data", "sampler.cc")


def test_mix_uses_the_constants_of_the_cpp_mix():
    source = open(SAMPLER_CC).read()
    body = re.search(r"uint64_t Mix\(uint64_t x\) \{(.*?)\n\}", source, re.S).group(1)
    constants = [int(c, 16) for c in re.findall(r"0x([0-9a-fA-F]+)ULL", body)]
    shifts = [int(s) for s in re.findall(r">> (\d+)", body)]
    assert constants == [_sampler.MIX_INCREMENT, *_sampler.MIX_MULTIPLIERS]
    assert shifts == list(_sampler.MIX_SHIFTS)
    # SplitMix64's published first outputs for state 0 (x = 0, 1*golden, 2*golden).
    assert _sampler.mix(0) == 0xE220A8397B1DCDAF
    assert _sampler.mix(_sampler.MIX_INCREMENT) == 0x6E789E6AA1B965F4


# Printed by the C++ trainsnap::ResumableSampler (src/data/sampler.cc at
# commit 784948c): `ResumableSampler s(n, seed, true)`, then per epoch
# `s.reset(); s.next(n)`.
CPP_ORDERS = {
    (10, 0, 0): [1, 5, 0, 4, 9, 7, 8, 3, 6, 2],
    (10, 0, 1): [0, 8, 7, 9, 1, 5, 4, 2, 3, 6],
    (10, 0, 2): [3, 9, 8, 6, 0, 4, 1, 2, 7, 5],
    (7, 42, 0): [2, 4, 6, 0, 3, 1, 5],
    (7, 42, 1): [6, 5, 3, 4, 2, 1, 0],
    (12, 2 ** 64 - 1, 0): [9, 1, 5, 10, 11, 7, 3, 0, 2, 6, 8, 4],
}


def test_orders_are_the_cpp_samplers():
    for (n, seed, epoch), order in CPP_ORDERS.items():
        assert _sampler.epoch_order(n, seed, epoch).tolist() == order
    sampler = trainsnap.ResumableSampler(range(10), seed=0)
    assert [list(sampler) for _ in range(3)] == [CPP_ORDERS[(10, 0, e)] for e in range(3)]
    assert sampler.epoch == 2
    assert list(trainsnap.ResumableSampler(range(5), shuffle=False)) == [0, 1, 2, 3, 4]
    # The formula for any (seed, epoch, n): randperm from mix(seed ^ mix(epoch)).
    g = torch.Generator()
    g.manual_seed(_sampler.mix(123 ^ _sampler.mix(4)))
    assert _sampler.epoch_order(1000, 123, 4).tolist() == torch.randperm(1000, generator=g).tolist()
    state = torch.get_rng_state()
    list(trainsnap.ResumableSampler(range(100), seed=5))
    assert torch.equal(torch.get_rng_state(), state)  # torch's global generator is never drawn from


def test_ranks_split_a_global_position_and_a_resize_repeats_and_skips_nothing():
    n = 23
    order = _sampler.epoch_order(n, 9, 0).tolist()
    ranks = [trainsnap.ResumableSampler(range(n), seed=9, rank=r, world_size=3) for r in range(3)]
    iterators = [iter(s) for s in ranks]
    taken = [[next(it) for _ in range(4)] for it in iterators]  # every rank consumed 4
    for r in range(3):
        assert taken[r] == [order[r + 3 * j] for j in range(4)]
        assert ranks[r].state_dict()["position"] == 12
    assert sorted(sum(taken, [])) == sorted(order[:12])
    state = ranks[1].state_dict()
    # Resumed on 2 ranks: rank r takes order[12 + r + 2j], floor((23 - 12) / 2) = 5 each.
    resized = [trainsnap.ResumableSampler(range(n), seed=9, rank=r, world_size=2) for r in range(2)]
    for s in resized:
        s.load_state_dict(state)
    rest = [list(s) for s in resized]
    assert rest == [[order[12 + r + 2 * j] for j in range(5)] for r in range(2)]
    consumed = sum(taken, []) + sum(rest, [])
    # Every sample but the tail of 1 (dropped), once.
    assert len(consumed) == len(set(consumed)) == 22 and sorted(consumed) == sorted(order[:22])
    assert all(len(s) == n // 3 for s in (trainsnap.ResumableSampler(range(n), rank=r, world_size=3) for r in range(3)))
    # The next epoch after a resize: every rank starts at position 0 of epoch 1.
    assert [s.epoch for s in resized] == [0, 0] and resized[0].state_dict()["position"] == 22
    assert list(resized[0]) == _sampler.epoch_order(n, 9, 1).tolist()[0:22:2]


def loader(sampler, data, workers, **kw):
    return DataLoader(data, sampler=sampler, num_workers=workers, generator=torch.Generator().manual_seed(0), **kw)


@pytest.mark.parametrize("workers", [0, 2])
def test_the_position_is_what_the_loop_consumed_not_what_the_workers_prefetched(workers):
    data = TensorDataset(torch.arange(30))
    whole = [int(x) for (batch,) in loader(trainsnap.ResumableSampler(data, seed=1), data, workers, batch_size=4)
             for x in batch]
    sampler = trainsnap.ResumableSampler(data, seed=1)
    it = iter(loader(sampler, data, workers, batch_size=4, prefetch_factor=2) if workers else
              loader(sampler, data, workers, batch_size=4))
    first = [int(x) for _ in range(3) for x in next(it)[0]]
    state = sampler.state_dict()
    assert (state["epoch"], state["position"]) == (0, 12)
    assert trainsnap.ResumableSampler(data, seed=1).state_dict()["position"] == 0
    resumed = trainsnap.ResumableSampler(data, seed=7)  # the state's seed wins, as in C++
    resumed.load_state_dict(state)
    rest = [int(x) for (batch,) in loader(resumed, data, workers, batch_size=4) for x in batch]
    assert first + rest == whole
    assert resumed.state_dict()["position"] == 30
    del it


def test_batch_size_none_drop_last_and_direct_iteration():
    data = TensorDataset(torch.arange(10))
    sampler = trainsnap.ResumableSampler(data, seed=3)
    order = _sampler.epoch_order(10, 3, 0).tolist()
    it = iter(loader(sampler, data, 2, batch_size=None))  # no batching: one sample per item
    assert [int(next(it)[0]) for _ in range(3)] == order[:3]
    assert sampler.state_dict()["position"] == 3
    del it
    sampler = trainsnap.ResumableSampler(data, seed=3)
    batches = list(loader(sampler, data, 2, batch_size=4, drop_last=True))
    assert len(batches) == 2 and sampler.state_dict()["position"] == 8
    direct = trainsnap.ResumableSampler(data, seed=3)
    it = iter(direct)
    assert [next(it) for _ in range(4)] == order[:4] and direct.position == 4


def test_a_custom_batch_sampler_with_workers_is_refused_at_state_dict():
    data = TensorDataset(torch.arange(10))
    sampler = trainsnap.ResumableSampler(data)
    it = iter(DataLoader(data, batch_sampler=BatchSampler(sampler, 3, False), num_workers=0))
    next(it)
    assert sampler.state_dict()["position"] == 3  # no workers: nothing is fetched ahead

    class Pairs:
        def __init__(self, inner):
            self.inner = inner

        def __iter__(self):
            batch = []
            for index in self.inner:
                batch.append(index)
                if len(batch) == 2:
                    yield batch
                    batch = []

        def __len__(self):
            return len(self.inner) // 2

    sampler = trainsnap.ResumableSampler(data)
    it = iter(DataLoader(data, batch_sampler=Pairs(sampler), num_workers=2))
    next(it)
    with pytest.raises(trainsnap.NotSupported, match="custom batch_sampler"):
        sampler.state_dict()
    del it


def test_state_checks_set_epoch_and_an_epoch_boundary():
    sampler = trainsnap.ResumableSampler(range(6), seed=2)
    state = sampler.state_dict()
    assert state == {"format": 1, "size": 6, "seed": 2, "shuffle": True, "epoch": 0, "position": 0}
    for bad, message in (({**state, "size": 7}, "state for a dataset of 7 samples, this sampler has 6"),
                         ({**state, "position": 7}, "state out of range"),
                         ({**state, "format": 2}, "a state of format 1"),
                         ({**state, "seed": -1}, "seed must be an integer in [0, 2**64)")):
        with pytest.raises(trainsnap.InvalidArgument) as e:
            sampler.load_state_dict(bad)
        assert message in str(e.value)
    assert sampler.state_dict() == state
    sampler.load_state_dict({**state, "epoch": 4, "position": 6})  # a finished epoch: the next one's start
    assert (sampler.epoch, sampler.position) == (5, 0)
    sampler.load_state_dict({**state, "epoch": 4, "position": 2})
    sampler.set_epoch(4)  # DistributedSampler-style loops: the loaded epoch keeps its position
    assert list(sampler) == _sampler.epoch_order(6, 2, 4).tolist()[2:]
    sampler.set_epoch(8)
    assert list(sampler) == _sampler.epoch_order(6, 2, 8).tolist()
    for args in ({"seed": 2 ** 64}, {"rank": 1}, {"rank": 2, "world_size": 2}, {"world_size": 0, "rank": 0}):
        with pytest.raises(trainsnap.InvalidArgument):
            trainsnap.ResumableSampler(range(6), **args)


def test_persistent_workers_and_a_loop_that_breaks_out_early():
    data = TensorDataset(torch.arange(12))
    sampler = trainsnap.ResumableSampler(data, seed=4)
    loader = DataLoader(data, sampler=sampler, batch_size=3, num_workers=2, persistent_workers=True,
                        generator=torch.Generator().manual_seed(0))
    assert len(list(loader)) == 4 and sampler.state_dict()["position"] == 12
    for i, _ in enumerate(loader):  # the same iterator object, restarted for epoch 1
        if i == 1:
            break
    assert (sampler.state_dict()["epoch"], sampler.state_dict()["position"]) == (1, 6)
    state = sampler.state_dict()
    resumed = trainsnap.ResumableSampler(data, seed=4)
    resumed.load_state_dict(state)
    assert list(resumed) == _sampler.epoch_order(12, 4, 1).tolist()[6:]
