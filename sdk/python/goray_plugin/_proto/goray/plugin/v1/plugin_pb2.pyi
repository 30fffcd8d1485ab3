from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetInfoResponse(_message.Message):
    __slots__ = ("kind", "name", "version", "api_versions", "api_version", "pid")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    API_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    version: str
    api_versions: _containers.RepeatedScalarFieldContainer[int]
    api_version: int
    pid: int
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., version: _Optional[str] = ..., api_versions: _Optional[_Iterable[int]] = ..., api_version: _Optional[int] = ..., pid: _Optional[int] = ...) -> None: ...

class GetSchemaRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetSchemaResponse(_message.Message):
    __slots__ = ("schema",)
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    schema: Schema
    def __init__(self, schema: _Optional[_Union[Schema, _Mapping]] = ...) -> None: ...

class Schema(_message.Message):
    __slots__ = ("attributes", "blocks")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Attribute
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Attribute, _Mapping]] = ...) -> None: ...
    class BlocksEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: BlockSchema
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[BlockSchema, _Mapping]] = ...) -> None: ...
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    attributes: _containers.MessageMap[str, Attribute]
    blocks: _containers.MessageMap[str, BlockSchema]
    def __init__(self, attributes: _Optional[_Mapping[str, Attribute]] = ..., blocks: _Optional[_Mapping[str, BlockSchema]] = ...) -> None: ...

class Attribute(_message.Message):
    __slots__ = ("type", "required", "optional", "sensitive", "description", "default_json")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_FIELD_NUMBER: _ClassVar[int]
    OPTIONAL_FIELD_NUMBER: _ClassVar[int]
    SENSITIVE_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_JSON_FIELD_NUMBER: _ClassVar[int]
    type: str
    required: bool
    optional: bool
    sensitive: bool
    description: str
    default_json: bytes
    def __init__(self, type: _Optional[str] = ..., required: _Optional[bool] = ..., optional: _Optional[bool] = ..., sensitive: _Optional[bool] = ..., description: _Optional[str] = ..., default_json: _Optional[bytes] = ...) -> None: ...

class BlockSchema(_message.Message):
    __slots__ = ("schema", "repeated")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    REPEATED_FIELD_NUMBER: _ClassVar[int]
    schema: Schema
    repeated: bool
    def __init__(self, schema: _Optional[_Union[Schema, _Mapping]] = ..., repeated: _Optional[bool] = ...) -> None: ...

class ConfigureRequest(_message.Message):
    __slots__ = ("config_json",)
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    config_json: bytes
    def __init__(self, config_json: _Optional[bytes] = ...) -> None: ...

class ConfigureResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HealthResponse(_message.Message):
    __slots__ = ("healthy", "message")
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    healthy: bool
    message: str
    def __init__(self, healthy: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...
