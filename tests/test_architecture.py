"""The public surface and the import rules of ARCHITECTURE.md, checked on the source tree.

* Every public package's ``__all__`` is sorted and is exactly what it exports (in the style
  of httpx's ``tests/test_exported_members.py``); every public module has a docstring and an
  ``__all__`` whose classes and functions are documented.
* No module imports another package's private module or another module's private name
  (walked with ``ast``; string module paths such as ``python -m terascale.x._y`` count).
* Examples and the README use public names only.
* ``JobEnv.to_environ`` is the one writer of the ``TERASCALE_*`` environment contract.
* ``terascale linear train`` on one worker imports no optional stack (torch, Spark, Ray,
  scikit-learn, scipy's optimizers): its fixed start-up cost is numba's alone.

Known violations are listed in ``ALLOWED`` with the reason and who removes them; an entry
that no longer occurs is reported so that the list only shrinks.
"""

from __future__ import annotations
import __future__

import ast
import functools
import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest

import terascale
from terascale._env import ENV_KEYS

ROOT = Path(__file__).resolve().parent
while not (ROOT / "pyproject.toml").exists():  # tests/ or tests/<area>/
    ROOT = ROOT.parent
SRC = ROOT / "src"

# (importer, imported) -> why it is still there and who removes it.
ALLOWED: dict[tuple[str, str], str] = {
    ("terascale.bench.failures", "terascale.transport._frames"):
        "kept: the failure benchmark times the private frame codec itself (a micro-benchmark "
        "of the wire format's header check); nothing else outside transport/ uses it",
}
# The layers of ARCHITECTURE.md: a module imports only from its own layer or below.
LAYERS: dict[str, int] = {
    **dict.fromkeys(["_errors", "_units", "_env", "_secret", "_arrays", "_async", "_auth", "_timeline",
                     "_files", "_bind", "_admission", "_shmcore", "_gcm", "_background",
                     "_malloc", "_pages", "_cext", "_lazy"], 0),
    "transport": 1,
    "rendezvous": 2, "collectives": 2,
    **dict.fromkeys(["communicator", "_comm_core", "_comm_objects", "_init", "_checkpoint",
                     "terascale"], 3),
    "launch": 4, "testing": 4,
    "linear": 5, "torch": 5, "sim": 5,
    "engines": 6, "spark": 6, "ray": 6, "dask": 6,
    **dict.fromkeys(["bench", "cli", "_demo", "__main__"], 7),
}
# (importer, area it should not reach up to) -> why it is still there and who removes it.
LAYER_ALLOWED: dict[tuple[str, str], str] = {}
UNDOCUMENTED_ALLOWED: dict[str, str] = {}


def _public_modules() -> list[tuple[str, bool]]:
    found = [("terascale", True)]
    for m in pkgutil.walk_packages(terascale.__path__, "terascale."):
        if not any(p.startswith("_") for p in m.name.split(".")[1:]):
            found.append((m.name, m.ispkg))
    return found


PUBLIC = _public_modules()


def _import(name: str) -> types.ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as e:  # an optional extra (torch, pyspark, ray) not installed here
        pytest.skip(f"{name}: {e}")


@pytest.mark.parametrize("name", [n for n, pkg in PUBLIC if pkg])
def test_package_exports_exactly_its_all(name: str) -> None:
    mod = _import(name)
    exported = list(mod.__all__)
    assert exported == sorted(exported), f"{name}.__all__ is not sorted"
    public = {n for n, v in vars(mod).items()
              if not n.startswith("_") and not isinstance(v, types.ModuleType)
              and v is not __future__.annotations}
    lazy = "__getattr__" in vars(mod)  # PEP 562: names appear on first use
    if lazy:
        assert public <= set(exported), f"{name} exports {sorted(public - set(exported))}"
    else:
        assert public == set(exported) - {"__version__"}, (
            f"{name}: exported but not in __all__: {sorted(public - set(exported))}; "
            f"in __all__ but not defined: {sorted(set(exported) - public - {'__version__'})}")
    for n in exported:
        assert getattr(mod, n) is not None


