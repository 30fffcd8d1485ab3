"""goray_plugin: write goray plugins in Python.

A transport subclasses :class:`Transport` and serves itself::

    from goray_plugin import Transport, serve

    class MyTransport(Transport):
        ...

    if __name__ == "__main__":
        serve(MyTransport())

``serve`` speaks HashiCorp go-plugin's handshake (with the host's automatic
mutual TLS), the grpc.health.v1 service, go-plugin's shutdown call, goray's
PluginInfo service (identity, config schema, configure, health) and the
Transport service (goray.transport.v1, API version 1). The wire contract is
sdk/proto in the goray repository; the Go conformance suite
(sdk/transport/transporttest) runs against Python plugins too.
"""

from __future__ import annotations

import logging

from . import config, shmem
from .config import Attribute, ConfigError, Schema, attribute, parse_duration
from .context import Aborts, Context
from .errors import (
    AbortedError,
    BadMetadataError,
    CanceledError,
    NotSupportedError,
    TransferTimeoutError,
    TransportError,
)
from .transport import (
    API_VERSION,
    CPU,
    DTYPE_SIZES,
    AbortRequest,
    ActorHasTransportRequest,
    Buffer,
    CommunicatorMetadataRequest,
    ExtractMetadataRequest,
    ExtractMetadataResponse,
    GarbageCollectRequest,
    InfoResponse,
    ReceiveRequest,
    ReceiveResponse,
    SendRequest,
    Tensor,
    TensorMeta,
    Transport,
    valid_object_id,
)

__version__ = "0.1.0"

KIND_TRANSPORT = "transport"


def serve(impl: Transport) -> None:
    """Runs impl as a goray transport plugin and exits the process when the
    host shuts it down; run by hand (without the host's handshake), it
    prints what it is and exits with status 1. The plugin's name is what
    impl.info reports; its version is impl.version when set."""
    from . import goplugin
    from ._bridge import PluginInfoServicer, TransportServicer
    from ._proto.goray.plugin.v1 import plugin_pb2_grpc
    from ._proto.goray.transport.v1 import transport_pb2_grpc

    goplugin.configure_logging()
    name = impl.info(Context.background()).name
    version = str(getattr(impl, "version", "") or "")
    info = PluginInfoServicer(KIND_TRANSPORT, name, version, [API_VERSION], impl)

    def register_v1(server) -> None:
        info.negotiated = API_VERSION
        plugin_pb2_grpc.add_PluginInfoServicer_to_server(info, server)
        transport_pb2_grpc.add_TransportServicer_to_server(TransportServicer(impl), server)

    logging.getLogger("goray_plugin").debug("serving transport %s", name)
    goplugin.run(KIND_TRANSPORT, name, version, {API_VERSION: register_v1})


__all__ = [
    "API_VERSION", "CPU", "DTYPE_SIZES", "KIND_TRANSPORT",
    "AbortRequest", "AbortedError", "Aborts", "ActorHasTransportRequest", "Attribute", "BadMetadataError",
    "Buffer", "CanceledError", "CommunicatorMetadataRequest", "ConfigError", "Context", "ExtractMetadataRequest",
    "ExtractMetadataResponse", "GarbageCollectRequest", "InfoResponse", "NotSupportedError", "ReceiveRequest",
    "ReceiveResponse", "Schema", "SendRequest", "Tensor", "TensorMeta", "TransferTimeoutError", "Transport",
    "TransportError", "attribute", "config", "parse_duration", "serve", "shmem", "valid_object_id",
]
