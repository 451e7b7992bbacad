"""trainsnap.DistributedCheckpointer: the C++ DistributedCheckpointer over
torch.distributed, for training scripts under torchrun."""

import datetime
import operator

from ._args import step_arg
from ._checkpointer import rng_arg
from ._handle import Handles, ReportsOnce
from ._targets import Parts
from ._trainsnap import InvalidArgument, NotSupported, _DistributedCheckpointer

# CheckpointerOptions and StoreOptions a DistributedCheckpointer passes to
# every rank's Checkpointer and store, with the Python Checkpointer's and
# Store's defaults.
_OPTIONS = {
    "model_state": "trainable_and_buffers",
    "gradients": "auto",
    "base_label": "",
    "hash_base_content": True,
    "max_captures_in_flight": 4,
    "compress": True,
    "keep_last": 0,
    "sync": True,
    "threads": 0,
}


def _gloo_group(group, timeout):
    """A Gloo group over the ranks of `group` (None: the default group):
    `group` itself when it is Gloo, else a new one. new_group() is a
    collective over the default group: with an NCCL group, every process of
    the default group must open the checkpointer at the same point."""
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        raise InvalidArgument("DistributedCheckpointer: torch.distributed is not initialized "
                              "(call torch.distributed.init_process_group first, e.g. under torchrun)")
    user = group if group is not None else dist.group.WORLD
    if dist.get_backend(user) == "gloo":
        return user
    ranks = None if group is None else dist.get_process_group_ranks(group)
    return dist.new_group(ranks=ranks, backend="gloo", timeout=datetime.timedelta(seconds=timeout))


def _stride(value):
    """replica_check_stride as an int in [1, 2**31 - 1]; InvalidArgument
    otherwise (a bool, a float, a string: no silent int())."""
    try:
        stride = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        stride = None
    if stride is None or not 1 <= stride <= (1 << 31) - 1:
        raise InvalidArgument(f"replica_check_stride must be an integer from 1 to 2**31 - 1, not {value!r}")
    return stride


class DistributedCheckpointer(ReportsOnce):
    """One snapshot across every rank of a torch.distributed job (torchrun,
    DDP), committed globally: the C++ DistributedCheckpointer and its run
    directory (docs/distributed.md; the trainsnap CLI works on it).

    run_dir: the same directory on every rank (each rank keeps its store in
    it). group: the ranks (None: the default process group). The
    checkpointer's own collectives run on a private Gloo group, so an NCCL
    trainer works too. model_replicated / optimizer_replicated: every rank
    holds the same model / optimizer state (DDP); replicated model tensors
    are written once in all and read by every rank. With a sharded optimizer
    (torch.distributed.optim.ZeroRedundancyOptimizer) pass
    optimizer_replicated=False: each rank stores its shard. Python
    optimizers' and schedulers' state is stored by each rank in its own
    store. verify_replicas: compare the hashes of a sample of the replicated
    tensors' bytes at every capture (one 1 MiB block in
    replica_check_stride, a different one at each step; 1: every byte, a
    longer stall). timeout: seconds any collective may take (a dead rank is an
    error, never a hang). checkpointer_options: model_state, gradients,
    base_label, hash_base_content, max_captures_in_flight (as Checkpointer),
    compress, keep_last, sync, threads (as Store; keep_last applies to
    global steps).

    Every method but steps(), rank and world_size is collective: every rank
    calls it in the same order with the same step. Thread-compatible: one
    training thread per rank drives it.
    """

    def __init__(self, run_dir, group=None, model_replicated=True, optimizer_replicated=True, verify_replicas=True,
                 replica_check_stride=32, timeout=300.0, **checkpointer_options):
        unknown = sorted(set(checkpointer_options) - set(_OPTIONS))
        if unknown:
            raise TypeError(f"DistributedCheckpointer() got unexpected keyword argument(s) {', '.join(unknown)}")
        options = dict(_OPTIONS, **checkpointer_options)
        try:
            timeout = float(timeout)
        except (TypeError, ValueError):
            raise InvalidArgument(f"timeout: seconds, not {timeout!r}") from None
        if not 0 < timeout <= 1e9:
            raise InvalidArgument(f"timeout must be a positive number of seconds, not {timeout!r}")
        stride = _stride(replica_check_stride)
        gloo = _gloo_group(group, timeout)
        self._impl = _DistributedCheckpointer(
            str(run_dir), gloo, bool(model_replicated), bool(optimizer_replicated), bool(verify_replicas), stride, timeout,
            options["model_state"], options["gradients"], options["base_label"], bool(options["hash_base_content"]),
            int(options["max_captures_in_flight"]), bool(options["compress"]), int(options["keep_last"]),
            bool(options["sync"]), int(options["threads"]))
        self.run_dir = str(run_dir)
        self._handles = Handles()

    @property
    def rank(self):
        return self._impl.rank

    @property
    def world_size(self):
        return self._impl.world_size

    def capture_async(self, step, model=None, optimizer=None, scheduler=None, accumulation=None, extra=None,
                      rng=True):
        """Stages this rank's state and returns a CaptureHandle, done once
        the step committed on every rank (or failed on every rank with the
        same error). Collective."""
        step = step_arg(step)
        parts = Parts(model, optimizer, scheduler, extra, rng)
        impl = self._impl.capture_async(step, parts.models, parts.adapters, accumulation, bool(rng))
        return self._handles.add(impl)

    def capture(self, step, **state):
        """capture_async(step, ...).wait()."""
        self.capture_async(step, **state).wait()

    def _restore(self, step, rollback, model, optimizer, scheduler, accumulation, extra, rng,
                 restore_optimizer_options, options):
        for name, value in options.items():
            if value:
                raise NotSupported(f"DistributedCheckpointer.restore: {name} is a Checkpointer option only")
        rng = rng_arg(rng, False)
        parts = Parts(model, optimizer, scheduler, extra, rng, restore_optimizer_options)
        return self._impl.restore(step, parts.models, parts.adapters, accumulation, rng, rollback)

    def restore(self, step, model=None, optimizer=None, scheduler=None, accumulation=None, extra=None, rng=None,
                restore_optimizer_options=True, partial=False):
        """Restores global step `step` on every rank (all or none: on any
        rank's error every rank raises the same error, every live object
        unchanged) and returns it. Collective."""
        step = step_arg(step)
        return self._restore(step, False, model, optimizer, scheduler, accumulation, extra, rng,
                             restore_optimizer_options, {"partial": partial})

    def restore_latest(self, model=None, optimizer=None, scheduler=None, accumulation=None, extra=None, rng=None,
                       restore_optimizer_options=True, partial=False):
        """Restores the latest global step and returns it (NotFound when
        there is none). Collective."""
        return self._restore(None, False, model, optimizer, scheduler, accumulation, extra, rng,
                             restore_optimizer_options, {"partial": partial})

    def rollback_to(self, step, model=None, optimizer=None, scheduler=None, accumulation=None, extra=None, rng=None,
                    restore_optimizer_options=True):
        """restore(step, ...), then the deletion of every later global step
        (they may be captured again). Collective."""
        step = step_arg(step)
        return self._restore(step, True, model, optimizer, scheduler, accumulation, extra, rng,
                             restore_optimizer_options, {})

    def steps(self):
        """The globally committed steps, ascending."""
        return self._impl.steps()

    def close(self):
        """Waits for the captures in flight and closes this rank's stores."""
        self._impl.close()
        self._handles.stop()

