"""Build script for the optional compiled core (everything else is in pyproject.toml).

``terascale._shmcore`` (the shared-memory transport's per-call work),
``terascale.transport._seclink`` (authenticated links' records, on OpenSSL's libcrypto:
the ``libssl-dev`` headers) and ``terascale.linear._vw._vwfast`` (the common case of VW text)
are plain C against the CPython API: gcc (or any C compiler) builds them during
``pip install``. All are optional: where they cannot be built, the install still succeeds,
the shared-memory transport runs its pure-Python path, links seal their records through
the ``cryptography`` package, and VW text is parsed by the numba parser alone
(``TERASCALE_NO_CEXT=1`` selects those paths at run time too).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "terascale._shmcore",
            ["src/terascale/_shmcore.c", "src/terascale/_shmdirect.c",
             "src/terascale/_shmsmall.c"],
            depends=["src/terascale/_shmcore.h"],
            # No -ffast-math: folds must give IEEE results, the same bits as numpy's.
            extra_compile_args=["-O3", "-std=gnu11", "-fno-strict-aliasing"],
            optional=True,
        ),
        Extension(
            # authenticated links' records (AES-256-GCM on OpenSSL's libcrypto: libssl-dev)
            "terascale.transport._seclink",
            # _ghash.c: GHASH on VPCLMULQDQ, its functions compiled for AVX-512 by their own
            # target attributes and run only where the CPU has it (checked at run time)
            ["src/terascale/transport/_seclink.c", "src/terascale/transport/_ghash.c"],
            depends=["src/terascale/transport/_ghash.h"],
            libraries=["crypto"],
            extra_compile_args=["-O2", "-std=gnu11"],
            optional=True,
        ),
        Extension(
            "terascale.linear._vw._vwfast",
            ["src/terascale/linear/_vw/_vwfast.c"],
            # VW's float loop rounds every operation: no fused multiply-add
            extra_compile_args=["-O3", "-std=gnu11", "-ffp-contract=off"],
            optional=True,
        ),
    ],
)
