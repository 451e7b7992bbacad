"""trainsnap.Store: one store directory."""

import weakref

from ._args import is_step, step_arg
from ._trainsnap import Error, _Store


class Store:
    """One trainsnap store (a directory). A single process may open it for
    writing (Busy otherwise); Store.open_read_only may inspect it meanwhile.

    compress: Zstd-compress new chunks and write XOR deltas.
    keep_last: retention, 0 keeps every snapshot.
    sync: fsync every commit (turn off only for tests and benchmarks).
    threads: encode/decode workers, 0 = hardware threads.

    As a context manager, its exit flushes and closes the Checkpointers that
    still use it, then closes the store. A store opened in one process and
    used in a child forked from it raises InvalidArgument there.
    """

    def __init__(self, path, compress=True, keep_last=0, sync=True, threads=0, *, _impl=None):
        self._impl = _impl if _impl is not None else _Store(str(path), bool(compress), int(keep_last), bool(sync),
                                                            int(threads))
        self._checkpointers = weakref.WeakSet()

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
        return self._impl.info(step_arg(step))

    def __contains__(self, step):
        """Whether a snapshot is stored at integer `step` (its record is not
        read). Anything that is no step (2.5, "2", True, 2**64) is in no
        store: int() would make 2.5 or "2" mean step 2."""
        if not is_step(step):
            return False
        return self._impl.__contains__(step_arg(step))

    def verify(self, step=None):
        """Re-hashes every chunk (of `step`, or of all snapshots): a dict with
        ok, snapshots, tensors, chunks, bytes and problems (step, role, code, message)."""
        return self._impl.verify(None if step is None else step_arg(step))

    def delete(self, step):
        self._impl.delete(step_arg(step))

    def collect_garbage(self):
        return self._impl.collect_garbage()

    def close(self):
        """Closes the store (Busy while a Checkpointer still uses it). Safe
        from any thread: a call in flight on another thread keeps the store
        open until it returns."""
        self._impl.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        """Flushes and closes every Checkpointer still open on this store,
        then closes it. With an exception in flight, nothing raised here
        replaces it; otherwise the first error (a flush's) is raised once
        everything is closed."""
        first = None
        for checkpointer in list(self._checkpointers):
            try:
                checkpointer.flush()
            except Error as e:
                first = first or e
            except Exception as e:  # a closed or foreign checkpointer: still close the rest
                first = first or e
            try:
                checkpointer.close()
            except Exception as e:
                first = first or e
        try:
            self.close()
        except Exception as e:
            first = first or e
        if exc_type is None and first is not None:
            raise first
        return False
