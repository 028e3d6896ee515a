"""Build script for the optional compiled core (everything else is in pyproject.toml).

``terascale._shmcore`` is plain C against the CPython API: gcc (or any C compiler) builds it
during ``pip install``. It is optional: where it cannot be built, the install still succeeds
and the shared-memory transport runs its pure-Python path (``TERASCALE_NO_CEXT=1`` selects
that path at run time too).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "terascale._shmcore",
            ["src/terascale/_shmcore.c", "src/terascale/_shmdirect.c"],
            depends=["src/terascale/_shmcore.h"],
            # No -ffast-math: folds must give IEEE results, the same bits as numpy's.
            extra_compile_args=["-O3", "-std=gnu11", "-fno-strict-aliasing"],
            optional=True,
        )
    ],
)
