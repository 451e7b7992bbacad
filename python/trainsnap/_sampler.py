"""trainsnap.ResumableSampler: a DataLoader sampler whose position survives
a restart, DataLoader workers prefetching ahead included."""

import sys
import weakref

import torch
from torch.utils.data import BatchSampler, Sampler
from torch.utils.data.dataloader import _BaseDataLoaderIter

from ._trainsnap import InvalidArgument, NotSupported

_U64 = (1 << 64) - 1
_FORMAT = 1


# SplitMix64's finalizer constants (Steele et al., "Fast splittable
# pseudorandom number generators", 2014), as `Mix` in src/data/sampler.cc.
MIX_INCREMENT = 0x9E3779B97F4A7C15
MIX_MULTIPLIERS = (0xBF58476D1CE4E5B9, 0x94D049BB133111EB)
MIX_SHIFTS = (30, 27, 31)


def mix(x):
    """SplitMix64's finalizer over 64-bit words: the C++ sampler's Mix."""
    x = (x + MIX_INCREMENT) & _U64
    x = ((x ^ (x >> MIX_SHIFTS[0])) * MIX_MULTIPLIERS[0]) & _U64
    x = ((x ^ (x >> MIX_SHIFTS[1])) * MIX_MULTIPLIERS[1]) & _U64
    return x ^ (x >> MIX_SHIFTS[2])


def epoch_order(size, seed, epoch, shuffle=True):
    """The order of epoch `epoch`, the C++ trainsnap::ResumableSampler's:
    torch.randperm(size) drawn from a CPU generator seeded with
    mix(seed ^ mix(epoch)), or ascending without shuffle. A LongTensor."""
    if not shuffle:
        return torch.arange(size, dtype=torch.int64)
    generator = torch.Generator()
    generator.manual_seed(mix(seed ^ mix(epoch & _U64)))
    return torch.randperm(size, generator=generator)


def _uint64(value, what):
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _U64:
        raise InvalidArgument(f"ResumableSampler: {what} must be an integer in [0, 2**64), not {value!r}")
    return value


def _loader_iterator():
    """The DataLoader iterator that is drawing from the sampler being
    iterated now, found on the call stack (DataLoader advances its sampler
    from its iterator's methods, in the main process), and whether that
    happens inside its _next_data() (a batch being made for the loop, which
    is counted once returned), or (None, False) when the sampler is
    iterated directly."""
    frame = sys._getframe(1)
    for _ in range(10):
        if frame is None:
            return None, False
        loader = frame.f_locals.get("self")
        if isinstance(loader, _BaseDataLoaderIter):
            break
        frame = frame.f_back
    else:
        return None, False
    # The iterator's own calls above: _next_data -> _next_index, or __init__ -> _reset.
    while frame is not None and frame.f_locals.get("self") is loader:
        if frame.f_code.co_name == "_next_data":
            return loader, True
        frame = frame.f_back
    return loader, False


class _Batches:
    """Batches a DataLoader iterator has handed to the training loop."""

    __slots__ = ("count",)

    def __init__(self):
        self.count = 0


def _count_batches(loader, in_next_data):
    """Counts the batches `loader` (a DataLoader iterator) hands out from
    now on, and the one its _next_data() is making now if `in_next_data`:
    its __next__ returns what _next_data() returned, so an instance
    attribute wraps that method. The count lives apart from the iterator
    (it outlives a loop that breaks out early), and the wrapper holds the
    iterator weakly (no reference cycle keeps its workers alive)."""
    batches = _Batches()
    batches.count = 1 if in_next_data else 0
    method = type(loader)._next_data
    loader_ref = weakref.ref(loader)

    def _next_data():
        data = method(loader_ref())
        batches.count += 1
        return data

    loader._next_data = _next_data
    return batches


