"""trainsnap: snapshots of a whole PyTorch training state, every step.

    store = trainsnap.Store("run.tsnap", compress=True, keep_last=0)
    ckpt = trainsnap.Checkpointer(store, model_state="trainable")
    window = trainsnap.AccumulationWindow(size=4)
    handle = ckpt.capture_async(step, model=model, optimizer=opt, scheduler=sched,
                                accumulation=window, extra={"data": sampler, "epoch": epoch}, rng=True)
    handle.result(); ckpt.flush()
    step = ckpt.restore_latest(model=model, optimizer=opt, scheduler=sched,
                               accumulation=window, extra={"data": sampler, "epoch": epoch})

model=, optimizer= and scheduler= take one object, a list or a dict (a GAN's
{"G": G, "D": D}); trainsnap.load(path, model) loads weights for evaluation;
trainsnap.ResumableSampler resumes a DataLoader at the exact next sample;
trainsnap.DistributedCheckpointer runs under torchrun.

A thin layer over the C++ core (libtrainsnap): the same store, format, CLI
and guarantees. Errors are trainsnap.Error subclasses, one per status code,
carrying the C++ message; a failed call leaves every live object unchanged.
See docs/python.md.
"""

import torch  # noqa: F401  (loads LibTorch's Python types before the extension)

from ._trainsnap import (  # noqa: F401
    Aborted,
    AccumulationWindow,
    AlreadyExists,
    Busy,
    ContractMismatch,
    Corruption,
    Error,
    InvalidArgument,
    IOError,
    NoSpace,
    NotFound,
    NotSupported,
)
from ._args import STEP_MAX, STEP_MIN  # noqa: F401
from ._checkpointer import Checkpointer, load  # noqa: F401
from ._distributed import DistributedCheckpointer  # noqa: F401
from ._handle import CaptureHandle  # noqa: F401
from ._sampler import ResumableSampler  # noqa: F401
from ._store import Store  # noqa: F401

# IOError is left out: `from trainsnap import *` would shadow the builtin
# (OSError). Use trainsnap.IOError.
__all__ = [
    "Store", "Checkpointer", "DistributedCheckpointer", "ResumableSampler", "load", "AccumulationWindow",
    "CaptureHandle", "Error", "NotFound", "Corruption", "InvalidArgument", "ContractMismatch", "NoSpace", "Busy",
    "Aborted", "NotSupported", "AlreadyExists", "STEP_MIN", "STEP_MAX",
]
