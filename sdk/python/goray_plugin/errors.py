"""Typed transport errors that keep their identity across the plugin boundary.

Raise one of these from a transport method and the Go host sees the matching
sentinel of sdk/transport with errors.Is: ``BadMetadataError`` is
``transport.ErrBadMetadata``, ``AbortedError`` is ``transport.ErrAborted``,
and so on. Each class carries the gRPC status code and the wire name
(``ErrorInfo.kind``) of sdk/transport's error table. Any other exception
reaches the host as a plain error (gRPC UNKNOWN) with its message.
"""

from __future__ import annotations

from typing import Optional

import grpc

# Operation names (TransferError.Op in Go).
OP_INFO = "info"
OP_ACTOR_HAS_TRANSPORT = "actor_has_transport"
OP_EXTRACT_METADATA = "extract_metadata"
OP_COMMUNICATOR_METADATA = "communicator_metadata"
OP_SEND = "send"
OP_RECEIVE = "receive"
OP_GARBAGE_COLLECT = "garbage_collect"
OP_ABORT = "abort"


class TransportError(Exception):
    """Base of the typed transport errors.

    ``object_id`` and ``op`` name the object and the duty when known; the
    bridge fills them in from the request otherwise.
    """

    #: Wire name of the kind ("" for a plain error).
    kind = ""
    #: gRPC status code the error is sent with.
    code = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str = "", *, object_id: str = "", op: str = ""):
        super().__init__(message)
        self.message = message
        self.object_id = object_id
        self.op = op

    def __str__(self) -> str:
        return self.message


class NotSupportedError(TransportError):
    """The transport does not do this (transport.ErrNotSupported)."""

    kind = "not_supported"
    code = grpc.StatusCode.UNIMPLEMENTED


class AbortedError(TransportError):
    """The transfer was aborted (transport.ErrAborted)."""

    kind = "aborted"
    code = grpc.StatusCode.ABORTED


class BadMetadataError(TransportError):
    """The request's metadata is invalid, does not match, or names an unknown
    or collected object (transport.ErrBadMetadata)."""

    kind = "bad_metadata"
    code = grpc.StatusCode.INVALID_ARGUMENT


class TransferTimeoutError(TransportError, TimeoutError):
    """The transfer did not finish before its deadline (transport.ErrTimeout,
    which also matches context.DeadlineExceeded in Go)."""

    kind = "timeout"
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class CanceledError(TransportError):
    """The caller cancelled the call (context.Canceled in Go)."""

    kind = "canceled"
    code = grpc.StatusCode.CANCELLED


def classify(exc: BaseException) -> tuple[str, grpc.StatusCode]:
    """Returns the wire name and status code of exc ("" and UNKNOWN for an
    exception of no kind)."""
    if isinstance(exc, TransportError):
        return exc.kind, exc.code
    return "", grpc.StatusCode.UNKNOWN


def full_message(op: str, object_id: Optional[str], message: str) -> str:
    """Formats an error as Go's TransferError does."""
    if not object_id:
        return f"transport {op}: {message}"
    return f"transport {op} of object {object_id}: {message}"
