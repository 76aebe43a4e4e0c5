"""Build glue: setuptools drives CMake, which builds the pybind11 module
`tally._core` (csrc/) and the client library `libcuda.so.1` (client_preload/).

Both land inside the package (tally/_core*.so and tally/lib/libcuda.so.1), so an
editable install (`pip install -e .`) and a regular one find them the same way.
An editable install is a developer's: it also builds the C++ unit tests and the
transport benchmark's bindings (TALLY_DEV_BUILD), which a user's wheel leaves out.
build_py also generates the kubelet device-plugin gRPC stubs from their .proto
(grpcio-tools, a build requirement) next to it in the source tree, so both kinds
of install carry them.
"""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tools"))
from build_progress import BuildProgress  # noqa: E402

PROTOS = ["tally/cluster/k8s/deviceplugin_v1beta1.proto"]


def generate_grpc_stubs() -> None:
    """<name>_pb2.py and <name>_pb2_grpc.py beside each .proto, imported by package path."""
    try:
        from grpc_tools import protoc
    except ImportError as e:
        raise SystemExit(f"building tally needs grpcio-tools to generate the device-plugin stubs ({e}); "
                         f"pip install grpcio-tools, or build with build isolation (plain pip install)")
    import grpc_tools
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    for proto in PROTOS:
        args = ["grpc_tools.protoc", f"-I{ROOT}", f"-I{well_known}", f"--python_out={ROOT}",
                f"--grpc_python_out={ROOT}", str(ROOT / proto)]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed: {' '.join(args)}")


class BuildPyWithStubs(build_py):
    def run(self) -> None:
        generate_grpc_stubs()     # before build_py lists the package's modules
        super().run()


class CMakeExtension(Extension):
    def __init__(self, name: str):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        import pybind11

        package_dir = Path(self.get_ext_fullpath(ext.name)).parent.resolve()
        build_dir = Path(self.build_temp).resolve() / "cmake"
        build_dir.mkdir(parents=True, exist_ok=True)
        config = os.environ.get("TALLY_BUILD_TYPE", "Release")
        editable = getattr(self, "editable_mode", False)
        dev = os.environ.get("TALLY_DEV_BUILD", "1" if editable else "0") not in ("0", "", "OFF")
        configure = [
            "cmake", str(ROOT),
            f"-DCMAKE_BUILD_TYPE={config}",
            f"-DTALLY_PACKAGE_DIR={package_dir}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
            f"-DTALLY_DEV_BUILD={'ON' if dev else 'OFF'}",
        ]
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
        progress = BuildProgress(jobs)
        started = time.monotonic()
        progress.say(f"building the C++ core, the CUDA driver stand-in and the emulator with {jobs} "
                     f"parallel jobs (about a minute on 2 cores{'; plus C++ tests' if dev else ''})")
        subprocess.run(configure, cwd=build_dir, check=True, stdout=subprocess.DEVNULL)
        progress.run(["cmake", "--build", ".", "-j", jobs], cwd=build_dir)
        progress.say(f"C++ build done in {time.monotonic() - started:.0f} s")
        source_package = ROOT / "tally"
        if editable and package_dir != source_package:
            # setuptools copies only the extension module back into the source tree
            # for editable installs; the client library must follow it.
            shutil.rmtree(source_package / "lib", ignore_errors=True)
            shutil.copytree(package_dir / "lib", source_package / "lib", symlinks=True)


setup(ext_modules=[CMakeExtension("tally._core")], cmdclass={"build_ext": CMakeBuild, "build_py": BuildPyWithStubs})