# What a user or an algorithm author calls: the registry, its entries, auto's choice and the
# classic algorithms. The communicator's building blocks (fast paths, segments, chunk
# bounds, sub-groups, the other collectives) stay in their modules.
COLLECTIVES_SURFACE = {
    "ALLREDUCE", "ALLREDUCE_ALGORITHMS", "AllreduceCall", "AllreduceSpec",
    "HalvingDoublingAllreduce", "RingAllreduce", "TreeAllreduce", "allreduce_names",
    "allreduce_spec", "choose_allreduce", "register_algorithm"}


def test_collectives_exports_the_users_surface_only() -> None:
    import terascale.collectives as c

    assert set(c.__all__) == COLLECTIVES_SURFACE
    for internal in ("FastAllreduce", "PairAllreduce", "ShmGroups", "bounds", "shm_barrier",
                     "split_groups", "RingAllgather"):
        assert not hasattr(c, internal), f"terascale.collectives exports {internal}"


@pytest.mark.parametrize("name", [n for n, _ in PUBLIC])
def test_public_module_is_documented(name: str) -> None:
    mod = _import(name)
    assert inspect.getdoc(mod), f"{name} has no module docstring"
    assert hasattr(mod, "__all__"), f"{name} has no __all__"
    for n in mod.__all__:
        obj = getattr(mod, n)
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and not inspect.getdoc(obj):
            if f"{name}.{n}" not in UNDOCUMENTED_ALLOWED:
                pytest.fail(f"{name}.{n} has no docstring")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def _tree(path: Path) -> ast.Module:
    """``path`` parsed, once for all the rules of this file."""
    return ast.parse(path.read_text())


