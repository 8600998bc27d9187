"""Build of hbcore's native parts.

libhbcore.so (the C++ core) and the pybind11 module hbcore._core are built
against MPI headers found, in order, under $HB_MPI_HOME (a site MPI), or in
the mpich wheel installed in the build environment. Both are linked by
soname (libmpi.so.12, the MPICH ABI); at run time hbcore._native loads the
MPI library before importing the module (see there for the search order).
"""
import concurrent.futures
import glob
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
VERSION = "0.1.0"


def find_mpi():
    """Returns (include_dir, lib_dir) of the MPI to build against."""
    home = os.environ.get("HB_MPI_HOME")
    if home and not os.path.exists(os.path.join(home, "include", "mpi.h")):
        raise RuntimeError("hbcore: HB_MPI_HOME=%s has no include/mpi.h" % home)
    candidates = [home] if home else []
    try:
        from importlib import metadata

        for f in metadata.files("mpich") or []:
            if str(f).replace("\\", "/").endswith("include/mpi.h"):
                path = os.path.abspath(f.locate())
                candidates.append(os.path.dirname(os.path.dirname(path)))
    except Exception:  # mpich wheel not installed: fall through
        pass
    candidates += [sys.prefix, "/usr", "/usr/local"]
    for prefix in candidates:
        inc = os.path.join(prefix, "include")
        if os.path.exists(os.path.join(inc, "mpi.h")):
            for libdir in ("lib", "lib64", os.path.join("lib", "x86_64-linux-gnu")):
                lib = os.path.join(prefix, libdir)
                if glob.glob(os.path.join(lib, "libmpi.so*")):
                    return inc, lib
    raise RuntimeError(
        "hbcore: no MPI found to build against. Install the mpich wheel "
        "(pip install mpich) or set HB_MPI_HOME to an MPI installation "
        "with include/mpi.h and lib/libmpi.so.")


def mpi_link_arg(lib_dir):
    """Link against libmpi by its versioned name so no dev symlink is needed."""
    # The MPICH ABI only: Open MPI (libmpi.so.40) is not supported.
    for name in ("libmpi.so.12", "libmpi.so"):
        if os.path.exists(os.path.join(lib_dir, name)):
            return "-l:" + name
    return "-lmpi"


# Element-wise loops over whole buffers (reductions, scaling): -O3 lets the
# compiler vectorise them with a remainder loop, which -O2's cost model does
# not (about 2x on float32 sums here). Code for the baseline x86-64 ISA, so
# the wheel runs on any x86-64 machine.
HOT_LOOPS = {"backends/reduce_kernels.cc", "backends/scaling.cc"}
HOT_LOOP_FLAGS = ["-O3"]


def _up_to_date(target, inputs):
    """True when `target` exists and is newer than every input (rebuilds
    in a developer's tree then only recompile what changed)."""
    if not os.path.exists(target):
        return False
    mtime = os.path.getmtime(target)
    return all(os.path.getmtime(i) < mtime for i in inputs)


