"""The first mistakes a newcomer makes get a message that says what to do.

Real processes and the real command line: a misspelled flag, sub-command or algorithm gets
"did you mean"; a script started without a launcher says once that its job has size 1; a
``.py`` given to ``terascale run`` suggests ``python``; a CSV file read as VW text suggests
``--format csv``; a failing worker's one-line cause comes before its traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from terascale import ConfigError, __version__
from terascale.cli import build_parser, main
from terascale.collectives import allreduce_spec


def _cli(capsys, *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out + out.err


def test_version(capsys):
    code, text = _cli(capsys, "--version")
    assert code == 0 and text.strip() == f"terascale {__version__}"


def test_misspelled_flag_of_a_subcommand(capsys):
    code, text = _cli(capsys, "bench", "allreduce", "--algoritms", "tree")
    assert code == 2
    assert "unrecognized arguments: --algoritms" in text
    assert "did you mean '--algorithms'?" in text
    assert len(text.strip().splitlines()) == 1  # one line, no 90-flag usage dump


def test_verbose_after_the_subcommand_is_the_global_flag(capsys):
    # `terascale run -n 2 -v ...` once said "unrecognized arguments: -v (did you mean '-v'?)"
    code, text = _cli(capsys, "bench", "allreduce", "-v", "--algoritms", "tree")
    assert code == 2 and "unrecognized arguments: --algoritms" in text and "-v" not in text
    proc = subprocess.run([sys.executable, "-m", "terascale", "run", "-n", "1", "-v",
                           sys.executable, "-c", "pass"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_misspelled_flag_of_linear_train(capsys, tmp_path):
    code, text = _cli(capsys, "linear", "train", "--pases", "2", str(tmp_path / "x.vw"))
    assert code == 2
    assert "unknown option --pases (did you mean '--passes'?)" in text
    assert "terascale linear train --help" in text and "Supported:" not in text
    code, text = _cli(capsys, "linear", "train", "--ngram", "2", str(tmp_path / "x.vw"))
    assert code == 2 and "is not supported" in text  # a refused VW flag keeps its reason


def test_misspelled_subcommand(capsys):
    code, text = _cli(capsys, "rnu", "-n", "2", "true")
    assert code == 2 and "did you mean 'run'?" in text


def test_nothing_close_suggests_nothing(capsys):
    code, text = _cli(capsys, "bench", "allreduce", "--zzzzzz")
    assert code == 2 and "did you mean" not in text


def test_misspelled_algorithm():
    with pytest.raises(ConfigError, match=r"did you mean 'ring'\?.*use one of auto"):
        allreduce_spec("rign")


def test_parser_is_exposed_without_sphinx_roles():
    parser = build_parser()
    text = parser.format_help()
    assert "--version" in text
    bench = next(a for a in parser._actions if hasattr(a, "choices") and a.choices
                 and "bench" in a.choices).choices["bench"]
    linear = next(a for a in bench._actions if hasattr(a, "choices") and a.choices
                  and "linear" in a.choices).choices["linear"]
    assert ":mod:" not in linear.format_help()


def test_help_in_the_terminal_shows_no_rst_markup(capsys):
    code, text = _cli(capsys, "bench", "failures", "--help")
    assert code == 0 and "`terascale bench failures`: how fast" in text
    assert "``" not in text
    # the parser the docs render keeps the literal markup, which Sphinx turns into code
    bench = build_parser()._subparsers._group_actions[0].choices["bench"]
    kinds = bench._subparsers._group_actions[0].choices
    assert "``terascale bench failures``" in kinds["failures"].description


def test_run_a_python_script_suggests_python(capsys, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    code, text = _cli(capsys, "run", "-n", "2", str(script))
    assert code == 2
    assert f"terascale run -n 2 python {script}" in text


@pytest.mark.parametrize("argv", [["-np", "2", "python", "train.py"],           # mpirun's habit
                                  ["--nproc-per-node", "2", "python", "train.py"],  # torchrun's
                                  ["python", "train.py", "-n", "2"]])              # -n at the end
def test_run_without_n_says_how_to_give_it(capsys, argv):
    code, text = _cli(capsys, "run", *argv)
    assert code == 2 and "give the number of workers as -n N, before the command" in text
    assert len(text.strip().splitlines()) == 1


def test_run_a_misspelled_interpreter_suggests_python(capsys):
    code, text = _cli(capsys, "run", "-n", "2", "pyhton", "train.py")
    assert code == 2 and "command not found: 'pyhton' (did you mean 'python'?)" in text
    code, text = _cli(capsys, "run", "-n", "2", "no-such-program-xq")
    assert code == 2 and "'no-such-program-xq' (check its spelling and PATH)" in text


def test_csv_read_as_vw_suggests_format_csv(capsys, tmp_path):
    data = tmp_path / "data.csv"
    data.write_text("y,a,b\n1,2,3\n0,1,1\n")
    code, text = _cli(capsys, "linear", "train", str(data), "--quiet")
    assert code == 2
    # (VW reads a line without '|' as an unlabelled example: no line is bad, none labelled)
    assert f"{data}: no labelled examples" in text
    assert "add --format csv, and --label COLUMN" in text
    # following the hint without naming the label column: the next error says how
    code, text = _cli(capsys, "linear", "train", str(data), "--format", "csv", "--quiet")
    assert code == 2
    assert "(columns: y, a, b); name the label column with --label COLUMN" in text
    code, text = _cli(capsys, "linear", "train", str(data), "--format", "csv", "--label", "y",
                      "--quiet", "-f", str(tmp_path / "m.model"))
    assert code == 0 and (tmp_path / "m.model").exists()


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("TERASCALE_", "RANK", "WORLD_SIZE", "OMPI_", "PMI_", "SLURM_"))}
    environ.update(env)
    return subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True,
                          text=True, timeout=60)


INIT_TWICE = "import terascale; c = terascale.init(); c = terascale.init(); print(c.size)"


def test_init_without_a_launcher_says_so_once():
    proc = _python(INIT_TWICE)
    assert proc.returncode == 0 and proc.stdout.strip() == "1"
    lines = [ln for ln in proc.stderr.splitlines() if "no launcher" in ln]
    assert len(lines) == 1 and "terascale run -n N python" in lines[0]


@pytest.mark.parametrize("env", [{"TERASCALE_QUIET": "1"},
                                 {"TERASCALE_RANK": "0", "TERASCALE_SIZE": "1"}])
def test_init_notice_is_silent_when_quiet_or_size_1_asked(env):
    proc = _python(INIT_TWICE, **env)
    assert proc.returncode == 0 and proc.stdout.strip() == "1"
    assert "no launcher" not in proc.stderr


@pytest.mark.parametrize("missing, argv, extra", [
    ("tqdm", ["bench", "allreduce", "-n", "2", "--vs", "", "--sizes", "4K"], "bench"),
    ("torch", ["bench", "torch", "--parts", "p2p"], "torch"),
    ("matplotlib", ["simulate", "--nodes", "4", "--bytes", "1MB", "--plot", "x.png"], "bench"),
])
def test_a_command_without_its_extra_says_what_to_install(missing, argv, extra):
    # the package made unimportable in a fresh interpreter, as in an install without the extra
    proc = _python(f"import sys; sys.modules[{missing!r}] = None\n"
                   f"from terascale.cli import main; sys.exit(main({argv!r}))")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert (f"this needs the {missing!r} package, part of the {extra!r} extra: "
            f"pip install 'terascale[{extra}]'") in proc.stderr


def test_linear_warm_up_before_launching_workers_gives_no_notice():
    # `terascale linear train -n 2` and `terascale demo` compile the kernels in the launcher
    # (a process no launcher started) before starting the workers: the notice would tell a
    # user who did run N workers that their job has size 1
    pytest.importorskip("numba")
    proc = _python("from terascale.linear._warm import _run; _run(False)")
    assert proc.returncode == 0, proc.stderr
    assert "no launcher" not in proc.stderr


def test_linear_train_with_one_worker_gives_no_notice(tmp_path):
    # `terascale linear train` without -n learns in its own process: a job of size 1 that
    # the user asked for, not a script that forgot its launcher
    pytest.importorskip("numba")
    data = tmp_path / "d.vw"
    data.write_text("".join(f"{i % 2} | a{i % 7} b{i % 5}\n" for i in range(200)))
    proc = subprocess.run([sys.executable, "-m", "terascale", "linear", "train", "-d", str(data),
                           "-b", "12", "-f", str(tmp_path / "m")], capture_output=True,
                          text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "TERASCALE_QUIET"})
    assert proc.returncode == 0, proc.stderr
    assert "no launcher" not in proc.stderr
    assert (tmp_path / "m").exists()


def test_run_prints_the_cause_before_the_traceback(tmp_path):
    script = tmp_path / "typo.py"
    script.write_text(textwrap.dedent("""
        import terascale
        comm = terascale.init()
        comm.allreduce([1.0], algorithm="rign" if comm.rank == 1 else "ring")
    """))
    proc = subprocess.run([sys.executable, "-m", "terascale", "run", "-n", "2", "--timeout", "20",
                           sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    summary = proc.stderr[proc.stderr.index("\nterascale run: rank 1: "):]
    first = summary.strip().splitlines()[0]
    assert "ConfigError: algorithm='rign' is not known (did you mean 'ring'?)" in first
    assert summary.index("Traceback") > summary.index(first)


def test_run_says_which_signal_ended_a_worker(tmp_path):
    script = tmp_path / "oom.py"
    script.write_text(textwrap.dedent("""
        import os, signal, terascale
        comm = terascale.init()
        if comm.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer ends a process
        comm.barrier()
    """))
    proc = subprocess.run([sys.executable, "-m", "terascale", "run", "-n", "2", "--timeout", "20",
                           sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 137, proc.stderr
    assert ("rank 1 failed first (exit status 137), killed by SIGKILL (out of memory? see "
            "dmesg)") in proc.stderr