@functools.cache
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of ``path``'s tree (``ast.walk``'s order), once for all the rules."""
    return tuple(ast.walk(_tree(path)))


@functools.cache
def _imports(path: Path, module: str) -> tuple[tuple[str, int], ...]:
    """Every terascale module or name ``path`` imports (relative imports resolved)."""
    is_pkg = path.name == "__init__.py"
    found = []
    for node in _nodes(path):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            targets = [prefix] + [f"{prefix}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                re.fullmatch(r"terascale(\.\w+)+", node.value):
            targets = [node.value]
        line = getattr(node, "lineno", 0)
        found += [(t, line) for t in targets if t.split(".")[0] == "terascale"]
    return tuple(found)


def _owner(target: str) -> str | None:
    """Where a private part of ``target`` belongs: ``terascale.linear._online._update`` ->
    ``terascale.linear``; ``terascale.torch.hooks._Done`` -> ``terascale.torch.hooks``."""
    parts = target.split(".")
    for i, p in enumerate(parts):
        if p.startswith("_") and not p.startswith("__"):
            return ".".join(parts[:i])
    return None


def _may_import(importer: str, target: str) -> bool:
    owner = _owner(target)
    if owner is None or importer == owner or importer.startswith(owner + "."):
        return True  # public, or private to a package that contains the importer
    # The `terascale` command assembles each area's sub-commands from its _cli module.
    return importer == "terascale.cli" and target.split(".")[-1] == "_cli" or \
        importer == "terascale.cli" and target.endswith("._cli.add_parser")


def _violations() -> dict[tuple[str, str], str]:
    found: dict[tuple[str, str], str] = {}
    for path in sorted((SRC / "terascale").rglob("*.py")):
        module = _module_name(path)
        for target, line in _imports(path, module):
            if not _may_import(module, target):
                # report the private module (or the module holding the private name)
                owner = _owner(target)
                assert owner is not None
                rest = target[len(owner) + 1:].split(".")[0]
                key = (module, f"{owner}.{rest}")
                found.setdefault(key, f"{path.relative_to(ROOT)}:{line}")
    return found


def test_no_package_imports_another_packages_private_module() -> None:
    found = _violations()
    new = {k: v for k, v in found.items() if k not in ALLOWED}
    assert not new, "private imports across packages (see ARCHITECTURE.md):\n" + "\n".join(
        f"  {where}: {importer} imports {target}" for (importer, target), where in new.items())
    stale = sorted(set(ALLOWED) - set(found))
    if stale:
        warnings.warn(f"remove from ALLOWED in {Path(__file__).name} (fixed): {stale}",
                      stacklevel=1)


def _area(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "terascale"


def test_layers_import_only_downward() -> None:
    upward: dict[tuple[str, str], str] = {}
    unknown = set()
    for path in sorted((SRC / "terascale").rglob("*.py")):
        module = _module_name(path)
        a = _area(module)
        if a not in LAYERS:
            unknown.add(a)
            continue
        for target, line in _imports(path, module):
            b = _area(target)
            if b not in LAYERS:  # `from terascale import init`: a name of the package
                b = "terascale"
            if LAYERS[b] > LAYERS[a]:
                upward.setdefault((module, b), f"{path.relative_to(ROOT)}:{line}: {module} "
                                  f"(layer {LAYERS[a]}) imports {target} (layer {LAYERS[b]})")
    assert not unknown, f"add these areas to LAYERS and ARCHITECTURE.md: {sorted(unknown)}"
    new = [where for key, where in upward.items() if key not in LAYER_ALLOWED]
    assert not new, "imports against the layers (ARCHITECTURE.md):\n" + "\n".join(new)
    stale = sorted(set(LAYER_ALLOWED) - set(upward))
    if stale:
        warnings.warn(f"remove from LAYER_ALLOWED in {Path(__file__).name} (fixed): {stale}",
                      stacklevel=1)


def test_the_rule_sees_what_it_should() -> None:
    # the checker itself: a private module of another package, a private name, allowed cases
    assert not _may_import("terascale.sim.plans", "terascale.linear._online._update")
    assert not _may_import("terascale.torch.optimizer", "terascale.torch.hooks._Done")
    assert _may_import("terascale.linear._train", "terascale.linear._online._update")
    assert _may_import("terascale.linear._train", "terascale._errors")
    assert _may_import("terascale.torch.hooks", "terascale.torch._onebit")
    assert _may_import("terascale.cli", "terascale.linear._front._cli")
    assert not _may_import("terascale.bench._cli", "terascale.linear._front._cli")


def test_examples_and_readme_use_public_names() -> None:
    bad = []
    for path in sorted((ROOT / "examples").glob("*.py")):
        for target, line in _imports(path, "examples." + path.stem):
            if _owner(target) is not None:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {target}")
    for i, text in enumerate((ROOT / "README.md").read_text().splitlines(), 1):
        for m in re.finditer(r"\bterascale(?:\.\w+)*\._[a-z]\w*", text):
            bad.append(f"README.md:{i}: {m.group(0)}")
    assert not bad, "private names in user-facing code:\n" + "\n".join(bad)


def test_one_writer_of_the_environment_contract() -> None:
    writers = []
    for path in sorted((SRC / "terascale").rglob("*.py")):
        if path.name == "_env.py":
            continue
        for node in _nodes(path):
            keys: list[ast.expr | None] = []
            if isinstance(node, ast.Dict):
                keys = list(node.keys)
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                keys = [node.slice]
            elif isinstance(node, ast.Call):
                keys = [ast.Constant(k.arg) for k in node.keywords if k.arg]
            for k in keys:
                if isinstance(k, ast.Constant) and k.value in ENV_KEYS:
                    writers.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}: "
                                   f"{k.value!s}")
    assert not writers, "write TERASCALE_* only with JobEnv.to_environ():\n" + "\n".join(writers)


def _environ_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """``os.environ.get("TERASCALE_X")``, ``os.environ["TERASCALE_X"]``, ``"TERASCALE_X" in
    os.environ``: TERASCALE_* variables read without _env's readers."""
    def is_environ(node: ast.AST) -> bool:
        return isinstance(node, ast.Attribute) and node.attr == "environ"

    def key(node: ast.AST | None) -> str | None:
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) \
            and node.value.startswith("TERASCALE_") else None

    found = []
    for node in ast.walk(tree):
        k = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("get", "pop", "setdefault") and is_environ(node.func.value):
            k = key(node.args[0]) if node.args else None
        elif isinstance(node, ast.Subscript) and is_environ(node.value) and \
                not isinstance(node.ctx, ast.Store):  # setting one for this process: a write
            k = key(node.slice)
        elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            k = key(node.left)
        if k:
            found.append((node.lineno, k))
    return found


