"""Build script for the optional compiled core (everything else is in pyproject.toml).

``terascale._shmcore`` (the shared-memory transport's per-call work),
``terascale._gcm`` (the control channel's AES-256-GCM messages, on OpenSSL's libcrypto),
``terascale.transport._seclink`` (authenticated links' records, on OpenSSL's libcrypto:
the ``libssl-dev`` headers; and AEGIS-128X4 as the MAC of integrity links and AEGIS-256X4
for encrypted links from libaegis, whose C
sources are vendored under ``transport/_aegis`` with their MIT licence and built here,
each implementation choosing its instruction set by pragma and the best one picked when
the module loads) and ``terascale.linear._vw._vwfast`` (the common case of VW text, and VW's online learner
for one worker)
are plain C against the CPython API: gcc (or any C compiler) builds them during
``pip install``. All are optional: where they cannot be built, the install still succeeds,
the shared-memory transport runs its pure-Python path, links and the control channel seal
their records through the ``cryptography`` package (and encrypted links agree on AES-256-GCM, the cipher every
build has), and VW text is parsed by the numba parser alone
(``TERASCALE_NO_CEXT=1`` selects those paths at run time too).
"""

import glob
import os

from setuptools import Extension, setup

# libaegis (MIT, vendored unmodified but for its init: _aegis/README.md): AEGIS-128X4 (the
# MAC of integrity records) and AEGIS-256X4 (the cipher of encrypted ones) only
_AEGIS = "src/terascale/transport/_aegis"
_AEGIS_SOURCES = [
    "common/common.c", "common/cpu.c", "common/softaes.c",
    *(f"{a}/{a}{v}.c" for a in ("aegis128x4", "aegis256x4") for v in
      ("", "_aesni", "_avx2", "_avx512", "_soft", "_neon_aes", "_altivec")),
]
_AEGIS_HEADERS = sorted(os.path.relpath(h, _AEGIS) for h in glob.glob(f"{_AEGIS}/*/*.h"))

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
            # the control channel's AES-256-GCM messages (OpenSSL's libcrypto: libssl-dev)
            "terascale._gcm",
            ["src/terascale/_gcm.c"],
            libraries=["crypto"],
            extra_compile_args=["-O2", "-std=gnu11"],
            optional=True,
        ),
        Extension(
            # authenticated links' records (AES-256-GCM on OpenSSL's libcrypto: libssl-dev;
            # AEGIS-128X4 as a MAC and AEGIS-256X4 on the vendored libaegis)
            "terascale.transport._seclink",
            # _ghash.c: GHASH on VPCLMULQDQ, its functions compiled for AVX-512 by their own
            # target attributes and run only where the CPU has it (checked at run time);
            # libaegis's implementations likewise select their instruction sets by pragma,
            # and its aegis_init picks one at run time (no -m flags on any file)
            ["src/terascale/transport/_seclink.c", "src/terascale/transport/_ghash.c",
             *(f"{_AEGIS}/{f}" for f in _AEGIS_SOURCES)],
            depends=["src/terascale/transport/_ghash.h",
                     *(f"{_AEGIS}/{f}" for f in _AEGIS_HEADERS)],
            include_dirs=[f"{_AEGIS}/include"],
            libraries=["crypto"],
            # hidden: libaegis's symbols stay inside the module (PyInit_ is exported)
            extra_compile_args=["-O2", "-std=gnu11", "-fvisibility=hidden"],
            optional=True,
        ),
        Extension(
            "terascale.linear._vw._vwfast",
            ["src/terascale/linear/_vw/_vwfast.c", "src/terascale/linear/_vw/_vwlearn.c",
             "src/terascale/linear/_vw/_vwbits.c", "src/terascale/linear/_vw/_vwtable.c",
             "src/terascale/linear/_vw/_vwsparse.c"],
            depends=["src/terascale/linear/_vw/_vwlearn.h", "src/terascale/linear/_vw/_vwbits.h",
                     "src/terascale/linear/_vw/_vwtable.h", "src/terascale/linear/_vw/_vwsparse.h"],
            # VW's float loop rounds every operation: no fused multiply-add; libm's functions
            # called as written (gcc may narrow (float)exp((double)f) to expf(f), which rounds
            # differently: the online learner calls each as VW and the numba pass do)
            extra_compile_args=["-O3", "-std=gnu11", "-ffp-contract=off",
                                *(f"-fno-builtin-{f}" for f in
                                  ("exp", "expf", "log", "logf", "pow", "powf", "sqrt"))],
            optional=True,
        ),
    ],
)
