"""pyshm: goray's shared-memory tensor transport, written in Python.

It mirrors the Go shm plugin (plugins/shm): one-sided, same node, zero copy.
A source's tensors already live in /dev/shm segments. extract_metadata pins
them (a reference count per segment) and publishes a small manifest
segment, "goray-t-pym-<object id>", holding the buffer handles and layout;
the transport data is the manifest's contents. receive on the destination
checks the manifest and returns tensors whose buffers are the source's own
(nothing is copied), or copies once into the caller's targets.
garbage_collect removes the manifest and unlinks the segments it owns once
no object references them. A receive without transport data waits for the
manifest to appear, until the context ends or the object is aborted.

Installed (pip install sdk/python/examples/pyshm), the command
``goray-transport-pyshm`` is the plugin binary.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
from dataclasses import dataclass
from typing import Dict, List, Optional

import goray_plugin as gp
from goray_plugin import shmem

NAME = "pyshm"
#: Starts the name of every manifest segment (under shmem.PREFIX, so that
#: leftovers of a crash can be found by name).
MANIFEST_PREFIX = shmem.PREFIX + "pym-"
#: Bounds the size of transport data accepted.
MAX_MANIFEST = 4 << 20
#: Bytes a receive into targets copies between checks of its context.
COPY_CHUNK = 8 << 20

log = logging.getLogger("pyshm")


def manifest_name(object_id: str) -> str:
    return MANIFEST_PREFIX + object_id


@dataclass
class Config:
    """The plugin's ``config { ... }`` block."""

    max_poll: float = gp.attribute(0.02, type="duration",
                                   doc="Longest interval between two looks for an object a receive waits for.")


_MANIFEST_KEYS = {"v", "object", "source", "nonce", "owned", "tensors"}
_TENSOR_KEYS = {"dtype", "shape", "device", "segment", "offset", "length"}


def parse_manifest(object_id: str, data: bytes) -> dict:
    """Parses and checks transport data; BadMetadataError when it is not a
    manifest of this object."""
    bad = gp.BadMetadataError
    if len(data) > MAX_MANIFEST:
        raise bad(f"bad transport metadata: transport data of {len(data)} bytes is too large")
    try:
        m = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise bad(f"bad transport metadata: transport data does not parse: {e}") from None
    if not isinstance(m, dict) or set(m) - _MANIFEST_KEYS:
        raise bad("bad transport metadata: transport data is not a pyshm manifest")
    if m.get("v") != 1:
        raise bad(f"bad transport metadata: transport data version {m.get('v')!r}, want 1")
    if m.get("object") != object_id:
        raise bad(f"bad transport metadata: transport data is for object {str(m.get('object'))[:40]!r}")
    ts = m.get("tensors")
    if not isinstance(ts, list):
        raise bad("bad transport metadata: manifest has no tensor list")
    for t in ts:
        if (not isinstance(t, dict) or set(t) - _TENSOR_KEYS or not isinstance(t.get("dtype"), str)
                or not isinstance(t.get("shape"), list) or not all(isinstance(d, int) for d in t["shape"])
                or not isinstance(t.get("length", 0), int) or not isinstance(t.get("offset", 0), int)
                or not isinstance(t.get("segment", ""), str) or not isinstance(t.get("device", ""), str)):
            raise bad("bad transport metadata: malformed tensor in manifest")
    return m


def _tensor(mt: dict) -> gp.Tensor:
    return gp.Tensor(dtype=mt["dtype"], shape=list(mt["shape"]), device=mt.get("device", ""),
                     buffer=gp.Buffer(segment=mt.get("segment", ""), offset=mt.get("offset", 0), length=mt.get("length", 0)))


def check_tensor(i: int, t: gp.Tensor) -> None:
    """Checks a tensor's layout, device and that its bytes exist."""
    try:
        t.validate()
    except gp.BadMetadataError as e:
        raise gp.BadMetadataError(f"tensor {i}: {e}") from None
    if not t.meta().is_cpu():
        raise gp.NotSupportedError(f"tensor {i} is on device {t.device!r}: not supported (pyshm moves cpu tensors only)")
    if t.buffer.length == 0:
        return
    try:
        size = shmem.stat(t.buffer.segment)
    except shmem.ShmemError as e:
        raise gp.BadMetadataError(f"bad transport metadata: tensor {i}: {e}") from None
    if t.buffer.offset > size or t.buffer.length > size - t.buffer.offset:
        raise gp.BadMetadataError(
            f"bad transport metadata: tensor {i}: bytes [{t.buffer.offset}, {t.buffer.offset + t.buffer.length}) "
            f"outside segment {t.buffer.segment} of {size} bytes")