def test_terascale_variables_are_read_through_env() -> None:
    """``_env.py`` owns the environment contract: it reads every TERASCALE_* variable (the
    job's in read_env, a process's own settings in read_setting/read_switch, the secret
    through _secret.py), so that one module lists them all."""
    bad = []
    for path in sorted((SRC / "terascale").rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in ("terascale/_env.py", "terascale/_secret.py"):
            continue
        bad += [f"src/{rel}:{line}: {k}" for line, k in _environ_reads(_tree(path))]
    assert not bad, "read TERASCALE_* through terascale._env:\n" + "\n".join(bad)
    probe = ast.parse('import os\nos.environ.get("TERASCALE_X")\n"TERASCALE_Y" in os.environ\n'
                      'os.environ["TERASCALE_Z"]\nos.environ.get("HOME")\n')
    assert [k for _, k in _environ_reads(probe)] == ["TERASCALE_X", "TERASCALE_Y", "TERASCALE_Z"]


def _secret_reads(tree: ast.AST) -> list[int]:
    """Lines reading a secret variable from any mapping (``env.get("TERASCALE_SECRET")``,
    ``env["TERASCALE_SECRET_FILE"]``, ``"TERASCALE_INSECURE_NO_SECRET" in env``)."""
    def secret(node: ast.AST | None) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, str) and \
            node.value.startswith("TERASCALE_") and "SECRET" in node.value

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("get", "pop") and node.args and secret(node.args[0]):
            lines.append(node.lineno)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and \
                secret(node.slice):
            lines.append(node.lineno)
        elif isinstance(node, ast.Compare) and secret(node.left):
            lines.append(node.lineno)
    return lines


def test_the_secret_is_read_only_by_secret_py() -> None:
    """``_secret.py`` owns where the job secret comes from (variable, file, the loopback
    opt-out); everyone else calls ``user_secret``/``read_secret``."""
    bad = [f"src/{p.relative_to(SRC).as_posix()}:{line}"
           for p in sorted((SRC / "terascale").rglob("*.py")) if p.name != "_secret.py"
           for line in _secret_reads(_tree(p))]
    assert not bad, "read the secret through terascale._secret:\n" + "\n".join(bad)
    probe = ast.parse('e.get("TERASCALE_SECRET")\ne["TERASCALE_SECRET_FILE"]\n'
                      '"TERASCALE_INSECURE_NO_SECRET" in e\ne.get("TERASCALE_JOB")\n')
    assert sorted(_secret_reads(probe)) == [1, 2, 3]


# Strings equal to an algorithm's name that are not that algorithm (file: reason).
_NOT_ALGORITHM_NAMES = {
    ("terascale/bench/_peers.py", "shm"): "Intel MPI's I_MPI_FABRICS value",
    ("terascale/sim/links.py", "tree"): "a kind of link traffic, named in link_cost.json",
    ("terascale/sim/links.py", "halving_doubling"): "a kind of link traffic (link_cost.json)",
}


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}


def test_only_the_registry_and_its_own_module_name_an_algorithm() -> None:
    """An allreduce algorithm is one module and one registry entry: every other module
    reads the entry's properties (placement, cost, schedule, fast path, auto's role) and
    never compares with, returns or lists a name (docstrings and comments may)."""
    from terascale.collectives.registry import ALLREDUCE

    def module_of(target: str) -> str:
        mod = target.partition(":")[0]
        return "terascale.collectives" + mod if mod.startswith(".") else mod

    owners = {name: {"terascale.collectives.registry", module_of(spec.target)}
              | ({module_of(spec.cost)} if spec.cost else set())
              for name, spec in ALLREDUCE.items()}
    bad = []
    for path in sorted((SRC / "terascale").rglob("*.py")):
        module, rel = _module_name(path), path.relative_to(SRC).as_posix()
        docs = _docstrings(_tree(path))
        for node in _nodes(path):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    node.value in owners and id(node) not in docs and \
                    module not in owners[node.value] and \
                    (rel, node.value) not in _NOT_ALGORITHM_NAMES:
                bad.append(f"src/{rel}:{node.lineno}: {node.value!r}")
    assert not bad, ("name an algorithm only in collectives/registry.py and its own module; "
                     "elsewhere read its AllreduceSpec:\n" + "\n".join(bad))


