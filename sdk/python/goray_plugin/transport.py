"""The transport interface, its request and response types, and tensors.

A Python transport subclasses :class:`Transport` and passes an instance to
:func:`goray_plugin.serve`. The types mirror sdk/transport's Go types field
for field; only handles cross the boundary: a :class:`Tensor`'s bytes live
in a named shared-memory segment (see :mod:`goray_plugin.shmem`) and its
:class:`Buffer` says where.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import List, Optional

from . import shmem
from .context import Context
from .errors import BadMetadataError, NotSupportedError

#: The newest version of the transport plugin protocol this SDK speaks.
API_VERSION = 1

#: The longest object id accepted (in hex digits).
MAX_OBJECT_ID_LEN = 128

#: Bytes per element of every known dtype (sdk/transport.DType).
DTYPE_SIZES = {
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "bool": 1,
}

#: The device name of host memory.
CPU = "cpu"

_MAX_INT64 = (1 << 63) - 1


def valid_object_id(object_id: str) -> None:
    """Raises BadMetadataError unless object_id is a non-empty, even-length
    string of lowercase hex digits of at most MAX_OBJECT_ID_LEN characters."""
    if not object_id:
        raise BadMetadataError("bad transport metadata: empty object id")
    if len(object_id) > MAX_OBJECT_ID_LEN or len(object_id) % 2:
        raise BadMetadataError(
            f"bad transport metadata: object id {object_id[:40]!r} has length {len(object_id)} "
            f"(want an even length up to {MAX_OBJECT_ID_LEN})"
        )
    if any(c not in "0123456789abcdef" for c in object_id):
        raise BadMetadataError(f"bad transport metadata: object id {object_id[:40]!r} is not lowercase hex")


@dataclass
class Buffer:
    """A byte range of a shared-memory segment (empty segment: zero bytes)."""

    segment: str = ""
    offset: int = 0
    length: int = 0


@dataclass
class TensorMeta:
    """A tensor's layout without its bytes."""

    dtype: str = ""
    shape: List[int] = field(default_factory=list)
    device: str = ""

    def byte_size(self) -> int:
        """Bytes the layout occupies, or -1 if it is invalid."""
        es = DTYPE_SIZES.get(self.dtype, 0)
        if es == 0:
            return -1
        n = 1
        for d in self.shape:
            if d < 0:
                return -1
            n *= d
        if n * es > _MAX_INT64:
            return -1
        return n * es

    def validate(self) -> None:
        """Raises BadMetadataError for an unknown dtype or a bad shape."""
        if self.dtype not in DTYPE_SIZES:
            raise BadMetadataError(f"bad transport metadata: unknown dtype {self.dtype!r}")
        if self.byte_size() < 0:
            raise BadMetadataError(f"bad transport metadata: invalid shape {list(self.shape)}")

    def is_cpu(self) -> bool:
        return (self.device or CPU) == CPU

    def same(self, other: "TensorMeta") -> bool:
        """Whether two layouts are equal (an empty device equals "cpu")."""
        return (
            self.dtype == other.dtype
            and list(self.shape) == list(other.shape)
            and (self.device or CPU) == (other.device or CPU)
        )

    def __str__(self) -> str:
        return f"{self.dtype}[{' '.join(str(d) for d in self.shape)}]@{self.device or CPU}"


@dataclass
class Tensor:
    """A dense, row-major tensor whose bytes live in shared memory."""

    dtype: str = ""
    shape: List[int] = field(default_factory=list)
    device: str = ""
    buffer: Buffer = field(default_factory=Buffer)

    def meta(self) -> TensorMeta:
        return TensorMeta(self.dtype, list(self.shape), self.device)

    def validate(self) -> None:
        """Checks the layout, that the buffer's length matches it and that a
        non-empty buffer names a valid segment (without looking at it).
        Raises BadMetadataError."""
        m = self.meta()
        m.validate()
        size = m.byte_size()
        if self.buffer.length != size:
            raise BadMetadataError(
                f"bad transport metadata: {m} needs {size} bytes, buffer has {self.buffer.length}"
            )
        if self.buffer.offset < 0:
            raise BadMetadataError(f"bad transport metadata: negative buffer offset {self.buffer.offset}")
        if self.buffer.length > 0:
            try:
                shmem.valid_name(self.buffer.segment)
            except shmem.ShmemError as e:
                raise BadMetadataError(f"bad transport metadata: {e}") from None


@dataclass
class InfoResponse:
    """Describes a transport: its backend name and capabilities."""

    name: str = ""
    one_sided: bool = False
    can_abort: bool = False
    same_node: bool = False


