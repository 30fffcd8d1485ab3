from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Buffer(_message.Message):
    __slots__ = ("segment", "offset", "length")
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    segment: str
    offset: int
    length: int
    def __init__(self, segment: _Optional[str] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class TensorMeta(_message.Message):
    __slots__ = ("dtype", "shape", "device")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    device: str
    def __init__(self, dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., device: _Optional[str] = ...) -> None: ...

class Tensor(_message.Message):
    __slots__ = ("meta", "buffer")
    META_FIELD_NUMBER: _ClassVar[int]
    BUFFER_FIELD_NUMBER: _ClassVar[int]
    meta: TensorMeta
    buffer: Buffer
    def __init__(self, meta: _Optional[_Union[TensorMeta, _Mapping]] = ..., buffer: _Optional[_Union[Buffer, _Mapping]] = ...) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InfoResponse(_message.Message):
    __slots__ = ("name", "one_sided", "can_abort", "same_node")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ONE_SIDED_FIELD_NUMBER: _ClassVar[int]
    CAN_ABORT_FIELD_NUMBER: _ClassVar[int]
    SAME_NODE_FIELD_NUMBER: _ClassVar[int]
    name: str
    one_sided: bool
    can_abort: bool
    same_node: bool
    def __init__(self, name: _Optional[str] = ..., one_sided: _Optional[bool] = ..., can_abort: _Optional[bool] = ..., same_node: _Optional[bool] = ...) -> None: ...

class ActorHasTransportRequest(_message.Message):
    __slots__ = ("actor_id", "node_id")
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    actor_id: str
    node_id: str
    def __init__(self, actor_id: _Optional[str] = ..., node_id: _Optional[str] = ...) -> None: ...

class ActorHasTransportResponse(_message.Message):
    __slots__ = ("has_transport",)
    HAS_TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    has_transport: bool
    def __init__(self, has_transport: _Optional[bool] = ...) -> None: ...

class ExtractMetadataRequest(_message.Message):
    __slots__ = ("object_id", "source", "tensors", "transfer_ownership")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_OWNERSHIP_FIELD_NUMBER: _ClassVar[int]
    object_id: str
    source: str
    tensors: _containers.RepeatedCompositeFieldContainer[Tensor]
    transfer_ownership: bool
    def __init__(self, object_id: _Optional[str] = ..., source: _Optional[str] = ..., tensors: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., transfer_ownership: _Optional[bool] = ...) -> None: ...

class ExtractMetadataResponse(_message.Message):
    __slots__ = ("tensors", "transport_data")
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_DATA_FIELD_NUMBER: _ClassVar[int]
    tensors: _containers.RepeatedCompositeFieldContainer[TensorMeta]
    transport_data: bytes
    def __init__(self, tensors: _Optional[_Iterable[_Union[TensorMeta, _Mapping]]] = ..., transport_data: _Optional[bytes] = ...) -> None: ...

class CommunicatorMetadataRequest(_message.Message):
    __slots__ = ("object_id", "source", "destination")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    object_id: str
    source: str
    destination: str
    def __init__(self, object_id: _Optional[str] = ..., source: _Optional[str] = ..., destination: _Optional[str] = ...) -> None: ...

class CommunicatorMetadataResponse(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class SendRequest(_message.Message):
    __slots__ = ("object_id", "source", "destination", "tensors", "transport_data", "communicator_data")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_DATA_FIELD_NUMBER: _ClassVar[int]
    COMMUNICATOR_DATA_FIELD_NUMBER: _ClassVar[int]
    object_id: str
    source: str
    destination: str
    tensors: _containers.RepeatedCompositeFieldContainer[TensorMeta]
    transport_data: bytes
    communicator_data: bytes
    def __init__(self, object_id: _Optional[str] = ..., source: _Optional[str] = ..., destination: _Optional[str] = ..., tensors: _Optional[_Iterable[_Union[TensorMeta, _Mapping]]] = ..., transport_data: _Optional[bytes] = ..., communicator_data: _Optional[bytes] = ...) -> None: ...

class SendResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReceiveRequest(_message.Message):
    __slots__ = ("object_id", "source", "destination", "tensors", "transport_data", "communicator_data", "targets")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_DATA_FIELD_NUMBER: _ClassVar[int]
    COMMUNICATOR_DATA_FIELD_NUMBER: _ClassVar[int]
    TARGETS_FIELD_NUMBER: _ClassVar[int]
    object_id: str
    source: str
    destination: str
    tensors: _containers.RepeatedCompositeFieldContainer[TensorMeta]
    transport_data: bytes
    communicator_data: bytes
    targets: _containers.RepeatedCompositeFieldContainer[Tensor]
    def __init__(self, object_id: _Optional[str] = ..., source: _Optional[str] = ..., destination: _Optional[str] = ..., tensors: _Optional[_Iterable[_Union[TensorMeta, _Mapping]]] = ..., transport_data: _Optional[bytes] = ..., communicator_data: _Optional[bytes] = ..., targets: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ...) -> None: ...

class ReceiveResponse(_message.Message):
    __slots__ = ("tensors", "allocated")
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    tensors: _containers.RepeatedCompositeFieldContainer[Tensor]
    allocated: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tensors: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ..., allocated: _Optional[_Iterable[str]] = ...) -> None: ...

class GarbageCollectRequest(_message.Message):
    __slots__ = ("object_id", "transport_data")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_DATA_FIELD_NUMBER: _ClassVar[int]
    object_id: str
    transport_data: bytes
    def __init__(self, object_id: _Optional[str] = ..., transport_data: _Optional[bytes] = ...) -> None: ...

class GarbageCollectResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AbortRequest(_message.Message):
    __slots__ = ("object_id", "reason")
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    object_id: str
    reason: str
    def __init__(self, object_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class AbortResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ErrorInfo(_message.Message):
    __slots__ = ("kind", "object_id", "op", "message")
    KIND_FIELD_NUMBER: _ClassVar[int]
    OBJECT_ID_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    kind: str
    object_id: str
    op: str
    message: str
    def __init__(self, kind: _Optional[str] = ..., object_id: _Optional[str] = ..., op: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...
