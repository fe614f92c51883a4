"""Generates the Python gRPC stubs of `externalscaler.proto` (a `kvpilot.generate` generator).

protoc writes `import externalscaler_pb2` in the service stub, which only works with scaler/keda on
`sys.path`; the generator rewrites it to a package-relative import so that `scaler.keda` is importable as a
package. The stubs embed the grpcio-tools/protobuf versions that produced them, so they are regenerated
(and `make check-generated` fails) when the proto or those tools change.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO = HERE / "externalscaler.proto"
_PACKAGE_DIR = "scaler/keda"
_OUTPUTS = ("externalscaler_pb2.py", "externalscaler_pb2.pyi", "externalscaler_pb2_grpc.py")
_ABSOLUTE_IMPORT = "import externalscaler_pb2 as externalscaler__pb2"
_RELATIVE_IMPORT = "from . import externalscaler_pb2 as externalscaler__pb2"


def generate() -> dict[str, str]:
    """Runs protoc into a temporary folder and returns {repository-relative path: content}."""
    from grpc_tools import protoc  # dev dependency, only needed to (re)generate

    with tempfile.TemporaryDirectory(prefix="kvpilot-protoc-") as out:
        args = [
            "grpc_tools.protoc",
            f"-I{HERE}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            str(PROTO),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {PROTO}")
        files = {name: (Path(out) / name).read_text() for name in _OUTPUTS}
    grpc_stub = files["externalscaler_pb2_grpc.py"]
    if _ABSOLUTE_IMPORT not in grpc_stub:
        raise RuntimeError(f"protoc output changed: expected `{_ABSOLUTE_IMPORT}` in externalscaler_pb2_grpc.py")
    files["externalscaler_pb2_grpc.py"] = grpc_stub.replace(_ABSOLUTE_IMPORT, _RELATIVE_IMPORT)
    return {f"{_PACKAGE_DIR}/{name}": content for name, content in files.items()}
