"""trainsnap.Checkpointer and trainsnap.load."""

import os

from ._args import step_arg
from ._handle import Handles, ReportsOnce
from ._store import Store
from ._targets import Parts
from ._trainsnap import InvalidArgument, NotFound, _Checkpointer


def rng_arg(rng, partial):
    """rng=None: restore the RNG unless the restore is partial."""
    return (not partial) if rng is None else bool(rng)


class Checkpointer(ReportsOnce):
    """Captures and restores the training state into a Store.

    model_state: "trainable" (parameters with requires_grad: LoRA adapters),
    "trainable_and_buffers" (the default: plus BatchNorm statistics and other
    buffers) or "full" (frozen parameters too).
    gradients: "auto" (pending gradients mid-window), "always" or "never".
    base_label: the frozen base's name, checked at restore when set.
    hash_base_content: fingerprint the frozen parameters' bytes (default: on;
    computed once and kept while their version counters do not move), so
    that adapters never restore onto another base of the same shapes.

    overhead_budget: the largest fraction of the training thread's wall
    time since this Checkpointer was created that captures may take (e.g.
    0.02); capture_async skips a capture that would exceed it, or that would
    wait for max_captures_in_flight, and returns a handle that is already
    done with `skipped` True (not an error). The first capture is predicted
    from the bytes it will copy at 1 GB/s and waits until it fits (300 MB
    under 0.02: 14.7 s after creation). 0 (the default) = off. Negative, NaN
    or >= 1: InvalidArgument.

    model=, optimizer= and scheduler= take one object, a list, or a dict of
    name -> object (see docs/python.md). Thread-compatible: one training
    thread drives it. Used in a process forked from the one that created it,
    every call raises InvalidArgument (the parent is unaffected).
    """

    def __init__(self, store, model_state="trainable_and_buffers", gradients="auto", base_label="",
                 hash_base_content=True, max_captures_in_flight=4, overhead_budget=0.0):
        if not isinstance(store, Store):
            raise TypeError("Checkpointer(store): a trainsnap.Store")
        self.store = store
        self._impl = _Checkpointer(store._impl, model_state, gradients, base_label, bool(hash_base_content),
                                   max_captures_in_flight, float(overhead_budget))
        self._handles = Handles()
        store._checkpointers.add(self)

    def capture_async(self, step, model=None, optimizer=None, scheduler=None, accumulation=None, extra=None,
                      rng=True):
        """Stages every tensor (a host copy) and returns a CaptureHandle (a
        concurrent.futures.Future): the loop may then change everything.
        Encode and commit run on C++ threads. An error raised here is not
        raised again by flush()."""
        step = step_arg(step)  # before anything else: bad input changes nothing
        parts = Parts(model, optimizer, scheduler, extra, rng)
        impl = self._impl.capture_async(step, parts.models, parts.adapters, accumulation, bool(rng))
        return self._handles.add(impl)

    def capture(self, step, **state):
        """capture_async(step, ...).wait()."""
        self.capture_async(step, **state).wait()

    def restore(self, step, model=None, optimizer=None, scheduler=None, accumulation=None, extra=None, rng=None,
                restore_gradients=True, allow_missing_buffers=False, discard_later=False,
                restore_optimizer_options=True, partial=False):
        """Restores snapshot `step` into the given objects, which must match
        it (ContractMismatch naming the first difference). On any error every
        object is left bitwise unchanged. discard_later also deletes the later
        snapshots (a rollback), so that those steps may be captured again.
        restore_optimizer_options=False keeps the optimizer's param-group
        options (lr, betas, weight_decay, ...) and restores only its state.
        partial=True restores only the objects given; the RNG only with rng=True.
        rng (default) restores the RNG unless partial. Returns `step`."""
        step = step_arg(step)  # before anything else: bad input changes nothing
        return self._restore(step, model, optimizer, scheduler, accumulation, extra, rng, restore_gradients,
                             allow_missing_buffers, discard_later, restore_optimizer_options, partial)

    def restore_latest(self, model=None, optimizer=None, scheduler=None, accumulation=None, extra=None, rng=None,
                       restore_gradients=True, allow_missing_buffers=False, restore_optimizer_options=True,
                       partial=False):
        """Restores the latest snapshot and returns its step (NotFound when there is none)."""
        return self._restore(None, model, optimizer, scheduler, accumulation, extra, rng, restore_gradients,
                             allow_missing_buffers, False, restore_optimizer_options, partial)

    def _restore(self, step, model, optimizer, scheduler, accumulation, extra, rng, restore_gradients,
                 allow_missing_buffers, discard_later, restore_optimizer_options, partial, sources_dir=""):
        partial = bool(partial)
        rng = rng_arg(rng, partial)
        parts = Parts(model, optimizer, scheduler, extra, rng, restore_optimizer_options, partial)
        if partial:
            self._handles.wait_all()  # the snapshot to read may still be in flight
        return self._impl.restore(step, parts.models, parts.adapters, accumulation, rng, bool(restore_gradients),
                                  bool(allow_missing_buffers), bool(discard_later), partial, sources_dir)

    def rollback_to(self, step, **target):
        """restore(step, ..., discard_later=True)."""
        return self.restore(step, discard_later=True, **target)

    def pipeline_stats(self):
        """A dict: last_committed_step, captures_in_flight, capture_waits,
        captures_skipped (by overhead_budget), steps_between_last_commits
        (None before the second commit) and staging_peak_bytes."""
        return self._impl.pipeline_stats()

    def close(self):
        """Waits for the captures in flight and releases the store (their
        errors stay with their handles; flush() first to see them). Safe from
        any thread: a call in flight on another thread keeps the
        Checkpointer open until it returns (the wait happens then)."""
        self._impl.close()
        self._handles.stop()
        self.store._checkpointers.discard(self)


def _is_run_dir(path):
    return os.path.isdir(os.path.join(path, "global")) and os.path.isdir(os.path.join(path, "rank-00000"))


def load(path_or_store, model, step=None):
    """Loads the weights of `model` (one module, a list or a dict, as
    Checkpointer takes them; DDP/DataParallel wrappers are unwrapped) from
    snapshot `step` (default: the latest) for evaluation, and returns the
    step: a partial restore of the model only, with no optimizer, RNG,
    gradient or other state touched. `path_or_store`: a trainsnap.Store, the
    path of a store (opened read-only), or a DistributedCheckpointer's run
    directory (its latest global step; the model tensors every rank stored)."""
    if isinstance(path_or_store, Store):
        return _load_from(path_or_store, model, step, "")
    path = os.fspath(path_or_store)
    sources_dir = ""
    store_path = path
    if _is_run_dir(path):
        if step is None:
            global_store = Store.open_read_only(os.path.join(path, "global"))
            try:
                step = global_store.latest()
            finally:
                global_store.close()
            if step is None:
                raise NotFound(f"load: run directory `{path}` holds no global step")
        sources_dir = path
        store_path = os.path.join(path, "rank-00000")
    store = Store.open_read_only(store_path)
    try:
        return _load_from(store, model, step, sources_dir)
    finally:
        store.close()


def _load_from(store, model, step, sources_dir):
    if model is None:
        raise InvalidArgument("load: model is None")
    step = None if step is None else step_arg(step)
    ckpt = Checkpointer(store)
    try:
        return ckpt._restore(step, model, None, None, None, None, False, False, False, False, True, True,
                             sources_dir)
    finally:
        ckpt.close()