class BuildNative(build_ext):
    """Compiles the core library, then the pybind11 module next to it."""

    def build_extension(self, ext):
        import pybind11

        cxx = shlex.split(os.environ.get("CXX", "g++"))
        mpi_inc, mpi_lib = find_mpi()
        out_dir = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        tmp = os.path.abspath(os.path.join(self.build_temp, "hbcore"))
        os.makedirs(out_dir, exist_ok=True)
        os.makedirs(tmp, exist_ok=True)
        # NDEBUG as in any release build: without it pybind11 checks that the
        # GIL is held on every reference count change (a few percent of a
        # submission).
        flags = ["-std=c++17", "-O2", "-DNDEBUG", "-fPIC", "-Wall", "-Wextra",
                 "-pthread", '-DHBCORE_VERSION="%s"' % VERSION]
        # Symbols of static archives stay inside each shared object. Some
        # toolchains link libstdc++ statically into every shared object
        # (seen: a GCC in /opt/gcc of a CUDA image); libhbcore.so and the
        # module then each carry a copy, and exported copies interpose
        # with each other and with the process's libstdc++.so, which broke
        # std::ostream (a crash formatting any number). The C API is the
        # only interface between them, so nothing of libstdc++ needs to
        # cross. With the usual shared libstdc++ this changes nothing.
        link_flags = ["-Wl,--exclude-libs,ALL"]
        core_inc = os.path.join(ROOT, "csrc", "core", "include")
        # The core's sources, grouped by concern in subfolders of src/ (see
        # docs/architecture.md, "csrc/core/src by concern"); they include
        # each other by their path under src/ ("common/status.h").
        core_src = os.path.join(ROOT, "csrc", "core", "src")

        sources = sorted(glob.glob(os.path.join(core_src, "**", "*.cc"),
                                   recursive=True))
        headers = glob.glob(os.path.join(ROOT, "csrc", "core", "**", "*.h"),
                            recursive=True)
        def compile_one(src):
            name = os.path.relpath(src, core_src)
            obj = os.path.join(tmp, name + ".o")
            if _up_to_date(obj, [src] + headers):
                return obj
            os.makedirs(os.path.dirname(obj), exist_ok=True)
            extra = HOT_LOOP_FLAGS if name.replace(os.sep, "/") in HOT_LOOPS else []
            cmd = cxx + flags + extra + ["-fvisibility=hidden", "-I", core_inc,
                                 "-I", core_src, "-I", mpi_inc, "-c", src,
                                 "-o", obj]
            subprocess.check_call(cmd)
            return obj

        jobs = max(1, min(len(sources), os.cpu_count() or 1))
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            objects = list(pool.map(compile_one, sources))
        # $ORIGIN/../../.. is <prefix>/lib of a venv or a system install,
        # where the mpich wheel keeps libmpi.so.12.
        rpath = "-Wl,-rpath,$ORIGIN/../../..:" + mpi_lib
        lib = os.path.join(out_dir, "libhbcore.so")
        # Outputs are written beside and renamed into place, so a process
        # that has the old library loaded keeps a valid file.
        subprocess.check_call(cxx + flags + link_flags +
                              ["-shared", "-Wl,-soname,libhbcore.so"]
                              + objects + ["-L", mpi_lib, mpi_link_arg(mpi_lib),
                                           rpath, "-o", lib + ".tmp"])
        os.replace(lib + ".tmp", lib)

        # Sources the TF op library is compiled from at first import of
        # hbcore_tf, against whatever TensorFlow is installed then.
        pkg_root = os.path.dirname(out_dir)
        header_dir = os.path.join(out_dir, "include", "hbcore")
        tf_src_dir = os.path.join(pkg_root, "hbcore_tf", "_csrc")
        for d in (header_dir, tf_src_dir):
            os.makedirs(d, exist_ok=True)
        for header in glob.glob(os.path.join(core_inc, "hbcore", "*.h")):
            shutil.copy2(header, header_dir)
        for src in (glob.glob(os.path.join(ROOT, "csrc", "tf", "*.cc")) +
                    glob.glob(os.path.join(ROOT, "csrc", "tf", "*.h"))):
            shutil.copy2(src, tf_src_dir)

        module = self.get_ext_fullpath(ext.name)
        py_inc = sysconfig.get_paths()["include"]
        module_sources = sorted(glob.glob(os.path.join(ROOT, "csrc", "python",
                                                       "*.cc")))
        subprocess.check_call(
            cxx + flags + link_flags +
            ["-shared", "-fvisibility=hidden", "-I", core_inc,
                           "-I", pybind11.get_include(), "-I", py_inc,
                           *module_sources,
                           "-L", out_dir, "-lhbcore", "-Wl,-rpath,$ORIGIN",
                           "-o", module + ".tmp"])
        os.replace(module + ".tmp", module)

    def copy_extensions_to_source(self):
        # --inplace / editable installs: the core library travels with the
        # module it is linked to ($ORIGIN).
        super().copy_extensions_to_source()
        built = os.path.join(os.path.abspath(self.build_lib), "hbcore", "libhbcore.so")
        target = os.path.join(ROOT, "hbcore", "libhbcore.so")
        shutil.copy2(built, target + ".tmp")
        os.replace(target + ".tmp", target)


setup(
    version=VERSION,
    ext_modules=[Extension("hbcore._core", sources=[])],
    cmdclass={"build_ext": BuildNative},
)