class ResumableSampler(Sampler):
    """Yields the indices of `data_source` (anything with len()) once per
    epoch, in an order that is a pure function of (seed, epoch): the C++
    trainsnap::ResumableSampler's, index for index. It never draws from
    torch's global generator.

    Its state (state_dict()/load_state_dict(); pass the sampler, or the
    DataLoader that draws from it, in `extra=`) is the epoch and the global
    position: the samples the training loop has consumed in the epoch, over
    all ranks. "Consumed" is what the loop took from the DataLoader, not
    what the DataLoader's workers prefetched: while a DataLoader draws from
    it, the sampler counts the batches that DataLoader hands to the loop.
    So a restore resumes at the exact next sample, with any num_workers and
    prefetch_factor.

    Each iter() starts the next epoch, or, after a load_state_dict() or
    set_epoch(), that epoch at its position (a fully consumed epoch resumes
    as the start of the next). Start a new iteration (`for batch in loader`)
    after a restore.

    Distributed (rank, world_size): from global position p, rank r yields
    order[p + r], order[p + r + W], ...: floor((n - p) / W) indices, the same
    count on every rank (the tail of fewer than W samples is dropped for the
    epoch, like DistributedSampler(drop_last=True)). When every rank has
    consumed k samples the position has moved by k * W. A state saved with
    W ranks loads with any other number: no sample is repeated or skipped.

    Not thread-safe: the thread that iterates the DataLoader drives it.
    """

    def __init__(self, data_source, shuffle=True, seed=0, rank=None, world_size=None):
        try:
            size = len(data_source)
        except TypeError:
            raise InvalidArgument(f"ResumableSampler: data_source (a {type(data_source).__name__}) has no len()") \
                from None
        if (rank is None) != (world_size is None):
            raise InvalidArgument("ResumableSampler: give both rank and world_size, or neither")
        world_size = 1 if world_size is None else world_size
        rank = 0 if rank is None else rank
        for value, what in ((rank, "rank"), (world_size, "world_size")):
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidArgument(f"ResumableSampler: {what} must be an integer, not {value!r}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise InvalidArgument(f"ResumableSampler: rank {rank} of world_size {world_size}")
        self._size = size
        self._seed = _uint64(seed, "seed")
        self._shuffle = bool(shuffle)
        self._rank = rank
        self._world = world_size
        self._epoch = 0
        self._position = 0  # global position where this iteration started, or where the next one resumes
        self._pending = True  # the next iter() runs (_epoch, _position) as they are
        self._finished = False  # the last iteration's generator ran to its end
        self._generation = 0  # iterations started: an older generator stops
        self._count = 0  # indices this rank yields in the current iteration
        self._yielded = 0
        # (batches the DataLoader drawing from this iteration handed out, samples per batch, its workers)
        self._loader = None

    @property
    def epoch(self):
        """The epoch being iterated, or the one the next iter() runs after a
        load_state_dict() or set_epoch(): resume an epoch loop from it."""
        return self._epoch

    @property
    def position(self):
        """Samples of `epoch` consumed by every rank together."""
        return self._global_position()

    def set_epoch(self, epoch):
        """The next iter() runs epoch `epoch` from its start, or from the
        loaded position when `epoch` is the one load_state_dict() set (so a
        DistributedSampler-style loop, set_epoch() before each epoch, resumes)."""
        epoch = _uint64(epoch, "epoch")
        if not (self._pending and epoch == self._epoch):
            self._epoch, self._position = epoch, 0
        self._begin_pending(advance=False)

    def __len__(self):
        """Indices this rank yields in the current iteration (or the next)."""
        if self._pending:
            return (self._size - self._position) // self._world
        if self._finished:
            return self._size // self._world
        return self._count

    def __iter__(self):
        # The epoch starts at the first next(), not here: a DataLoader
        # iterator calls iter() on its sampler more than once and advances
        # only the last iterator it got.
        return self._generate()

    def _begin(self):
        if not self._pending:
            self._epoch, self._position = self._epoch + 1, 0
        self._pending = False
        self._finished = False
        self._generation += 1
        self._count = (self._size - self._position) // self._world
        self._yielded = 0
        self._loader = None
        loader, in_next_data = _loader_iterator()
        if loader is not None:
            index_sampler = loader._index_sampler
            if index_sampler is self:
                per_item = 1
            elif isinstance(index_sampler, BatchSampler) and index_sampler.sampler is self:
                per_item = index_sampler.batch_size
            else:
                per_item = None  # a batch sampler of unknown batch sizes
            # Items the iterator handed out before this iteration (a
            # persistent-workers iterator restarting) are not this epoch's.
            self._loader = (_count_batches(loader, in_next_data), per_item, loader._num_workers)
        order = epoch_order(self._size, self._seed, self._epoch, self._shuffle)
        first = self._position + self._rank
        return order[first:first + self._count * self._world:self._world].tolist()

    def _generate(self):
        indices = self._begin()
        generation = self._generation
        for index in indices:
            if generation != self._generation:
                return  # a newer iteration (or a load) took over
            self._yielded += 1
            yield index
        if generation == self._generation:
            self._finished = True

    def _consumed(self):
        """Samples of this iteration this rank's loop has consumed."""
        if self._pending:
            return 0
        if self._loader is None:
            return self._yielded  # iterated directly: what was handed out was taken
        batches, per_item, workers = self._loader
        if per_item is not None:
            return min(batches.count * per_item, self._count)
        if workers == 0:
            return self._yielded  # fetched on demand: nothing ahead of the loop
        raise NotSupported("ResumableSampler: a DataLoader with workers draws from it through a custom "
                           "batch_sampler, whose batch sizes it cannot know; use sampler= and batch_size=")

    def _global_position(self):
        return self._position + self._consumed() * self._world

    def _begin_pending(self, advance):
        """The next iter() runs (_epoch, _position); with `advance`, a
        position with nothing left for this world size is the next epoch's start."""
        self._pending = True
        self._finished = False
        self._generation += 1
        self._loader = None
        if advance and self._position > 0 and self._size - self._position < self._world:
            self._epoch, self._position = self._epoch + 1, 0

    def state_dict(self):
        return {"format": _FORMAT, "size": self._size, "seed": self._seed, "shuffle": self._shuffle,
                "epoch": self._epoch, "position": self._global_position()}

    def load_state_dict(self, state):
        """InvalidArgument (nothing changes) for a state of another format or
        another dataset size, or out of range."""
        if not isinstance(state, dict) or state.get("format") != _FORMAT:
            raise InvalidArgument(f"ResumableSampler: a state of format {_FORMAT} is a dict with "
                                  "format, size, seed, shuffle, epoch and position")
        size, position, epoch = state.get("size"), state.get("position"), state.get("epoch")
        if size != self._size:
            raise InvalidArgument(f"ResumableSampler: state for a dataset of {size} samples, this sampler has "
                                  f"{self._size}")
        seed = _uint64(state.get("seed"), "seed")
        _uint64(epoch, "epoch")
        shuffle = state.get("shuffle")
        if not isinstance(shuffle, bool) or isinstance(position, bool) or not isinstance(position, int) \
                or not 0 <= position <= size:
            raise InvalidArgument(f"ResumableSampler: state out of range (shuffle {shuffle!r}, position "
                                  f"{position!r} of {size})")
        self._seed, self._shuffle, self._epoch, self._position = seed, shuffle, epoch, position
        self._begin_pending(advance=True)

    def __repr__(self):
        return (f"ResumableSampler(size={self._size}, shuffle={self._shuffle}, seed={self._seed}, rank={self._rank}, "
                f"world_size={self._world}, epoch={self._epoch}, position={self._global_position()})")
