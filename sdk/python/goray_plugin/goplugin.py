"""The go-plugin side of a goray plugin written in Python.

HashiCorp go-plugin starts a plugin binary with a few environment variables
and reads one handshake line from its stdout::

    CORE-PROTOCOL-VERSION|APP-PROTOCOL-VERSION|NETWORK-TYPE|NETWORK-ADDR|PROTOCOL|SERVER-CERT

goray's host (package host) sets the magic cookie GORAY_PLUGIN, the API
versions it speaks (PLUGIN_PROTOCOL_VERSIONS), a directory for the plugin's
unix socket (PLUGIN_UNIX_SOCKET_DIR) and, because it enables go-plugin's
AutoMTLS, its own certificate (PLUGIN_CLIENT_CERT): the plugin answers with
a fresh self-signed certificate in the handshake line and accepts only
connections presenting the host's. On the connection the host calls the
grpc.health.v1 Health service (service "plugin" must be SERVING) and, to
stop the plugin, plugin.GRPCController/Shutdown. GRPCBroker and GRPCStdio
are optional; this SDK does not serve them (the host carries on without).
"""

from __future__ import annotations

import base64
import datetime
import json
import logging
import os
import signal
import sys
import tempfile
import threading
from concurrent import futures
from typing import Callable, Dict, List, Optional, Tuple

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

#: go-plugin's core protocol version.
CORE_PROTOCOL_VERSION = 1
#: goray's handshake (sdk/plugin.Handshake): the magic cookie only stops a
#: plugin binary from being run by hand by mistake.
MAGIC_COOKIE_KEY = "GORAY_PLUGIN"
MAGIC_COOKIE_VALUE = "ddfe7b487b4e0295059e32c5ab80c5b8126477cd81a19f76"
#: Environment the host sets (sdk/plugin).
ENV_HOST_PID = "GORAY_PLUGIN_HOST_PID"
ENV_LOG_LEVEL = "GORAY_PLUGIN_LOG_LEVEL"
#: The gRPC message limit both sides set (sdk/plugin.MaxMessageSize).
MAX_MESSAGE_SIZE = 64 << 20
#: Threads serving calls; calls beyond MAX_CONCURRENT_RPCS are refused
#: with RESOURCE_EXHAUSTED rather than queued without bound.
MAX_WORKERS = 64
MAX_CONCURRENT_RPCS = 1024


class HandshakeError(Exception):
    """The process was not started by a goray host (or by an incompatible
    one)."""


def negotiate(offered: str, supported: List[int]) -> int:
    """The API version to speak: the highest of supported that the host
    offers in PLUGIN_PROTOCOL_VERSIONS ("1,2"), else the plugin's oldest
    (the host then reports that they have no version in common)."""
    host = set()
    for part in offered.split(","):
        part = part.strip()
        if part.isdigit():
            host.add(int(part))
    common = sorted(set(supported) & host)
    return common[-1] if common else min(supported)


def handshake_line(version: int, network: str, addr: str, cert_b64: str = "") -> str:
    """go-plugin's handshake line for a gRPC plugin."""
    return f"{CORE_PROTOCOL_VERSION}|{version}|{network}|{addr}|grpc|{cert_b64}"


def make_certificate() -> Tuple[bytes, bytes, str]:
    """A fresh self-signed certificate for "localhost", as go-plugin's
    AutoMTLS makes: the PEM certificate, the PEM key and the DER
    certificate in unpadded base64 for the handshake line."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "goray plugin")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(seconds=30))
        .not_valid_after(now + datetime.timedelta(days=365 * 30))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=True, key_cert_sign=True,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    der = cert.public_bytes(serialization.Encoding.DER)
    return cert_pem, key_pem, base64.b64encode(der).decode().rstrip("=")


class HCLogHandler(logging.Handler):
    """Writes records as hclog JSON lines to stderr, which go-plugin parses
    and forwards into the host's log under the plugin's name."""

    LEVELS = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn", logging.ERROR: "error", logging.CRITICAL: "error"}

    def __init__(self, stream=None):
        super().__init__()
        self.stream = stream or sys.stderr

    def emit(self, record: logging.LogRecord) -> None:
        try:
            entry = {
                "@level": self.LEVELS.get(record.levelno, "info"),
                "@message": record.getMessage(),
                "@module": record.name,
                "@timestamp": datetime.datetime.now().astimezone().isoformat(timespec="microseconds"),
            }
            if record.exc_info:
                entry["exception"] = logging.Formatter().formatException(record.exc_info)
            self.stream.write(json.dumps(entry) + "\n")
            self.stream.flush()
        except Exception:  # logging must never break the plugin
            self.handleError(record)


def configure_logging() -> None:
    """Logs at the host's level (GORAY_PLUGIN_LOG_LEVEL) as hclog JSON."""
    level = {"trace": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
             "error": logging.ERROR, "off": logging.CRITICAL + 10}.get(os.environ.get(ENV_LOG_LEVEL, "info"), logging.INFO)
    root = logging.getLogger()
    root.handlers[:] = [HCLogHandler()]
    root.setLevel(level)