def test_the_name_rule_sees_what_it_should() -> None:
    probe = ast.parse('def f(a):\n    """tree or ring"""\n    return a == "ring"\n')
    docs = _docstrings(probe)
    found = [n.value for n in ast.walk(probe) if isinstance(n, ast.Constant)
             and isinstance(n.value, str) and id(n) not in docs]
    assert found == ["ring"]


# Run in a fresh interpreter: this test session has long imported torch, sklearn, ...
# (the first argument: more packages, comma-separated, that the command must not import)
_LEAN_TRAIN = """
import sys
from terascale.cli import main
rc = main(sys.argv[2:])
heavy = ("torch", "pyspark", "ray", "sklearn", "pandas", "pyarrow", "scipy.optimize",
         "scipy.sparse", "scipy.stats", "terascale.torch", "terascale.spark", "terascale.ray")
also = tuple(sys.argv[1].split(",")) if sys.argv[1] else ()
print(rc, sorted(m for m in sys.modules if m.startswith(heavy)
                 or m.partition(".")[0] in also))
"""


@pytest.mark.parametrize(("command", "also"), [
    (["linear", "train", "{data}", "-b", "10", "-f", "{model}", "--quiet"], ""),
    # (VW's batch learner runs no numba kernel: the compiled parser's examples, its sparse
    # products the compiled core's or numpy's, its losses numpy's)
    (["vw", "--bfgs", "--passes", "3", "-d", "{data}", "-b", "10", "-f", "{model}",
      "--predict_only_model", "--quiet"], "numba,llvmlite")])
