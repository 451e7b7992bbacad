"""trainsnap: snapshots of a whole PyTorch training state, every step.

    store = trainsnap.Store("run.tsnap", compress=True, keep_last=0)
    ckpt = trainsnap.Checkpointer(store, model_state="trainable")
    window = trainsnap.AccumulationWindow(size=4)
    handle = ckpt.capture_async(step, model=model, optimizer=opt, scheduler=sched,
                                accumulation=window, extra={"data": cursor}, rng=True)
    handle.wait(); ckpt.flush()
    step = ckpt.restore_latest(model=model, optimizer=opt, scheduler=sched,
                               accumulation=window, extra={"data": cursor})

A thin layer over the C++ core (libtrainsnap): the same store, format, CLI
and guarantees. Errors are trainsnap.Error subclasses, one per status code,
carrying the C++ message; a failed call leaves every live object unchanged.
See docs/python.md.
"""

import operator

import torch  # noqa: F401  (loads LibTorch's Python types before the extension)

from . import _state
from ._trainsnap import (  # noqa: F401
    Aborted,
    AccumulationWindow,
    AlreadyExists,
    Busy,
    CaptureHandle,
    ContractMismatch,
    Corruption,
    Error,
    InvalidArgument,
    IOError,
    NoSpace,
    NotFound,
    NotSupported,
    _Checkpointer,
    _Store,
)

# IOError is left out: `from trainsnap import *` would shadow the builtin
# (OSError). Use trainsnap.IOError.
__all__ = [
    "Store", "Checkpointer", "AccumulationWindow", "CaptureHandle", "Error", "NotFound", "Corruption",
    "InvalidArgument", "ContractMismatch", "NoSpace", "Busy", "Aborted", "NotSupported", "AlreadyExists",
]

# Keys of tensor_extra that the binding itself uses; user extras may not.
_OPTIMIZER = "python:optimizer"
_SCHEDULER = "python:scheduler"
_RNG = "python:rng"


def _step(step):
    """`step` as an int. InvalidArgument for anything that is not an
    integer: int() made 2.5 or "2" mean step 2, so that a typo could restore,
    roll back to or delete another snapshot than the one meant."""
    try:
        return operator.index(step)
    except TypeError:
        raise InvalidArgument(f"a step is an integer, not {type(step).__name__} {step!r}") from None


class Store:
    """One trainsnap store (a directory). A single process may open it for
    writing (Busy otherwise); Store.open_read_only may inspect it meanwhile.

    compress: Zstd-compress new chunks and write XOR deltas.
    keep_last: retention, 0 keeps every snapshot.
    sync: fsync every commit (turn off only for tests and benchmarks).
    threads: encode/decode workers, 0 = hardware threads.
    """

    def __init__(self, path, compress=True, keep_last=0, sync=True, threads=0, *, _impl=None):
        self._impl = _impl if _impl is not None else _Store(str(path), bool(compress), int(keep_last), bool(sync),
                                                            int(threads))

    @classmethod
    def open_read_only(cls, path):
        return cls(path, _impl=_Store.open_read_only(str(path)))

    @property
    def path(self):
        return self._impl.path

    def list(self):
        """Every snapshot, ascending: dicts with step, tensors, logical_bytes,
        stored_bytes, new_bytes, chunks, new_chunks, manifest_bytes, created_unix_ms."""
        return self._impl.list()

    def latest(self):
        """The latest step, or None for an empty store."""
        return self._impl.latest()

    def info(self, step):
        return self._impl.info(_step(step))

    def __contains__(self, step):
        """Whether a snapshot is stored at integer `step` (its record is not
        read). Anything that is not an integer is in no store: int() would
        make 2.5 or "2" mean step 2."""
        try:
            step = operator.index(step)
        except TypeError:
            return False
        return self._impl.__contains__(step)

    def verify(self, step=None):
        """Re-hashes every chunk (of `step`, or of all snapshots): a dict with
        ok, snapshots, tensors, chunks, bytes and problems (step, role, code, message)."""
        return self._impl.verify(None if step is None else _step(step))

    def delete(self, step):
        self._impl.delete(_step(step))

    def collect_garbage(self):
        return self._impl.collect_garbage()

    def close(self):
        """Closes the store (Busy while a Checkpointer still uses it). Safe
        from any thread: a call in flight on another thread keeps the store
        open until it returns."""
        self._impl.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _parameter_names(model):
    """id(tensor) -> first qualified name, tied parameters once."""
    names = {}
    if model is not None:
        for name, p in model.named_parameters():
            names.setdefault(id(p), name)
    return names


