"""CaptureHandle is a concurrent.futures.Future, and each capture error is
raised once: by the handle when someone asks it, otherwise by flush()."""

import concurrent.futures
import subprocess
import threading

import pytest
import torch
from torch import nn

import trainsnap
from kit import open_store


def test_a_handle_is_a_future_that_completes_when_the_snapshot_commits(tmp_path):
    store = open_store(tmp_path)
    ckpt = trainsnap.Checkpointer(store)
    model = nn.Linear(64, 64)
    handles = [ckpt.capture_async(step, model=model, rng=False) for step in range(1, 6)]
    assert all(isinstance(h, concurrent.futures.Future) for h in handles)
    done, not_done = concurrent.futures.wait(handles, timeout=60)
    assert len(done) == 5 and not not_done
    assert sorted(h.step for h in concurrent.futures.as_completed(handles, timeout=60)) == [1, 2, 3, 4, 5]
    for h in handles:
        assert h.done() and h.ready() and not h.cancelled()
        assert h.result() is None and h.result(timeout=0) is None and h.exception(timeout=1) is None
        assert not h.cancel()  # a capture is never cancelled
    assert [i["step"] for i in store.list()] == [1, 2, 3, 4, 5]

    # Callbacks: at once on this thread when done, else on another thread once done.
    calls = []
    on_main = threading.current_thread
    handles[0].add_done_callback(lambda f: calls.append((f.step, on_main() is threading.main_thread())))
    assert calls == [(1, True)]
    fired = threading.Event()
    later = ckpt.capture_async(6, model=model, rng=False)
    later.add_done_callback(lambda f: (calls.append((f.step, f.exception())), fired.set()))
    assert fired.wait(60)
    assert calls[1] == (6, None)
    ckpt.flush()


def small_disk(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)]).returncode != 0:
        pytest.fail("mounting a tmpfs needs root (CI runs the tests as root)")
    return mount


def fill_and_fail(tmp_path, ask):
    """Captures a 4 MiB model into a 3 MiB store: the capture fails
    asynchronously with NoSpace. `ask(handle)` runs on the handle; returns
    the checkpointer, the handle and the store."""
    mount = small_disk(tmp_path)
    store = trainsnap.Store(str(mount / "store"), compress=False, sync=True)
    ckpt = trainsnap.Checkpointer(store)
    torch.manual_seed(0)
    handle = ckpt.capture_async(1, model=nn.Linear(1024, 1024, bias=False), rng=False)
    ask(handle)
    return mount, store, ckpt, handle


def unmount(mount, store, ckpt):
    ckpt.close()
    store.close()
    subprocess.run(["umount", str(mount)], check=True)


def test_an_error_asked_from_the_handle_is_not_raised_again_by_flush(tmp_path):
    seen = []
    mount, store, ckpt, handle = fill_and_fail(tmp_path, lambda h: seen.append(h.exception(timeout=60)))
    try:
        assert isinstance(seen[0], trainsnap.NoSpace) and str(seen[0]).startswith("capture step 1: ")
        with pytest.raises(trainsnap.NoSpace) as e:
            handle.result()
        assert e.value is seen[0]  # the handle keeps answering with its error
        ckpt.flush()  # already raised: not again
    finally:
        unmount(mount, store, ckpt)


def test_an_error_nobody_asked_for_is_raised_once_by_flush(tmp_path):
    mount, store, ckpt, handle = fill_and_fail(tmp_path, lambda h: None)
    try:
        with pytest.raises(trainsnap.NoSpace) as e:
            ckpt.flush()
        assert str(e.value).startswith("capture step 1: ")
        ckpt.flush()  # raised once
        assert handle.done() and handle.exception() is e.value
    finally:
        unmount(mount, store, ckpt)


def test_a_callback_that_reads_the_error_counts_as_asking(tmp_path):
    got = []
    called = threading.Event()
    mount, store, ckpt, handle = fill_and_fail(
        tmp_path, lambda h: h.add_done_callback(lambda f: (got.append(f.exception()), called.set())))
    try:
        assert called.wait(60)
        ckpt.flush()
        assert len(got) == 1 and isinstance(got[0], trainsnap.NoSpace)
    finally:
        unmount(mount, store, ckpt)
