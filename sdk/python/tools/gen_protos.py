"""Generates goray_plugin's protocol stubs from sdk/proto, or checks them.

The stubs are committed (goray_plugin/_proto) so that installing the package
needs no code generator and what is reviewed is what runs. Run

    python tools/gen_protos.py          # regenerate after a .proto change
    python tools/gen_protos.py --check  # fail if the committed stubs are stale

from sdk/python with grpcio-tools installed (the package's "dev" extra).
The Python unit tests run the check, so a stale stub fails `make test`.
"""

import argparse
import filecmp
import os
import pathlib
import shutil
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent.parent  # sdk/python
PROTO_ROOT = HERE.parent / "proto"  # sdk/proto
OUT = HERE / "goray_plugin" / "_proto"
# The protocols a Python plugin serves.
PROTOS = ["goray/plugin/v1/plugin.proto", "goray/transport/v1/transport.proto"]
# Generated gRPC modules import their messages as top-level "goray...";
# inside the package they live under goray_plugin._proto.
IMPORT_FROM = "from goray."
IMPORT_TO = "from goray_plugin._proto.goray."


def generate(out: pathlib.Path) -> None:
    from grpc_tools import protoc  # the "dev" extra

    out.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *PROTOS,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("gen_protos: protoc failed")
    for path in sorted(out.rglob("*.py")):
        text = path.read_text()
        fixed = text.replace(IMPORT_FROM, IMPORT_TO)
        if fixed != text:
            path.write_text(fixed)
    # Packages for every directory, so the stubs import as modules.
    for d in [out, *sorted(p for p in out.rglob("*") if p.is_dir())]:
        init = d / "__init__.py"
        if not init.exists():
            init.write_text("")


def tree(root: pathlib.Path) -> dict:
    return {
        p.relative_to(root).as_posix(): p
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def check() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        fresh = pathlib.Path(tmp) / "_proto"
        generate(fresh)
        want, have = tree(fresh), tree(OUT)
        problems = []
        for name in sorted(set(want) | set(have)):
            if name not in have:
                problems.append(f"missing: {name}")
            elif name not in want:
                problems.append(f"not generated from sdk/proto: {name}")
            elif not filecmp.cmp(want[name], have[name], shallow=False):
                problems.append(f"stale: {name}")
    if problems:
        print(
            "goray_plugin/_proto does not match sdk/proto; run "
            "`python tools/gen_protos.py` in sdk/python:\n  " + "\n  ".join(problems),
            file=sys.stderr,
        )
        return 1
    print("goray_plugin/_proto matches sdk/proto")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    if ap.parse_args().check:
        return check()
    if OUT.exists():
        shutil.rmtree(OUT)
    generate(OUT)
    print(f"wrote {os.path.relpath(OUT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