class Checkpointer:
    """Captures and restores the training state into a Store.

    model_state: "trainable" (parameters with requires_grad: LoRA adapters),
    "trainable_and_buffers" (the default: plus BatchNorm statistics and other
    buffers) or "full" (frozen parameters too).
    gradients: "auto" (pending gradients mid-window), "always" or "never".
    base_label: the frozen base's name, checked at restore when set.

    Thread-compatible: one training thread drives it.
    """

    def __init__(self, store, model_state="trainable_and_buffers", gradients="auto", base_label="",
                 hash_base_content=False, max_captures_in_flight=4):
        if not isinstance(store, Store):
            raise TypeError("Checkpointer(store): a trainsnap.Store")
        self.store = store
        self._impl = _Checkpointer(store._impl, model_state, gradients, base_label, hash_base_content,
                                   max_captures_in_flight)

    def _adapters(self, model, optimizer, scheduler, extra, rng, restore_optimizer_options=True):
        adapters = {_RNG: _state.PythonRngAdapter(bool(rng))}
        if optimizer is not None:
            adapters[_OPTIMIZER] = _state.OptimizerAdapter(optimizer, _parameter_names(model),
                                                           restore_optimizer_options)
        if scheduler is not None:
            adapters[_SCHEDULER] = _state.StatefulAdapter("scheduler", scheduler)
        for key, obj in (extra or {}).items():
            if not isinstance(key, str) or key.startswith("python:"):
                raise InvalidArgument(f"extra key {key!r}: a str not starting with \"python:\"")
            adapters[key] = _state.StatefulAdapter(f"extra `{key}`", obj)
        return adapters

    def capture_async(self, step, model=None, optimizer=None, scheduler=None, accumulation=None, extra=None,
                      rng=True):
        """Stages every tensor (a host copy) and returns a CaptureHandle: the
        loop may then change everything. Encode and commit run on C++ threads."""
        step = _step(step)  # before anything else: bad input changes nothing
        adapters = self._adapters(model, optimizer, scheduler, extra, rng)
        return self._impl.capture_async(step, model, adapters, accumulation, bool(rng))

    def capture(self, step, **state):
        """capture_async(step, ...).wait()."""
        self.capture_async(step, **state).wait()

    def flush(self):
        """Waits for the captures in flight; raises the first error since the last flush."""
        self._impl.flush()

    def restore(self, step, model=None, optimizer=None, scheduler=None, accumulation=None, extra=None, rng=True,
                restore_gradients=True, allow_missing_buffers=False, discard_later=False,
                restore_optimizer_options=True):
        """Restores snapshot `step` into the given objects, which must match
        it (ContractMismatch naming the first difference). On any error every
        object is left bitwise unchanged. discard_later also deletes the later
        snapshots (a rollback), so that those steps may be captured again.
        restore_optimizer_options=False keeps the optimizer's param-group
        options (lr, betas, weight_decay, ...) and restores only its state."""
        step = _step(step)  # before anything else: bad input changes nothing
        adapters = self._adapters(model, optimizer, scheduler, extra, rng, restore_optimizer_options)
        return self._impl.restore(step, model, adapters, accumulation, bool(rng), restore_gradients,
                                  allow_missing_buffers, discard_later)

    def restore_latest(self, model=None, optimizer=None, scheduler=None, accumulation=None, extra=None, rng=True,
                       restore_gradients=True, allow_missing_buffers=False, restore_optimizer_options=True):
        """Restores the latest snapshot and returns its step (NotFound when there is none)."""
        adapters = self._adapters(model, optimizer, scheduler, extra, rng, restore_optimizer_options)
        return self._impl.restore(None, model, adapters, accumulation, bool(rng), restore_gradients,
                                  allow_missing_buffers, False)

    def rollback_to(self, step, **target):
        """restore(step, ..., discard_later=True)."""
        return self.restore(step, discard_later=True, **target)

    def pipeline_stats(self):
        return self._impl.pipeline_stats()

    def close(self):
        """Waits for the captures in flight and releases the store. Safe from
        any thread: a call in flight on another thread keeps the Checkpointer
        open until it returns (the wait happens then)."""
        self._impl.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
