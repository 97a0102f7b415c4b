"""Build hook: compile the simulator core with mypyc where it can be, else install it as plain Python.

Everything else about the package is in pyproject.toml. `build_ext` compiles
the core modules of backends/sim (backends/sim/corebuild.py lists them),
with mypyc (a build requirement), into one extension group when a C compiler
and the Python headers work and PIPEDECK_PURE is not set; any failure leaves
the pure-Python modules, which give the same results. The group carries the
digest of the sources it was built from (`_core_digest`), so that sources
edited after the build (an editable install) run as they are, not as they
were compiled.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
SIM = ROOT / "backends" / "sim"
GROUP = "pipedeck.backends.sim.core"
STAGE = ROOT / "build" / "mypyc-src"


def _corebuild():
    """backends/sim/corebuild.py, loaded by path (the package's dependencies are not in the build environment)."""
    spec = importlib.util.spec_from_file_location("pipedeck_corebuild", SIM / "corebuild.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


corebuild = _corebuild()


def compiler_works() -> bool:
    """Whether a C extension including Python.h compiles and links here."""
    from setuptools._distutils import ccompiler
    from setuptools._distutils import sysconfig as dist_sysconfig

    compiler = ccompiler.new_compiler()
    dist_sysconfig.customize_compiler(compiler)
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "probe.c"
        source.write_text("#include <Python.h>\nint probe(void) { return Py_IsInitialized(); }\n")
        try:
            objects = compiler.compile(
                [str(source)], output_dir=folder, include_dirs=[sysconfig.get_paths()["include"]]
            )
            compiler.link_shared_object(objects, str(Path(folder) / "probe.so"))
        except Exception:  # noqa: BLE001 - no compiler, no headers, no linker: any of them means pure Python
            return False
    return True


def stage_sources() -> list[str]:
    """The package laid out under build/mypyc-src/pipedeck (mypy names modules by folders), plus `_core_digest`."""
    shutil.rmtree(STAGE, ignore_errors=True)
    package = STAGE / "pipedeck"
    for top in ("errors", "backends", "scenarios"):  # the core and what it imports
        shutil.copytree(ROOT / top, package / top, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"))
    (package / "__init__.py").write_text("")
    sim = package / "backends" / "sim"
    (sim / "_core_digest.py").write_text(f'DIGEST = "{corebuild.source_digest(SIM)}"\n')
    return [str(sim / f"{name}.py") for name in (*corebuild.CORE, "_core_digest")]


@functools.cache
def core_extensions() -> list[Extension]:
    """mypyc's extensions for the core, or none (with the reason on stderr); worked out once per build."""
    if os.environ.get("PIPEDECK_PURE"):
        reason = "PIPEDECK_PURE is set"
    elif not compiler_works():
        reason = "no working C compiler and Python headers"
    else:
        try:
            from mypyc.build import mypycify
        except ImportError:
            reason = "mypyc (the mypy package) is not installed"
        else:
            try:
                return mypycify(
                    # pyproject.toml's overrides for packages not staged here are not this build's concern
                    [
                        "--follow-imports=silent",
                        "--ignore-missing-imports",
                        "--no-warn-unused-configs",
                        *stage_sources(),
                    ],
                    group_name=GROUP,
                    opt_level="3",
                    target_dir=str(ROOT / "build" / "mypyc"),
                )
            except SystemExit:  # mypyc reports type errors and exits
                reason = "mypyc could not compile it (see above)"
    print(f"pipedeck: simulator core left as pure Python: {reason}", file=sys.stderr)
    return []


class build_core(build_ext):
    """build_ext that compiles the core when it can, and leaves it pure (never half built) when not."""

    def finalize_options(self) -> None:
        self.distribution.ext_modules[:] = core_extensions()
        super().finalize_options()

    def run(self) -> None:
        try:
            super().run()
        except Exception as err:  # noqa: BLE001 - a compile or link error: remove whatever was built (copies in place come after)
            for ext in self.extensions:
                Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)
            print(f"pipedeck: simulator core left as pure Python: the C build failed: {err}", file=sys.stderr)


setup(
    # a placeholder that marks the distribution as having extensions; build_core decides which
    ext_modules=[Extension(f"{GROUP}__mypyc", sources=[])],
    cmdclass={"build_ext": build_core},
)
