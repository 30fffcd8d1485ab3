"""The gRPC servicers that adapt a Python Transport to the wire protocol:
the Transport service (goray.transport.v1) and the PluginInfo service
(goray.plugin.v1). Plugin authors never use this module directly."""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import traceback
from typing import Any, Callable, List, Optional

import grpc
from google.protobuf import any_pb2
from google.rpc import status_pb2
from grpc_status import rpc_status

from . import config as cfgmod
from .context import Context
from .errors import (
    OP_ABORT,
    OP_ACTOR_HAS_TRANSPORT,
    OP_COMMUNICATOR_METADATA,
    OP_EXTRACT_METADATA,
    OP_GARBAGE_COLLECT,
    OP_INFO,
    OP_RECEIVE,
    OP_SEND,
    TransportError,
    classify,
    full_message,
)
from ._proto.goray.plugin.v1 import plugin_pb2, plugin_pb2_grpc
from ._proto.goray.transport.v1 import transport_pb2, transport_pb2_grpc
from . import transport as tr

log = logging.getLogger("goray_plugin")


def call_context(context: grpc.ServicerContext) -> Context:
    """A Context for one RPC: done when the caller cancels or its deadline
    passes."""
    rem = context.time_remaining()
    deadline = None if rem is None else time.monotonic() + rem
    ctx = Context(deadline=deadline)
    context.add_callback(lambda: ctx.cancel())
    return ctx


def abort_with(context: grpc.ServicerContext, op: str, object_id: str, exc: BaseException) -> None:
    """Ends the RPC with exc as a status carrying an ErrorInfo detail, as
    sdk/transport's toStatus does."""
    kind, code = classify(exc)
    msg = str(exc) or type(exc).__name__
    if isinstance(exc, TransportError):
        object_id = exc.object_id or object_id
        op = exc.op or op
    else:
        msg = f"{type(exc).__name__}: {msg}"
    info = transport_pb2.ErrorInfo(kind=kind, object_id=object_id, op=op, message=msg)
    detail = any_pb2.Any()
    detail.Pack(info)
    st = status_pb2.Status(code=code.value[0], message=full_message(op, object_id, msg), details=[detail])
    context.abort_with_status(rpc_status.to_status(st))


def _meta_from_pb(m: transport_pb2.TensorMeta) -> tr.TensorMeta:
    return tr.TensorMeta(dtype=m.dtype, shape=list(m.shape), device=m.device)


def _meta_to_pb(m: tr.TensorMeta) -> transport_pb2.TensorMeta:
    return transport_pb2.TensorMeta(dtype=m.dtype, shape=list(m.shape), device=m.device)


def _tensor_from_pb(t: transport_pb2.Tensor) -> tr.Tensor:
    return tr.Tensor(
        dtype=t.meta.dtype,
        shape=list(t.meta.shape),
        device=t.meta.device,
        buffer=tr.Buffer(segment=t.buffer.segment, offset=t.buffer.offset, length=t.buffer.length),
    )


def _tensor_to_pb(t: tr.Tensor) -> transport_pb2.Tensor:
    return transport_pb2.Tensor(
        meta=transport_pb2.TensorMeta(dtype=t.dtype, shape=list(t.shape), device=t.device),
        buffer=transport_pb2.Buffer(segment=t.buffer.segment, offset=t.buffer.offset, length=t.buffer.length),
    )


def _or_none(xs: List[Any]) -> Optional[List[Any]]:
    # An empty repeated field is "not given", as a nil slice in Go.
    return xs if xs else None