@dataclass
class ActorHasTransportRequest:
    actor_id: str = ""
    node_id: str = ""


@dataclass
class ExtractMetadataRequest:
    object_id: str = ""
    source: str = ""
    tensors: List[Tensor] = field(default_factory=list)
    transfer_ownership: bool = False


@dataclass
class ExtractMetadataResponse:
    tensors: List[TensorMeta] = field(default_factory=list)
    transport_data: bytes = b""


@dataclass
class CommunicatorMetadataRequest:
    object_id: str = ""
    source: str = ""
    destination: str = ""


@dataclass
class SendRequest:
    object_id: str = ""
    source: str = ""
    destination: str = ""
    tensors: List[TensorMeta] = field(default_factory=list)
    transport_data: bytes = b""
    communicator_data: bytes = b""


@dataclass
class ReceiveRequest:
    object_id: str = ""
    source: str = ""
    destination: str = ""
    #: The layout from ExtractMetadataResponse; None when the caller gave
    #: none (then nothing is checked against it).
    tensors: Optional[List[TensorMeta]] = None
    transport_data: bytes = b""
    communicator_data: bytes = b""
    #: Caller-owned tensors to receive into; None when not given.
    targets: Optional[List[Tensor]] = None


@dataclass
class ReceiveResponse:
    tensors: List[Tensor] = field(default_factory=list)
    #: Segments the transport created for this receive; they belong to the
    #: caller.
    allocated: List[str] = field(default_factory=list)


@dataclass
class GarbageCollectRequest:
    object_id: str = ""
    transport_data: bytes = b""


@dataclass
class AbortRequest:
    object_id: str = ""
    reason: str = ""


class Transport(abc.ABC):
    """A tensor transport: subclass it and pass an instance to serve().

    Methods may be called concurrently from several threads. Each receives
    the call's :class:`~goray_plugin.context.Context` and a request, and
    returns a response or raises one of the typed errors of
    :mod:`goray_plugin.errors`. The duties are those of sdk/transport's
    Transport interface:

    * ``info`` — name and capabilities; cheap and constant.
    * ``actor_has_transport`` — whether an actor can use it (owner).
    * ``extract_metadata`` — describe and pin freshly produced tensors
      (source); with ``transfer_ownership`` the transport owns their
      segments and unlinks them at garbage collection.
    * ``communicator_metadata`` — who talks to whom (owner).
    * ``send`` — push an object to the destination (source, two-sided only).
    * ``receive`` — deliver an object (destination), into ``targets`` when
      given; blocks until the data is there, the context is done or the
      object is aborted; bad metadata fails at once with BadMetadataError.
    * ``garbage_collect`` — release what extract_metadata set up; an
      unknown object is not an error.
    * ``abort`` — fail pending and later send/receive calls of the object
      with AbortedError.

    Optional: a ``config_schema()`` method returning a
    :class:`~goray_plugin.config.Schema` (or a dataclass type, see
    :mod:`goray_plugin.config`) with ``configure(ctx, cfg)``; ``health(ctx)``
    raising when unhealthy; a ``version`` attribute.
    """

    @abc.abstractmethod
    def info(self, ctx: Context) -> InfoResponse:
        """Reports the backend name and capabilities."""

    def actor_has_transport(self, ctx: Context, req: ActorHasTransportRequest) -> bool:
        """Whether the actor can use this transport (default: every actor)."""
        return True

    @abc.abstractmethod
    def extract_metadata(self, ctx: Context, req: ExtractMetadataRequest) -> ExtractMetadataResponse:
        """Describes an object's tensors and prepares them for transfer."""

    def communicator_metadata(self, ctx: Context, req: CommunicatorMetadataRequest) -> bytes:
        """Opaque communicator data for a transfer (default: none, after
        checking the object id)."""
        valid_object_id(req.object_id)
        return b""

    def send(self, ctx: Context, req: SendRequest) -> None:
        """Pushes an object to the destination (default: NotSupportedError,
        right for one-sided transports)."""
        raise NotSupportedError("not supported by this transport: it is one-sided; the destination reads")

    @abc.abstractmethod
    def receive(self, ctx: Context, req: ReceiveRequest) -> ReceiveResponse:
        """Delivers an object's tensors on the destination."""

    @abc.abstractmethod
    def garbage_collect(self, ctx: Context, req: GarbageCollectRequest) -> None:
        """Releases what extract_metadata set up for the object."""

    def abort(self, ctx: Context, req: AbortRequest) -> None:
        """Fails the object's pending and later transfers (default:
        NotSupportedError; transports whose info says can_abort override)."""
        raise NotSupportedError("not supported by this transport: it cannot abort")