def check_targets(metas: List[gp.TensorMeta], targets: List[gp.Tensor]) -> None:
    if len(targets) != len(metas):
        raise gp.BadMetadataError(f"bad transport metadata: {len(targets)} targets for {len(metas)} tensors")
    for i, tg in enumerate(targets):
        check_tensor(i, tg)
        if not tg.meta().same(metas[i]):
            raise gp.BadMetadataError(f"bad transport metadata: target {i} is {tg.meta()}, tensor is {metas[i]}")


class _Object:
    def __init__(self, manifest: bytes, segments: List[str]):
        self.manifest = manifest
        self.segments = segments


class _SegRef:
    def __init__(self) -> None:
        self.refs = 0
        self.owned = False


class ShmTransport(gp.Transport):
    """The shared-memory transport."""

    version = "0.1.0"

    def __init__(self, max_poll: float = 0.02):
        self.max_poll = max_poll
        self.aborts = gp.Aborts()
        self._lock = threading.Lock()
        self._objects: Dict[str, _Object] = {}
        self._segs: Dict[str, _SegRef] = {}

    # Optional: the config block, as a dataclass.
    def config_schema(self) -> type:
        return Config

    def configure(self, ctx: gp.Context, c: Config) -> None:
        if c.max_poll <= 0:
            raise gp.ConfigError(f"max_poll: want a positive duration, got {c.max_poll}s")
        self.max_poll = c.max_poll

    def info(self, ctx: gp.Context) -> gp.InfoResponse:
        return gp.InfoResponse(name=NAME, one_sided=True, can_abort=True, same_node=True)

    def extract_metadata(self, ctx: gp.Context, req: gp.ExtractMetadataRequest) -> gp.ExtractMetadataResponse:
        oid = req.object_id
        gp.valid_object_id(oid)
        ctx.check()
        tensors, metas, segs = [], [], []
        for i, t in enumerate(req.tensors):
            check_tensor(i, t)
            metas.append(t.meta())
            mt = {"dtype": t.dtype, "shape": list(t.shape), "length": t.buffer.length}
            if t.device:
                mt["device"] = t.device
            if t.buffer.length > 0:
                mt["segment"], mt["offset"] = t.buffer.segment, t.buffer.offset
                if t.buffer.segment not in segs:
                    segs.append(t.buffer.segment)
            tensors.append(mt)
        m = {"v": 1, "object": oid, "source": req.source, "nonce": secrets.token_hex(8),
             "owned": req.transfer_ownership, "tensors": tensors}
        data = json.dumps(m, separators=(",", ":")).encode()
        with self._lock:
            if oid in self._objects:
                raise gp.BadMetadataError("bad transport metadata: object already extracted")
            try:
                shmem.publish(manifest_name(oid), data)
            except shmem.ExistsError:
                raise gp.BadMetadataError("bad transport metadata: object already published by another source") from None
            self._objects[oid] = _Object(data, segs)
            for s in segs:
                r = self._segs.setdefault(s, _SegRef())
                r.refs += 1
                r.owned = r.owned or req.transfer_ownership
        log.debug("extracted object %s: %d tensors, %d segments", oid, len(tensors), len(segs))
        return gp.ExtractMetadataResponse(tensors=metas, transport_data=data)

    def receive(self, ctx: gp.Context, req: gp.ReceiveRequest) -> gp.ReceiveResponse:
        oid = req.object_id
        gp.valid_object_id(oid)
        call, done = self.aborts.begin(ctx, oid)
        try:
            return self._receive(call, req)
        finally:
            done()

    def _receive(self, ctx: gp.Context, req: gp.ReceiveRequest) -> gp.ReceiveResponse:
        oid = req.object_id
        if req.tensors is not None and req.targets is not None:
            check_targets(req.tensors, req.targets)
        if not req.transport_data:
            m = parse_manifest(oid, self._wait_manifest(ctx, oid))
        else:
            m = parse_manifest(oid, req.transport_data)
            try:
                cur = shmem.read_all(manifest_name(oid), MAX_MANIFEST)
            except shmem.NotFoundError:
                raise gp.BadMetadataError("bad transport metadata: object unknown or already collected") from None
            if cur != req.transport_data:
                raise gp.BadMetadataError("bad transport metadata: transport data is stale (the object was extracted again)")
        tensors = [_tensor(mt) for mt in m["tensors"]]
        metas = [t.meta() for t in tensors]
        for i, t in enumerate(tensors):
            check_tensor(i, t)
        if req.tensors is not None:
            if len(req.tensors) != len(metas):
                raise gp.BadMetadataError(f"bad transport metadata: request lists {len(req.tensors)} tensors, object has {len(metas)}")
            for i, (want, have) in enumerate(zip(req.tensors, metas)):
                if not want.same(have):
                    raise gp.BadMetadataError(f"bad transport metadata: tensor {i} is {have}, request says {want}")
        if req.targets is None:
            return gp.ReceiveResponse(tensors=tensors)
        check_targets(metas, req.targets)
        out = []
        for i, (src, dst) in enumerate(zip(tensors, req.targets)):
            self._copy_into(ctx, i, dst, src)
            out.append(gp.Tensor(dtype=dst.dtype, shape=list(metas[i].shape), device=dst.device, buffer=dst.buffer))
        return gp.ReceiveResponse(tensors=out)

    def _wait_manifest(self, ctx: gp.Context, oid: str) -> bytes:
        delay = 0.0005
        while True:
            try:
                return shmem.read_all(manifest_name(oid), MAX_MANIFEST)
            except shmem.NotFoundError:
                pass
            if ctx.wait(delay):
                raise ctx.error()
            delay = min(2 * delay, self.max_poll)

    def _copy_into(self, ctx: gp.Context, i: int, dst: gp.Tensor, src: gp.Tensor) -> None:
        n = src.buffer.length
        if n == 0:
            return
        try:
            with shmem.mapped(src.buffer.segment, src.buffer.offset, n) as frm, \
                    shmem.mapped(dst.buffer.segment, dst.buffer.offset, dst.buffer.length) as to:
                for off in range(0, n, COPY_CHUNK):
                    ctx.check()
                    end = min(off + COPY_CHUNK, n)
                    to[off:end] = frm[off:end]
        except shmem.ShmemError as e:
            raise gp.BadMetadataError(f"bad transport metadata: tensor {i}: {e}") from None

    def garbage_collect(self, ctx: gp.Context, req: gp.GarbageCollectRequest) -> None:
        oid = req.object_id
        gp.valid_object_id(oid)
        self.aborts.forget(oid)
        with self._lock:
            obj = self._objects.pop(oid, None)
            if obj is None:
                self._collect_orphan(oid, req.transport_data)
                return
            errs = []
            try:
                shmem.unlink(manifest_name(oid))
            except shmem.NotFoundError:
                pass
            except shmem.ShmemError as e:
                errs.append(str(e))
            for s in obj.segments:
                r = self._segs.get(s)
                if r is None:
                    continue
                r.refs -= 1
                if r.refs > 0:
                    continue
                del self._segs[s]
                if not r.owned:
                    continue
                try:
                    shmem.unlink(s)
                except shmem.NotFoundError:
                    pass
                except shmem.ShmemError as e:
                    errs.append(str(e))
        if errs:
            raise gp.TransportError("; ".join(errs))

    def _collect_orphan(self, oid: str, data: bytes) -> None:
        """Collects an object an earlier instance extracted (before a
        plugin restart): when data matches the published manifest, the
        manifest goes and, if owned, each segment no other manifest uses."""
        if not data:
            return
        try:
            cur = shmem.read_all(manifest_name(oid), MAX_MANIFEST)
        except shmem.ShmemError:
            return
        if cur != data:
            return
        m = parse_manifest(oid, cur)
        try:
            shmem.unlink(manifest_name(oid))
        except shmem.NotFoundError:
            pass
        if not m.get("owned"):
            return
        in_use = set(self._segs)
        for name in shmem.list_prefix(MANIFEST_PREFIX):
            try:
                other = json.loads(shmem.read_all(name, MAX_MANIFEST))
                in_use.update(t.get("segment", "") for t in other.get("tensors", []))
            except (shmem.ShmemError, ValueError, AttributeError, TypeError):
                continue
        for t in m["tensors"]:
            s = t.get("segment", "")
            if s and s not in in_use:
                in_use.add(s)
                try:
                    shmem.unlink(s)
                except shmem.NotFoundError:
                    pass
        log.info("collected object %s extracted by an earlier instance", oid)

    def abort(self, ctx: gp.Context, req: gp.AbortRequest) -> None:
        gp.valid_object_id(req.object_id)
        self.aborts.abort(req.object_id, req.reason)
        log.debug("aborted object %s: %s", req.object_id, req.reason)

    def objects(self) -> tuple:
        """How many objects this instance holds and segments it pins."""
        with self._lock:
            return len(self._objects), len(self._segs)


def main(argv: Optional[List[str]] = None) -> None:
    """The plugin binary's entry point (goray-transport-pyshm)."""
    gp.serve(ShmTransport())