class TransportServicer(transport_pb2_grpc.TransportServicer):
    """Serves a Transport as goray.transport.v1.Transport."""

    def __init__(self, impl: tr.Transport):
        self._impl = impl

    def _run(self, context: grpc.ServicerContext, op: str, object_id: str, fn: Callable[[Context], Any]) -> Any:
        ctx = call_context(context)
        try:
            return fn(ctx)
        except Exception as exc:  # every failure crosses the boundary as a status
            if not isinstance(exc, TransportError):
                log.error("transport %s of object %s failed: %s", op, object_id, traceback.format_exc())
            abort_with(context, op, object_id, exc)
        finally:
            ctx.cancel()

    def Info(self, request, context):
        def fn(ctx):
            r = self._impl.info(ctx) or tr.InfoResponse()
            return transport_pb2.InfoResponse(name=r.name, one_sided=r.one_sided, can_abort=r.can_abort, same_node=r.same_node)

        return self._run(context, OP_INFO, "", fn)

    def ActorHasTransport(self, request, context):
        req = tr.ActorHasTransportRequest(actor_id=request.actor_id, node_id=request.node_id)
        return self._run(context, OP_ACTOR_HAS_TRANSPORT, "", lambda ctx: transport_pb2.ActorHasTransportResponse(
            has_transport=bool(self._impl.actor_has_transport(ctx, req))))

    def ExtractMetadata(self, request, context):
        req = tr.ExtractMetadataRequest(
            object_id=request.object_id,
            source=request.source,
            tensors=[_tensor_from_pb(t) for t in request.tensors],
            transfer_ownership=request.transfer_ownership,
        )

        def fn(ctx):
            r = self._impl.extract_metadata(ctx, req) or tr.ExtractMetadataResponse()
            return transport_pb2.ExtractMetadataResponse(tensors=[_meta_to_pb(m) for m in r.tensors], transport_data=r.transport_data)

        return self._run(context, OP_EXTRACT_METADATA, req.object_id, fn)

    def CommunicatorMetadata(self, request, context):
        req = tr.CommunicatorMetadataRequest(object_id=request.object_id, source=request.source, destination=request.destination)
        return self._run(context, OP_COMMUNICATOR_METADATA, req.object_id, lambda ctx: transport_pb2.CommunicatorMetadataResponse(
            data=self._impl.communicator_metadata(ctx, req) or b""))

    def Send(self, request, context):
        req = tr.SendRequest(
            object_id=request.object_id,
            source=request.source,
            destination=request.destination,
            tensors=[_meta_from_pb(m) for m in request.tensors],
            transport_data=request.transport_data,
            communicator_data=request.communicator_data,
        )

        def fn(ctx):
            self._impl.send(ctx, req)
            return transport_pb2.SendResponse()

        return self._run(context, OP_SEND, req.object_id, fn)

    def Receive(self, request, context):
        req = tr.ReceiveRequest(
            object_id=request.object_id,
            source=request.source,
            destination=request.destination,
            tensors=_or_none([_meta_from_pb(m) for m in request.tensors]),
            transport_data=request.transport_data,
            communicator_data=request.communicator_data,
            targets=_or_none([_tensor_from_pb(t) for t in request.targets]),
        )

        def fn(ctx):
            r = self._impl.receive(ctx, req) or tr.ReceiveResponse()
            return transport_pb2.ReceiveResponse(tensors=[_tensor_to_pb(t) for t in r.tensors], allocated=list(r.allocated))

        return self._run(context, OP_RECEIVE, req.object_id, fn)

    def GarbageCollect(self, request, context):
        req = tr.GarbageCollectRequest(object_id=request.object_id, transport_data=request.transport_data)

        def fn(ctx):
            self._impl.garbage_collect(ctx, req)
            return transport_pb2.GarbageCollectResponse()

        return self._run(context, OP_GARBAGE_COLLECT, req.object_id, fn)

    def Abort(self, request, context):
        req = tr.AbortRequest(object_id=request.object_id, reason=request.reason)

        def fn(ctx):
            self._impl.abort(ctx, req)
            return transport_pb2.AbortResponse()

        return self._run(context, OP_ABORT, req.object_id, fn)


class PluginInfoServicer(plugin_pb2_grpc.PluginInfoServicer):
    """Serves goray.plugin.v1.PluginInfo for a plugin: identity, config
    schema, configure and health."""

    def __init__(self, kind: str, name: str, version: str, api_versions: List[int], impl: Any):
        self.kind, self.name, self.version = kind, name, version
        self.api_versions = sorted(api_versions)
        self.negotiated = 0
        self._impl = impl
        self._lock = threading.Lock()
        self._config_class: Optional[type] = None
        spec = impl.config_schema() if hasattr(impl, "config_schema") else None
        if isinstance(spec, type):
            self._config_class = spec
            spec = cfgmod.schema_of(spec)
        self.schema: cfgmod.Schema = spec or cfgmod.Schema()
        self.schema.validate()

    def GetInfo(self, request, context):
        return plugin_pb2.GetInfoResponse(
            kind=self.kind,
            name=self.name,
            version=self.version,
            api_versions=self.api_versions,
            api_version=self.negotiated,
            pid=os.getpid(),
        )

    def GetSchema(self, request, context):
        return plugin_pb2.GetSchemaResponse(schema=self.schema.to_proto())

    def Configure(self, request, context):
        try:
            raw = json.loads(request.config_json) if request.config_json else {}
            if not isinstance(raw, dict):
                raise cfgmod.ConfigError("the config is not a JSON object")
            cfg = self.schema.normalize(raw)
            value: Any = cfg
            if self._config_class is not None:
                value = cfgmod.decode(self._config_class, self.schema, cfg)
            if hasattr(self._impl, "configure"):
                ctx = call_context(context)
                try:
                    self._impl.configure(ctx, value)
                finally:
                    ctx.cancel()
        except Exception as exc:  # a rejected config: INVALID_ARGUMENT naming the problem
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc) or type(exc).__name__)
        log.debug("configured")
        return plugin_pb2.ConfigureResponse()

    def Health(self, request, context):
        if not hasattr(self._impl, "health"):
            return plugin_pb2.HealthResponse(healthy=True)
        ctx = call_context(context)
        try:
            self._impl.health(ctx)
        except Exception as exc:
            return plugin_pb2.HealthResponse(healthy=False, message=str(exc) or type(exc).__name__)
        finally:
            ctx.cancel()
        return plugin_pb2.HealthResponse(healthy=True)


