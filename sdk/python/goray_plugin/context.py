"""Call contexts: cancellation, deadlines and aborts for blocking duties.

Every transport method receives a :class:`Context`, the Python counterpart
of Go's context.Context for that call: it is done when the caller cancels
the RPC, when its deadline passes, or (for a context from
:meth:`Aborts.begin`) when the object is aborted. A method that blocks waits
on it (:meth:`Context.wait`) and raises :meth:`Context.error` when it is
done, so every blocking call ends promptly.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Callable, Optional

from .errors import AbortedError, CanceledError, TransferTimeoutError

#: How many aborted objects an :class:`Aborts` remembers (oldest forgotten
#: first), as sdk/transport's MaxAbortedRemembered.
MAX_ABORTED_REMEMBERED = 4096


class Context:
    """The context of one call. Thread-safe."""

    def __init__(self, deadline: Optional[float] = None, parent: Optional["Context"] = None):
        # deadline is a time.monotonic() value.
        if parent is not None and parent._deadline is not None:
            deadline = parent._deadline if deadline is None else min(deadline, parent._deadline)
        self._deadline = deadline
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._cause: Optional[BaseException] = None
        self._children: set[Context] = set()
        self._parent = parent
        if parent is not None:
            parent._add_child(self)

    @classmethod
    def background(cls) -> "Context":
        """A context that is never done unless cancelled."""
        return cls()

    @classmethod
    def with_timeout(cls, seconds: float, parent: Optional["Context"] = None) -> "Context":
        """A context whose deadline is seconds from now."""
        return cls(deadline=time.monotonic() + seconds, parent=parent)

    def _add_child(self, child: "Context") -> None:
        with self._lock:
            cause = self._cause
            if cause is None:
                self._children.add(child)
        if cause is not None:
            child.cancel(cause)

    def cancel(self, cause: Optional[BaseException] = None) -> None:
        """Ends the context with cause (default: CanceledError). The first
        cause wins; children are cancelled with it too."""
        if cause is None:
            cause = CanceledError("context canceled")
        with self._lock:
            if self._cause is not None:
                return
            self._cause = cause
            children, self._children = self._children, set()
        self._event.set()
        for c in children:
            c.cancel(cause)

    def release(self) -> None:
        """Detaches the context from its parent (call when done with it)."""
        if self._parent is not None:
            with self._parent._lock:
                self._parent._children.discard(self)

    @property
    def deadline(self) -> Optional[float]:
        """The deadline as a time.monotonic() value, or None."""
        return self._deadline

    def remaining(self) -> Optional[float]:
        """Seconds until the deadline (None: no deadline)."""
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())

    def done(self) -> bool:
        """Whether the context is cancelled or past its deadline."""
        return self._event.is_set() or (self._deadline is not None and time.monotonic() >= self._deadline)

    def error(self) -> Optional[BaseException]:
        """Why the context is done (None while it is live): the abort error
        when the object was aborted, TransferTimeoutError past the deadline,
        else the cancellation cause. Mirrors sdk/transport.ContextError."""
        with self._lock:
            cause = self._cause
        if isinstance(cause, AbortedError):
            return cause
        if self._deadline is not None and time.monotonic() >= self._deadline:
            return TransferTimeoutError("transfer timed out: deadline exceeded")
        return cause

    def check(self) -> None:
        """Raises error() if the context is done."""
        err = self.error()
        if err is not None:
            raise err

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits until the context is done or timeout seconds pass; returns
        whether it is done."""
        rem = self.remaining()
        if rem is not None:
            timeout = rem if timeout is None else min(timeout, rem)
        self._event.wait(timeout)
        return self.done()


class Aborts:
    """Tracks the pending calls of one transport instance per object so that
    an abort unblocks them, and remembers aborted objects (up to
    MAX_ABORTED_REMEMBERED) so that later calls fail too. The Python
    counterpart of sdk/transport.Aborts::

        call, done = self.aborts.begin(ctx, req.object_id)  # raises AbortedError
        try:
            ... block with call.wait(...); raise call.error() when done
        finally:
            done()
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, set[Context]] = {}
        self._aborted: "OrderedDict[str, AbortedError]" = OrderedDict()

    def begin(self, ctx: Context, object_id: str) -> tuple[Context, Callable[[], None]]:
        """Registers a pending call of the object. The returned context is
        cancelled with the abort error when the object is aborted; call the
        returned function when the call ends. Raises the abort error if the
        object was aborted already."""
        with self._lock:
            err = self._aborted.get(object_id)
            if err is not None:
                raise AbortedError(err.message)
            call = Context(parent=ctx)
            self._pending.setdefault(object_id, set()).add(call)

        def done() -> None:
            with self._lock:
                calls = self._pending.get(object_id)
                if calls is not None:
                    calls.discard(call)
                    if not calls:
                        del self._pending[object_id]
            call.release()

        return call, done

    def abort(self, object_id: str, reason: str = "") -> AbortedError:
        """Marks the object aborted and cancels its pending calls with the
        returned error, which carries reason."""
        err = AbortedError(f"transfer aborted: {reason or 'no reason given'}", object_id=object_id)
        with self._lock:
            self._aborted[object_id] = err
            self._aborted.move_to_end(object_id)
            while len(self._aborted) > MAX_ABORTED_REMEMBERED:
                self._aborted.popitem(last=False)
            calls = list(self._pending.get(object_id, ()))
        for c in calls:
            c.cancel(err)
        return err

    def aborted(self, object_id: str) -> Optional[AbortedError]:
        """The abort error of the object, or None."""
        with self._lock:
            return self._aborted.get(object_id)

    def forget(self, object_id: str) -> None:
        """Clears the object's aborted mark (garbage_collect calls it)."""
        with self._lock:
            self._aborted.pop(object_id, None)

    def pending(self, object_id: str) -> int:
        """How many calls are registered for the object."""
        with self._lock:
            return len(self._pending.get(object_id, ()))
