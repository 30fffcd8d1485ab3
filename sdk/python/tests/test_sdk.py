"""Unit tests of goray_plugin's own logic. The Go conformance suite
(sdk/python/pythontest) tests the whole plugin through a real host."""

import json
import subprocess
import sys
import threading
import time
import unittest
from dataclasses import dataclass
from pathlib import Path

import grpc

import goray_plugin as gp
from goray_plugin import config, goplugin, shmem
from goray_plugin._bridge import PluginInfoServicer

HERE = Path(__file__).resolve().parent.parent


class ProtoStubsTest(unittest.TestCase):
    def test_committed_stubs_match_sdk_proto(self):
        r = subprocess.run([sys.executable, str(HERE / "tools" / "gen_protos.py"), "--check"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


class ContextTest(unittest.TestCase):
    def test_deadline_gives_timeout(self):
        ctx = gp.Context.with_timeout(0.01)
        self.assertTrue(ctx.wait())
        self.assertIsInstance(ctx.error(), gp.TransferTimeoutError)
        self.assertIsInstance(ctx.error(), TimeoutError)

    def test_cancel_propagates_to_children(self):
        parent = gp.Context()
        child = gp.Context(parent=parent)
        self.assertIsNone(child.error())
        parent.cancel()
        self.assertTrue(child.done())
        self.assertIsInstance(child.error(), gp.CanceledError)

    def test_child_of_cancelled_parent_is_done(self):
        parent = gp.Context()
        parent.cancel()
        self.assertTrue(gp.Context(parent=parent).done())

    def test_abort_unblocks_pending_and_later_calls(self):
        a = gp.Aborts()
        call, done = a.begin(gp.Context(), "ab")
        got = []
        t = threading.Thread(target=lambda: got.append((call.wait(10), call.error())))
        t.start()
        a.abort("ab", "test reason")
        t.join(5)
        done()
        self.assertTrue(got[0][0])
        self.assertIsInstance(got[0][1], gp.AbortedError)
        self.assertIn("test reason", str(got[0][1]))
        self.assertEqual(a.pending("ab"), 0)
        with self.assertRaises(gp.AbortedError):
            a.begin(gp.Context(), "ab")
        a.forget("ab")
        _, done = a.begin(gp.Context(), "ab")
        done()

    def test_aborts_remember_a_bounded_number(self):
        a = gp.Aborts()
        for i in range(gp.context.MAX_ABORTED_REMEMBERED + 10):
            a.abort(f"{i:04x}")
        self.assertIsNone(a.aborted("0000"))
        self.assertIsNotNone(a.aborted(f"{gp.context.MAX_ABORTED_REMEMBERED + 9:04x}"))


class ValidationTest(unittest.TestCase):
    def test_object_ids(self):
        cases = [("ab12", True), ("", False), ("abc", False), ("AB", False), ("zz", False), ("ab" * 65, False)]
        for oid, ok in cases:
            with self.subTest(oid=oid):
                if ok:
                    gp.valid_object_id(oid)
                else:
                    with self.assertRaises(gp.BadMetadataError):
                        gp.valid_object_id(oid)

    def test_tensor_layouts(self):
        good = gp.Tensor("float32", [2, 3], "cpu", gp.Buffer("goray-t-x", 0, 24))
        good.validate()
        bad = {
            "unknown dtype": gp.Tensor("complex512", [2], "", gp.Buffer("s", 0, 16)),
            "negative dimension": gp.Tensor("float32", [-4], "", gp.Buffer("s", 0, 16)),
            "length mismatch": gp.Tensor("float32", [3], "", gp.Buffer("s", 0, 16)),
            "slash in segment": gp.Tensor("float32", [4], "", gp.Buffer("../s", 0, 16)),
            "negative offset": gp.Tensor("float32", [4], "", gp.Buffer("s", -1, 16)),
            "overflow": gp.Tensor("float64", [1 << 62, 4], "", gp.Buffer("s", 0, 0)),
        }
        for name, t in bad.items():
            with self.subTest(name):
                with self.assertRaises(gp.BadMetadataError):
                    t.validate()
        self.assertTrue(gp.TensorMeta("int8", [1], "").same(gp.TensorMeta("int8", [1], "cpu")))


class ConfigTest(unittest.TestCase):
    def test_durations(self):
        for text, want in [("20ms", 0.02), ("1m30s", 90.0), ("1.5h", 5400.0), ("0", 0.0), ("-2s", -2.0), ("300us", 0.0003)]:
            with self.subTest(text):
                self.assertAlmostEqual(config.parse_duration(text), want)
        for text in ["", "5", "1d", "ms", "1s2"]:
            with self.subTest(text):
                with self.assertRaises(ValueError):
                    config.parse_duration(text)
        for secs, want in [(0.02, "20ms"), (90, "90s"), (3600, "1h"), (0.0000005, "500ns"), (0, "0s")]:
            self.assertEqual(config.format_duration(secs), want)

    def test_schema_of_dataclass(self):
        @dataclass
        class C:
            name: str = config.attribute(doc="who")
            poll: float = config.attribute(0.5, type="duration")
            on: bool = True

        s = config.schema_of(C)
        self.assertEqual(s.attributes["name"].type, "string")
        self.assertTrue(s.attributes["name"].required)
        self.assertEqual(s.attributes["poll"].default, "500ms")
        self.assertEqual(s.attributes["on"].type, "bool")
        cfg = s.normalize({"name": "x"})
        self.assertEqual(config.decode(C, s, cfg), C(name="x", poll=0.5, on=True))
        for bad, word in [({}, "name"), ({"name": 1}, "name"), ({"name": "x", "poll": "soon"}, "poll"), ({"name": "x", "zz": 1}, "zz")]:
            with self.subTest(bad):
                with self.assertRaisesRegex(config.ConfigError, word):
                    s.normalize(bad)
        proto = s.to_proto()
        self.assertEqual(json.loads(proto.attributes["poll"].default_json), "500ms")


class HandshakeTest(unittest.TestCase):
    def test_negotiate(self):
        self.assertEqual(goplugin.negotiate("1,2,3", [1, 2]), 2)
        self.assertEqual(goplugin.negotiate("1", [1, 2]), 1)
        self.assertEqual(goplugin.negotiate("", [2, 3]), 2)
        self.assertEqual(goplugin.negotiate("4, x", [2, 3]), 2)

    def test_line(self):
        self.assertEqual(goplugin.handshake_line(1, "unix", "/tmp/p", "QUJD"), "1|1|unix|/tmp/p|grpc|QUJD")

    def test_run_by_hand_is_refused(self):
        with self.assertRaisesRegex(goplugin.HandshakeError, "not meant to be run by hand"):
            goplugin.serve_grpc("transport", "x", "1", {1: lambda s: None}, environ={})

    def test_certificate(self):
        import base64
        from cryptography import x509

        cert_pem, key_pem, b64 = goplugin.make_certificate()
        der = base64.b64decode(b64 + "=" * (-len(b64) % 4))
        cert = x509.load_der_x509_certificate(der)
        self.assertEqual(cert.public_bytes(__import__("cryptography").hazmat.primitives.serialization.Encoding.PEM), cert_pem)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        self.assertEqual(san.get_values_for_type(x509.DNSName), ["localhost"])
        self.assertNotIn("=", b64)


class TLSProxyTest(unittest.TestCase):
    """The proxy in front of the plugin's gRPC server: mutual TLS, and a
    connection over MAX_CONNECTIONS closed (that worker then goes through
    the raylet) until one of the others ends."""

    def test_limit(self):
        import socket
        import ssl
        import tempfile

        tmp = tempfile.mkdtemp(prefix="goray-proxy-test-")
        self.addCleanup(__import__("shutil").rmtree, tmp)
        target = tmp + "/target.sock"
        backend = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        backend.bind(target)
        backend.listen(8)
        self.addCleanup(backend.close)

        def echo(conn):
            with conn:
                while True:
                    data = conn.recv(1024)
                    if not data:
                        return
                    conn.sendall(data)

        def accept():
            while True:
                try:
                    conn, _ = backend.accept()
                except OSError:
                    return
                threading.Thread(target=echo, args=(conn,), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
        cert, key, _ = goplugin.make_certificate()
        client_cert, client_key, _ = goplugin.make_certificate()
        proxy = goplugin._TLSProxy(tmp + "/proxy.sock", target, cert, key, client_cert)
        proxy.MAX_CONNECTIONS = 2
        proxy.start()
        self.addCleanup(proxy.stop)

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(cadata=cert.decode())
        for name, data in (("cert.pem", client_cert), ("key.pem", client_key)):
            with open(f"{tmp}/{name}", "wb") as f:
                f.write(data)
        ctx.load_cert_chain(f"{tmp}/cert.pem", f"{tmp}/key.pem")

        def dial():
            raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            raw.settimeout(10)
            raw.connect(tmp + "/proxy.sock")
            return ctx.wrap_socket(raw, server_hostname="localhost")

        def echoes(conn, msg=b"ping"):
            try:
                conn.sendall(msg)
                return conn.recv(len(msg)) == msg
            except (OSError, ssl.SSLError):
                return False

        first, second = dial(), dial()
        self.assertTrue(echoes(first))
        self.assertTrue(echoes(second))
        third = dial()
        try:
            third.sendall(b"ping")
            got = third.recv(4)
        except socket.timeout:
            self.fail("a connection over the limit was held, not closed")
        except (OSError, ssl.SSLError):
            got = b""
        self.assertEqual(got, b"", "a connection over the limit was served")
        third.close()
        first.close()
        deadline = time.monotonic() + 10
        while True:
            conn = dial()
            ok = echoes(conn)
            conn.close()
            if ok:
                break
            self.assertLess(time.monotonic(), deadline, "no connection served after one of two ended")
            time.sleep(0.01)  # polling interval
        self.assertTrue(echoes(second))
        second.close()


class FakeContext:
    """Enough of grpc.ServicerContext for PluginInfoServicer."""

    def __init__(self):
        self.code = None

    def time_remaining(self):
        return None

    def add_callback(self, cb):
        return True

    def abort(self, code, details):
        self.code, self.details = code, details
        raise RuntimeError("aborted")


class InfoServicerTest(unittest.TestCase):
    def test_configure_rejects_with_invalid_argument(self):
        class T:
            def config_schema(self):
                return config.Schema({"n": config.Attribute("number", default=1)})

            def configure(self, ctx, cfg):
                if cfg["n"] < 0:
                    raise ValueError("n: want a non-negative number")
                self.n = cfg["n"]

        impl = T()
        s = PluginInfoServicer("transport", "t", "1", [1], impl)
        from goray_plugin._proto.goray.plugin.v1 import plugin_pb2

        s.Configure(plugin_pb2.ConfigureRequest(config_json=b"{}"), FakeContext())
        self.assertEqual(impl.n, 1)
        ctx = FakeContext()
        with self.assertRaises(RuntimeError):
            s.Configure(plugin_pb2.ConfigureRequest(config_json=b'{"n": -1}'), ctx)
        self.assertEqual(ctx.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("non-negative", ctx.details)
        ctx = FakeContext()
        with self.assertRaises(RuntimeError):
            s.Configure(plugin_pb2.ConfigureRequest(config_json=b"[1]"), ctx)
        self.assertEqual(ctx.code, grpc.StatusCode.INVALID_ARGUMENT)


class ShmemTest(unittest.TestCase):
    def test_publish_read_and_map(self):
        name = shmem.new_name(shmem.PREFIX + "pyunit-")
        shmem.publish(name, b"hello")
        try:
            self.assertEqual(shmem.read_all(name, 100), b"hello")
            with self.assertRaises(shmem.ExistsError):
                shmem.publish(name, b"again")
            with self.assertRaises(shmem.ShmemError):
                shmem.read_all(name, 2)
            with shmem.mapped(name, 1, 3) as view:
                self.assertEqual(bytes(view), b"ell")
                view[0:1] = b"E"
            self.assertEqual(shmem.read_all(name, 100), b"hEllo")
            with self.assertRaises(shmem.ShmemError):
                with shmem.mapped(name, 3, 5):
                    pass
        finally:
            shmem.unlink(name)
        with self.assertRaises(shmem.NotFoundError):
            shmem.stat(name)
        self.assertEqual(shmem.list_prefix(name), [])
        for bad in ["", "a/b", "..", "x" * 201]:
            with self.assertRaises(shmem.BadNameError):
                shmem.valid_name(bad)


if __name__ == "__main__":
    unittest.main()