def _watch_parent(stop: threading.Event) -> None:
    """Ends the plugin when the host process is gone (as sdk/plugin's
    watchParent): the host's pid is in GORAY_PLUGIN_HOST_PID."""
    want = os.environ.get(ENV_HOST_PID, "")
    if not want.isdigit():
        return
    host = int(want)

    def watch() -> None:
        while not stop.wait(0.5):
            if os.getppid() != host:
                logging.getLogger("goray_plugin").info("the host process is gone; exiting")
                os._exit(0)

    threading.Thread(target=watch, name="goray-parent-watch", daemon=True).start()


def _controller_handler(on_shutdown: Callable[[], None]) -> grpc.GenericRpcHandler:
    """plugin.GRPCController: Shutdown(Empty) returns (Empty). Both messages
    are empty, so no stubs are needed."""

    def shutdown(request, context):
        on_shutdown()
        return b""

    return grpc.method_handlers_generic_handler("plugin.GRPCController", {
        "Shutdown": grpc.unary_unary_rpc_method_handler(
            shutdown, request_deserializer=lambda b: None, response_serializer=lambda b: b""),
    })


def usage(kind: str, name: str, version: str) -> str:
    """What a plugin binary run by hand prints."""
    return (
        f"This is goray {kind} plugin {name!r} (version {version or 'unknown'}), a Python plugin served with "
        f"goray_plugin. It is not meant to be run by hand: a goray node starts it for a "
        f"`plugin \"{kind}\" \"{name}\" {{ ... }}` block of its config, with the binary installed as "
        f"<plugin_dir>/goray-{kind}-{name}. Check it with `goray plugins check <path>`."
    )


def serve_grpc(kind: str, name: str, version: str, api_versions: Dict[int, Callable[[grpc.Server], None]],
               environ: Optional[Dict[str, str]] = None, out=None) -> None:
    """Runs a go-plugin gRPC server until the host shuts it down, then
    returns. api_versions maps each supported API version to a function
    registering that version's services (PluginInfo included). Raises
    HandshakeError when the process was not started by a goray host."""
    env = os.environ if environ is None else environ
    out = out or sys.stdout
    if env.get(MAGIC_COOKIE_KEY) != MAGIC_COOKIE_VALUE:
        raise HandshakeError(usage(kind, name, version))
    version_used = negotiate(env.get("PLUGIN_PROTOCOL_VERSIONS", ""), list(api_versions))

    stop = threading.Event()
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=MAX_WORKERS, thread_name_prefix="goray-rpc"),
        maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS,
        options=[("grpc.max_receive_message_length", MAX_MESSAGE_SIZE),
                 ("grpc.max_send_message_length", MAX_MESSAGE_SIZE)],
    )
    hs = health.HealthServicer()
    hs.set("plugin", health_pb2.HealthCheckResponse.SERVING)
    hs.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(hs, server)
    server.add_generic_rpc_handlers((_controller_handler(stop.set),))
    api_versions[version_used](server)

    sock_dir = env.get("PLUGIN_UNIX_SOCKET_DIR") or tempfile.gettempdir()
    sock = _unique_path(sock_dir, "plugin")
    cert_b64 = ""
    proxy: Optional[_TLSProxy] = None
    private_dir = ""
    client_cert = env.get("PLUGIN_CLIENT_CERT", "")
    if client_cert:
        # AutoMTLS. gRPC's own TLS (BoringSSL) does not offer the P-521
        # signatures of go-plugin's client certificate, so Go would send no
        # certificate; Python's ssl terminates TLS instead and hands the
        # bytes to the gRPC server on a socket in a private directory.
        cert_pem, key_pem, cert_b64 = make_certificate()
        # Short names: a unix socket path has at most 107 bytes.
        private_dir = tempfile.mkdtemp(prefix="gp", dir=sock_dir)
        inner = os.path.join(private_dir, "s")
        if len(inner.encode()) > 107:
            raise OSError(f"the plugin's socket path {inner} is longer than a unix socket path may be (107 bytes)")
        if server.add_insecure_port("unix:" + inner) == 0:
            raise OSError(f"cannot listen on unix socket {inner}")
        proxy = _TLSProxy(sock, inner, cert_pem, key_pem, client_cert.encode())
    elif server.add_insecure_port("unix:" + sock) == 0:
        raise OSError(f"cannot listen on unix socket {sock}")
    server.start()
    try:
        if proxy is not None:
            proxy.start()
        _watch_parent(stop)
        out.write(handshake_line(version_used, "unix", sock, cert_b64) + "\n")
        out.flush()
        stop.wait()
        logging.getLogger("goray_plugin").debug("shutdown requested by the host")
        server.stop(grace=1).wait()
    finally:
        if proxy is not None:
            proxy.stop()
        for path in (sock, os.path.join(private_dir, "s") if private_dir else ""):
            if path:
                try:
                    os.unlink(path)
                except OSError:
                    pass
        if private_dir:
            try:
                os.rmdir(private_dir)
            except OSError:
                pass