def test_linear_train_imports_no_optional_stack(tmp_path: Path, command: list[str],
                                                also: str) -> None:
    data = tmp_path / "small.vw"
    data.write_text("".join(f"{i % 2} |a x{i % 7}:0.5 y |b z{i % 3}\n" for i in range(40)))
    argv = [a.format(data=data, model=tmp_path / "m") for a in command]
    from terascale._cext import load
    from terascale.linear._vw import VWFAST

    if load(*VWFAST) is None:  # (no compiled parser: numba's reads the text)
        also = ""
    out = subprocess.run([sys.executable, "-c", _LEAN_TRAIN, also, *argv],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[-2] == "0 []", out.stdout + out.stderr


# What a job of several ranks needs and a one-worker run does not: the links, the
# rendezvous, the algorithms, checkpoints; and the estimators the command line never uses.
_MULTI_RANK_ONLY = ("terascale.transport", "terascale.rendezvous", "terascale.collectives",
                    "terascale._checkpoint", "terascale.launch", "terascale.linear._front._sklearn",
                    "sklearn")


def _imported(stderr: str) -> set[str]:
    """The modules ``python -X importtime`` reported importing."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines()
            if line.startswith("import time:") and line.count("|") == 2}


@pytest.mark.parametrize(("command", "learner"), [
    (["vw", "-d"], "terascale.linear._vw._vwonline"),  # (the compiled one-worker learner)
    (["linear", "train", "--quiet"], "terascale.linear._train")])
def test_a_one_worker_command_imports_nothing_of_a_multi_rank_job(
        tmp_path: Path, command: list[str], learner: str) -> None:
    data = tmp_path / "small.vw"
    data.write_text("".join(f"{i % 2} |a x{i % 7}:0.5 y |b z{i % 3}\n" for i in range(40)))
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "terascale", *command,
                          str(data), "-f", str(tmp_path / "m"), "-b", "10"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    imported = _imported(out.stderr)
    from terascale._cext import load
    from terascale.linear._vw import VWFAST

    if load(*VWFAST) is None:  # (no compiled core: numba's pass)
        learner = "terascale.linear._train"
    assert learner in imported  # it did run, and -X importtime reported it
    heavy = sorted(m for m in imported if m.startswith(_MULTI_RANK_ONLY))
    assert not heavy, f"terascale {' '.join(command)} on one worker imported {heavy}"


# The process that launches -n N workers, and the numba modules it has imported.
_LAUNCHER = """
import sys
from terascale.cli import main
sys.argv = ["terascale", *sys.argv[1:]]
rc = main()
print(rc, sorted(m for m in sys.modules if m.partition(".")[0] in ("numba", "llvmlite")))
"""


@pytest.mark.parametrize(("exec_workers", "average"), [("1", "chain"), ("0", "chain"),
                                                      ("0", "weighted")])
def test_the_launcher_of_n_workers_imports_numba_only_to_fork_them(
        tmp_path: Path, exec_workers: str, average: str) -> None:
    """Workers of the numba pass (``--average chain``) started as programs of their own:
    the launcher checks the options and imports no numba. Forked (the default): it loads
    the learner once, for all of them. Workers of the compiled learner (two passes,
    averaged): none."""
    data = tmp_path / "small.vw"
    data.write_text("".join(f"{i % 2} |a x{i % 7}:0.5 y |b z{i % 3}\n" for i in range(40)))
    args = ["vw", "-n", "2", "-d", str(data), "-b", "10", "-q", "ab", "--quiet",
            "-f", str(tmp_path / "m"), "--passes", "2", "--average", average,
            "--cache-dir", str(tmp_path)]
    # the first run compiles the kernels if this tree's are not in numba's cache yet
    subprocess.run([sys.executable, "-m", "terascale", *args], check=True, timeout=300,
                   capture_output=True)
    out = subprocess.run([sys.executable, "-c", _LAUNCHER, *args], capture_output=True,
                         text=True, timeout=120,
                         env={**os.environ, "TERASCALE_EXEC_WORKERS": exec_workers})
    assert out.returncode == 0, out.stderr[-3000:]
    rc, loaded = out.stdout.splitlines()[-1].split(" ", 1)
    assert rc == "0"
    if exec_workers == "1" or average == "weighted":
        assert loaded == "[]", out.stdout[-3000:]
    else:
        assert "'numba'" in loaded and "'llvmlite'" in loaded
    assert (tmp_path / "m").stat().st_size > 0  # the workers learned and rank 0 wrote it


def test_a_transport_is_one_module_and_one_registry_line() -> None:
    """ARCHITECTURE.md, "How to add a transport": outside ``transport/`` nothing imports a
    particular transport (the communicator, the rendezvous and ``init()`` reach them through
    ``transport.base``'s registry), and the in-process transport is named only by its
    module, its line in ``TRANSPORTS``, the package's docstring and the harness that runs
    ranks on it."""
    from terascale.transport.base import TRANSPORTS

    specific = {f"terascale.transport{target.partition(':')[0]}"
                for target in TRANSPORTS.values() if isinstance(target, str)}
    specific |= {"terascale.transport.tcp", "terascale.transport.connect_tcp",
                 "terascale.transport.listen", "terascale.transport.TcpTransport"}
    bad = []
    for path in sorted((SRC / "terascale").rglob("*.py")):
        module = _module_name(path)
        if module == "terascale.transport" or module.startswith("terascale.transport."):
            continue
        for target, line in _imports(path, module):
            if any(target == m or target.startswith(m + ".") for m in specific):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {target}")
    assert not bad, "a particular transport imported outside transport/ (use the registry, " \
        "terascale.transport.connector):\n" + "\n".join(bad)
    named = {str(p.relative_to(SRC / "terascale")) for p in (SRC / "terascale").rglob("*.py")
             if "inprocess" in p.read_text()}
    assert named == {"transport/inprocess.py", "transport/base.py", "transport/__init__.py",
                     "testing/_threads.py"}, named


def test_every_benchmark_script_imports() -> None:
    """The scripts under ``benchmarks/`` (the commands the benchmark pages cite) import
    what they use from the package as it is now: a name moved or renamed fails here, not
    when a reader reruns a page's command."""
    scripts = sorted((ROOT / "benchmarks").glob("*.py"))
    assert scripts
    code = ("import importlib.util, sys\n"
            "for path in sys.argv[1:]:\n"
            "    spec = importlib.util.spec_from_file_location('bench_script', path)\n"
            "    spec.loader.exec_module(importlib.util.module_from_spec(spec))\n")
    out = subprocess.run([sys.executable, "-c", code, *map(str, scripts)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
