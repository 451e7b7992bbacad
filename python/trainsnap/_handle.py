"""CaptureHandle: a concurrent.futures.Future for one asynchronous capture,
and the bookkeeping that reports each capture error exactly once."""

import concurrent.futures
import queue
import threading
import weakref


class CaptureHandle(concurrent.futures.Future):
    """The outcome of one capture_async: a concurrent.futures.Future (done(),
    result(timeout), exception(timeout), add_done_callback(fn); also
    concurrent.futures.wait and as_completed), plus `step`, wait() and
    ready(). result() is None once the snapshot is committed (durable, and
    for a DistributedCheckpointer committed on every rank); a failed
    capture raises its trainsnap.Error there. cancel() returns False: a
    capture is never cancelled.

    Each error is raised once: by the handle when asked (result(),
    exception(), wait()), otherwise by the Checkpointer's next flush().
    Done callbacks run on the checkpointer's watcher thread (or at once,
    on the calling thread, when the capture is already done)."""

    def __init__(self, impl):
        super().__init__()
        self.set_running_or_notify_cancel()  # RUNNING: cancel() refuses
        self._impl = impl
        self._settle_lock = threading.Lock()
        self._settled = False
        self._asked = False

    @property
    def step(self):
        return self._impl.step

    @property
    def skipped(self):
        """True if the Checkpointer's overhead_budget skipped this capture:
        nothing was stored, the handle is done and result() is None."""
        return self._impl.skipped

    def _settle(self, block):
        """Completes the Future once the C++ capture is done (waiting for it
        when `block`, without the GIL). Idempotent."""
        if self._settled or not (block or self._impl.ready()):
            return
        error = self._impl.wait_status()
        with self._settle_lock:
            if self._settled:
                return
            self._settled = True
        if error is None:
            self.set_result(None)
        else:
            self.set_exception(error)

    def done(self):
        self._settle(block=False)
        return super().done()

    def ready(self):
        """done(): whether wait() would not block."""
        return self.done()

    def result(self, timeout=None):
        self._asked = True
        if timeout is None:
            self._settle(block=True)
        return super().result(timeout)

    def exception(self, timeout=None):
        self._asked = True
        if timeout is None:
            self._settle(block=True)
        return super().exception(timeout)

    def wait(self):
        """Blocks until the snapshot committed; raises its error otherwise."""
        self.result()

    def _succeeded(self):
        """Done and committed (asks nothing: a failure stays unasked)."""
        return self.done() and concurrent.futures.Future.exception(self, 0) is None

    def _unasked_error(self):
        """The error nobody asked this handle for (None otherwise), marking
        it asked. Call once the capture is done."""
        self._settle(block=True)
        if self._asked:
            return None
        self._asked = True
        return super().exception(0)

    def __repr__(self):
        return f"<trainsnap.CaptureHandle step={self.step} {self._state.lower()}>"


class Handles:
    """The handles of one checkpointer since its last flush, and the thread
    that completes them (for callbacks, timeouts and
    concurrent.futures.wait, which only see a Future completed by someone).
    Captures commit in submission order, so the watcher waits for them in
    that order. Handles that succeeded are dropped as the loop goes on."""

    def __init__(self):
        self._open = []  # since the last flush: succeeded ones pruned
        self._queue = None
        self._thread = None

    def add(self, impl):
        handle = CaptureHandle(impl)
        self._open = [h for h in self._open if not h._succeeded()]
        self._open.append(handle)
        if self._thread is None:
            self._queue = queue.SimpleQueue()
            self._thread = threading.Thread(target=self._watch, args=(self._queue,), name="trainsnap-captures",
                                            daemon=True)
            self._thread.start()
            # A checkpointer dropped without close() ends its watcher too.
            weakref.finalize(self, self._queue.put, None)
        self._queue.put(handle)
        return handle

    @staticmethod
    def _watch(work):
        while True:
            handle = work.get()
            if handle is None:
                return
            handle._settle(block=True)

    def wait_all(self):
        for handle in self._open:
            handle._settle(block=True)

    def first_unasked_error(self):
        """Waits for every open handle; the first error nobody asked for
        (in submission order), and forgets them all."""
        error = None
        for handle in self._open:
            unasked = handle._unasked_error()
            if error is None:
                error = unasked
        self._open = []
        return error

    def stop(self):
        """Completes every handle and ends the watcher (after close)."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        for handle in self._open:
            handle._settle(block=False)


class ReportsOnce:
    """flush() and the context-manager protocol of a checkpointer whose
    `_impl` (the C++ one) returns its flush error and takes the unreported
    one, and whose `_handles` are its Handles."""

    def flush(self):
        """Waits for the captures in flight; raises the first capture error
        since the last flush that was not raised already (by capture_async,
        or by a handle someone asked)."""
        self._impl.flush()  # every error is a handle's, or was raised by capture_async
        unreported = self._impl.take_unreported()  # one a KeyboardInterrupt, ... replaced
        error = self._handles.first_unasked_error()
        if unreported is not None:
            raise unreported
        if error is not None:
            raise error

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        """flush() then close(); with an exception in flight, close() only,
        and nothing raised here replaces it."""
        try:
            if exc_type is None:
                self.flush()
        finally:
            try:
                self.close()
            except Exception:
                if exc_type is None:
                    raise
        return False