def _unique_path(directory: str, prefix: str) -> str:
    """A fresh unused path in directory (go-plugin names its socket the same
    way: a unique name, then bind)."""
    fd, path = tempfile.mkstemp(prefix=prefix, dir=directory)
    os.close(fd)
    os.unlink(path)
    return path


class _TLSProxy:
    """Accepts the host's mutual-TLS connections on a unix socket and pipes
    each, decrypted, to the gRPC server's private socket. Runs an asyncio
    loop in its own thread; at most MAX_CONNECTIONS at once, and a slow
    side holds the other back (bounded buffers, no unbounded queue).

    The host holds one connection and each worker of the node that calls
    the plugin one more, so the limit is well above a node's workers; a
    connection over it is closed, and that worker's calls go through the
    raylet (it asks again later, less and less often). Each connection
    buffers at most about 2 * (CHUNK + 64 KiB) when one side is slow."""

    MAX_CONNECTIONS = 256
    CHUNK = 256 << 10
    HANDSHAKE_TIMEOUT = 10.0

    def __init__(self, listen: str, target: str, cert_pem: bytes, key_pem: bytes, client_ca_pem: bytes):
        import ssl

        self.listen, self.target = listen, target
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(cadata=client_ca_pem.decode())
        ctx.set_alpn_protocols(["h2"])
        # load_cert_chain reads files: write them to a private directory
        # and remove them at once.
        keydir = tempfile.mkdtemp(prefix="goray-py-key-")
        try:
            certfile, keyfile = os.path.join(keydir, "cert.pem"), os.path.join(keydir, "key.pem")
            for path, data in ((certfile, cert_pem), (keyfile, key_pem)):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
            ctx.load_cert_chain(certfile, keyfile)
        finally:
            for name in os.listdir(keydir):
                os.unlink(os.path.join(keydir, name))
            os.rmdir(keydir)
        self.ssl = ctx
        self._ready = threading.Event()
        self._error: Optional[BaseException] = None
        self._loop = None
        self._server = None
        self._thread = threading.Thread(target=self._run, name="goray-tls-proxy", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        loop = self._loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
        self._thread.join(timeout=5)

    def _run(self) -> None:
        import asyncio

        loop = asyncio.new_event_loop()
        self._loop = loop
        sem = asyncio.Semaphore(self.MAX_CONNECTIONS)

        async def pipe(reader, writer) -> None:
            try:
                while True:
                    data = await reader.read(self.CHUNK)
                    if not data:
                        break
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                try:
                    writer.close()
                except Exception:
                    pass

        async def handle(reader, writer) -> None:
            if sem.locked():
                writer.close()
                return
            async with sem:
                try:
                    ir, iw = await asyncio.open_unix_connection(self.target, limit=self.CHUNK)
                except OSError:
                    writer.close()
                    return
                await asyncio.gather(pipe(reader, iw), pipe(ir, writer))

        async def start():
            self._server = await asyncio.start_unix_server(
                handle, path=self.listen, ssl=self.ssl, limit=self.CHUNK,
                ssl_handshake_timeout=self.HANDSHAKE_TIMEOUT)

        try:
            loop.run_until_complete(start())
        except BaseException as e:  # reported by start()
            self._error = e
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            self._server.close()
            # End the connections still open, so none is left pending.
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.close()


def run(kind: str, name: str, version: str, api_versions: Dict[int, Callable[[grpc.Server], None]]) -> None:
    """serve_grpc for a plugin's main: prints the usage and exits 1 when run
    by hand, exits 0 when the host shuts the plugin down."""
    # The host handles Ctrl-C of the node; the plugin waits to be shut down.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        serve_grpc(kind, name, version, api_versions)
    except HandshakeError as e:
        print(e, file=sys.stderr)
        sys.exit(1)
    # Exit at once, as a Go plugin does: the host waits only 2 s after
    # Shutdown, and the interpreter would first join gRPC's worker threads.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


