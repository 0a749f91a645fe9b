"""Build step of `pip install .`: runs `make lib` (in build/pip, apart from the developer's own
build/) and copies the shared library and the default model into the package, where
python/sparsekv finds them. Metadata lives in pyproject.toml."""

import os
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))
LIB_BUILD = os.environ.get("SKV_PIP_BUILD", os.path.join("build", "pip"))


def version():
    with open(os.path.join(ROOT, "include", "sparsekv.h")) as f:
        return re.search(r'#define SKV_VERSION\s+"([^"]+)"', f.read()).group(1)


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        jobs = os.environ.get("SKV_PIP_JOBS", str(min(os.cpu_count() or 1, 8)))
        subprocess.run(["make", "-C", ROOT, "BUILD=" + LIB_BUILD, "-j" + jobs, "lib"],
                       check=True)
        ver = version()
        major = ver.split(".")[0]
        built = os.path.join(ROOT, LIB_BUILD, "libsparsekv.so." + ver)
        pkg = os.path.join(self.build_lib, "sparsekv")
        # the file under its SONAME, as a plain file (wheels hold no links)
        shutil.copyfile(built, os.path.join(pkg, "libsparsekv.so." + major))
        model = os.path.join(ROOT, "models", "stories260K.gguf")
        if os.path.isfile(model):
            os.makedirs(os.path.join(pkg, "data"), exist_ok=True)
            shutil.copyfile(model, os.path.join(pkg, "data", "stories260K.gguf"))


class BinaryDistribution(Distribution):
    """The package carries a native library: the wheel is platform specific."""

    def has_ext_modules(self):
        return True


# setuptools' own scratch (build/lib.*, bdist.*, the .egg-info) goes under build/pip too, not
# beside the sources or into the developer's build/.
os.makedirs(os.path.join(ROOT, LIB_BUILD), exist_ok=True)
setup(version=version(), cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution,
      options={"build": {"build_base": os.path.join(LIB_BUILD, "py")},
               "egg_info": {"egg_base": LIB_BUILD}})
