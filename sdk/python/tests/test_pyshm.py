"""Unit tests of the example transport's own parsing (the conformance suite
covers its behaviour through a real host)."""

import json
import unittest

import goray_plugin as gp
from goray_pyshm import ShmTransport, parse_manifest


class ManifestTest(unittest.TestCase):
    def test_bad_manifests(self):
        oid = "ab" * 20
        good = {"v": 1, "object": oid, "nonce": "x", "tensors": [{"dtype": "int8", "shape": [1], "length": 1, "segment": "s"}]}
        parse_manifest(oid, json.dumps(good).encode())
        cases = {
            "garbage": b"\x00\xffnot json",
            "not an object": b"[]",
            "unknown key": json.dumps({**good, "zz": 1}).encode(),
            "version": json.dumps({**good, "v": 2}).encode(),
            "other object": json.dumps({**good, "object": "cd"}).encode(),
            "bad shape": json.dumps({**good, "tensors": [{"dtype": "int8", "shape": ["1"]}]}).encode(),
            "too large": b" " * (5 << 20),
        }
        for name, data in cases.items():
            with self.subTest(name):
                with self.assertRaises(gp.BadMetadataError):
                    parse_manifest(oid, data)

    def test_configure_rejects_non_positive_poll(self):
        from goray_pyshm import Config

        t = ShmTransport()
        t.configure(gp.Context(), Config(max_poll=0.005))
        self.assertEqual(t.max_poll, 0.005)
        with self.assertRaisesRegex(gp.ConfigError, "max_poll"):
            t.configure(gp.Context(), Config(max_poll=-1))


if __name__ == "__main__":
    unittest.main()
