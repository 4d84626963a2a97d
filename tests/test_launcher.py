"""``python -m ozlinalg run``: routing whatever the import order.

A library module that binds names at import (``from scipy.linalg import
cholesky, cho_solve``, ``from numpy.linalg import solve``, as Gaussian-process
code does) is run in a subprocess through the launcher; the program's own
``ozlinalg.profile()`` counters show which calls were routed and emulated, in
the main thread and in a thread it starts. The program must also observe what
plain ``python script.py`` / ``python -m module`` gives it: argv, ``__main__``,
``sys.path[0]``, exit status, tracebacks.
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LIBRARY = '''
from numpy.linalg import solve
from scipy.linalg import cho_solve, cholesky


def fit(k, y):
    low = cholesky(k, lower=True)
    return cho_solve((low, True), y), solve(k, y)
'''

APP = '''
import json
import pickle
import sys
import threading

import numpy as np

import gplib  # binds its names now, before any ozlinalg.backend() block
import ozlinalg


class Point:
    pass


original = ozlinalg.backend.original  # the native function behind a shim


def report():
    rng = np.random.default_rng(0)
    g = rng.standard_normal((40, 40))
    k = g @ g.T + 40 * np.eye(40)
    y = rng.standard_normal(40)
    with ozlinalg.profile() as prof:
        if "--block" in sys.argv:
            with ozlinalg.backend(strategy="eager"):
                alpha, x = gplib.fit(k, y)
        else:
            alpha, x = gplib.fit(k, y)
    import scipy.linalg

    low = original(scipy.linalg.cholesky)(k, lower=True)
    alpha_ref = original(scipy.linalg.cho_solve)((low, True), y)
    x_ref = original(np.linalg.solve)(k, y)
    err = max(float(np.max(np.abs(alpha - alpha_ref) / np.abs(alpha_ref))),
              float(np.max(np.abs(x - x_ref) / np.abs(x_ref))))
    return dict(emulated=prof.routed_emulated, native=prof.routed_native,
                gemms=prof.emulated_gemm_calls, slices=sorted(set(prof.slices)),
                funcs=sorted({r.function for r in prof.routing}), err=err)


out = {"main": report()}
t = threading.Thread(target=lambda: out.__setitem__("thread", report()))
t.start()
t.join()
out.update(argv=sys.argv, name=__name__, file=__file__, path0=sys.path[0],
           strategy=ozlinalg.get_options().strategy,
           pickled=type(pickle.loads(pickle.dumps(Point()))).__module__)
print(json.dumps(out))
if "--exit" in sys.argv:
    sys.exit(int(sys.argv[sys.argv.index("--exit") + 1]))
if "--raise" in sys.argv:
    raise ValueError("boom from app")
'''

ROUTED = ["numpy.linalg.solve", "scipy.linalg.cho_solve", "scipy.linalg.cholesky"]


@pytest.fixture(scope="module")
def app_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("app")
    (d / "gplib.py").write_text(textwrap.dedent(LIBRARY))
    (d / "app.py").write_text(textwrap.dedent(APP))
    return d


def python(args, cwd, **env_extra):
    """Run ``python *args`` with the worktree's ozlinalg importable and no
    OZLINALG_* variables but the ones given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OZLINALG_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    env.update(env_extra)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def result(proc):
    assert proc.stdout, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


class TestRun:
    def test_names_bound_at_import_are_routed_in_every_thread(self, app_dir):
        proc = python(["-m", "ozlinalg", "run", "--strategy", "eager", "app.py", "a", "--b"],
                      app_dir)
        assert proc.returncode == 0, proc.stderr
        out = result(proc)
        for where in ("main", "thread"):  # a thread the program starts is routed too
            r = out[where]
            assert r["emulated"] == 3 and r["native"] == 0 and r["funcs"] == ROUTED
            assert r["gemms"] > 0
            assert r["err"] < 1e-12  # and the answers agree with LAPACK's
        # the program sees what `python app.py a --b` gives it
        assert out["argv"] == ["app.py", "a", "--b"]
        assert out["name"] == "__main__" and out["pickled"] == "__main__"
        assert out["file"] == str(app_dir / "app.py")
        assert out["path0"] == os.path.realpath(app_dir)
        assert out["strategy"] == "eager"

    def test_plain_python_misses_names_bound_before_the_block(self, app_dir):
        # The problem the launcher solves: the same program under plain python,
        # with a backend() block around the calls, routes nothing.
        proc = python(["app.py", "--block"], app_dir)
        assert proc.returncode == 0, proc.stderr
        r = result(proc)["main"]
        assert r["emulated"] == r["native"] == r["gemms"] == 0

    def test_default_strategy_is_performant(self, app_dir):
        proc = python(["-m", "ozlinalg", "run", "app.py"], app_dir)
        assert proc.returncode == 0, proc.stderr
        out = result(proc)
        assert out["strategy"] == "performant"
        for where in ("main", "thread"):
            r = out[where]  # screened, and run natively: no crossover on this engine
            assert r["native"] == 3 and r["emulated"] == 0 and r["gemms"] == 0
            assert r["funcs"] == ROUTED and r["err"] == 0.0

    def test_module_with_options_from_env_and_flags(self, app_dir):
        proc = python(["-m", "ozlinalg", "run", "--slices", "8", "-m", "app", "x", "--y"],
                      app_dir, OZLINALG_STRATEGY="eager", OZLINALG_SLICES="7")
        assert proc.returncode == 0, proc.stderr
        out = result(proc)
        assert out["main"]["slices"] == [8]  # the flag wins over OZLINALG_SLICES
        assert out["thread"]["slices"] == [8] and out["strategy"] == "eager"
        assert out["argv"] == [str(app_dir / "app.py"), "x", "--y"]  # as python -m app
        assert out["name"] == "__main__" and out["pickled"] == "__main__"
        proc = python(["-m", "ozlinalg", "run", "--profile", "app.py"], app_dir,
                      OZLINALG_STRATEGY="eager", OZLINALG_SLICES="7")
        assert proc.returncode == 0, proc.stderr
        assert result(proc)["main"]["slices"] == [7]
        assert "backend routing     : 3 emulated, 0 native" in proc.stderr  # --profile

    def test_exit_status_and_traceback_as_plain_python(self, app_dir):
        proc = python(["-m", "ozlinalg", "run", "app.py", "--exit", "7"], app_dir)
        assert proc.returncode == 7 and result(proc)["argv"][1:] == ["--exit", "7"]
        plain = python(["app.py", "--raise"], app_dir)
        ours = python(["-m", "ozlinalg", "run", "app.py", "--raise"], app_dir)
        assert plain.returncode == ours.returncode == 1
        assert ours.stderr.rstrip().endswith("ValueError: boom from app")
        assert ours.stderr == plain.stderr  # the program's frames only

    def test_launcher_errors(self, app_dir):
        proc = python(["-m", "ozlinalg", "run", "missing.py"], app_dir)
        assert proc.returncode == 2 and "can't open file" in proc.stderr
        proc = python(["-m", "ozlinalg", "run", "-m", "no_such_module_here"], app_dir)
        assert proc.returncode == 1 and "No module named no_such_module_here" in proc.stderr
        proc = python(["-m", "ozlinalg", "run", "app.py"], app_dir, OZLINALG_SLICES="many")
        assert proc.returncode == 2 and "slices" in proc.stderr
        proc = python(["-m", "ozlinalg", "run", "--strategy", "lazy", "app.py"], app_dir)
        assert proc.returncode == 2 and "strategy" in proc.stderr
        proc = python(["-m", "ozlinalg", "run"], app_dir)
        assert proc.returncode == 2 and "usage:" in proc.stderr


class TestOptionParsing:
    """Flags and OZLINALG_* variables are text; each option gets its type."""

    def test_parse_option(self):
        from ozlinalg.tools.launcher import parse_option

        assert parse_option("slices", "auto") == "auto"
        assert parse_option("slices", " 9 ") == 9
        assert parse_option("min_size", "256") == 256
        assert parse_option("memory_limit", "none") is None
        assert parse_option("memory_limit", "1048576") == 1048576
        assert parse_option("balance", "true") is True
        assert parse_option("balance", "0") is False
        assert parse_option("balance", "auto") == "auto"
        assert parse_option("strategy", "eager") == "eager"
        with pytest.raises(ValueError, match="integer"):
            parse_option("min_size", "big")

    def test_options_from_env(self):
        from ozlinalg.tools.launcher import options_from_env

        env = {"OZLINALG_STRATEGY": "eager", "OZLINALG_MIN_SIZE": "64",
               "OZLINALG_METHOD": "", "OZLINALG_BENCH_ROUNDS": "3", "HOME": "/"}
        assert options_from_env(env) == {"strategy": "eager", "min_size": 64}
        with pytest.raises(ValueError, match="OZLINALG_MAX_SLICES"):
            options_from_env({"OZLINALG_MAX_SLICES": "lots"})


#: A bad value of every variable the launcher reads (the options' and the engines').
BAD_ENV = [
    ("OZLINALG_STRATEGY", "lazy"), ("OZLINALG_METHOD", "ozimmu-x"), ("OZLINALG_SLICES", "0"),
    ("OZLINALG_SLICES", "many"), ("OZLINALG_MIN_SIZE", "-1"), ("OZLINALG_MIN_SIZE", "big"),
    ("OZLINALG_MIN_ORDER", "-1"), ("OZLINALG_MIN_ORDER", "big"),
    ("OZLINALG_COUNT_CHECK", "maybe"),
    ("OZLINALG_MAX_SLICES", "0"), ("OZLINALG_MAX_SLICES", "65"), ("OZLINALG_MAX_SLICES", "x"),
    ("OZLINALG_MEMORY_LIMIT", "2GiB"), ("OZLINALG_MEMORY_LIMIT", "0"),
    ("OZLINALG_COMPLEX_SCHEME", "x"), ("OZLINALG_BALANCE", "sometimes"),
    ("OZLINALG_ENGINE", "mkl"), ("OZLINALG_ACCURACY", "exact"),
    ("OZLINALG_SCRATCH_CACHE", "abc"), ("OZLINALG_SCRATCH_CACHE", "inf"),
    ("OZLINALG_SCRATCH_CACHE", "-5"), ("OZLINALG_FUSED", "maybe"),
    ("OZLINALG_KERNELS_ISA", "avx9"),
    ("OZLINALG_NATIVE_ORDER", "-1"), ("OZLINALG_NATIVE_ORDER", "x"),
    ("OZLINALG_ONEDNN_LIBRARY", "/no/such/libdnnl.so.3"),
    ("OZLINALG_TUNING", "sometimes"),
]


class TestBadEnvironment:
    """Every variable the launcher reads is checked before the program starts: status
    2 and one line on stderr naming the variable and its value (docs/backend.md)."""

    def test_every_option_variable_is_covered(self):
        from ozlinalg.tools.launcher import _fields

        assert {f"OZLINALG_{n.upper()}" for n in _fields()} <= {v for v, _ in BAD_ENV}

    @pytest.mark.parametrize(("var", "text"), BAD_ENV)
    def test_status_2_and_one_line(self, monkeypatch, capsys, var, text):
        from ozlinalg.tools.launcher import main

        for key in list(os.environ):
            if key.startswith("OZLINALG_"):
                monkeypatch.delenv(key)
        monkeypatch.setenv(var, text)
        assert main(["not_started.py"]) == 2  # returns before the program is looked at
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1, err
        assert err.startswith("python -m ozlinalg run: error: ")
        assert f"{var}={text!r}" in err

    @pytest.mark.parametrize(("var", "text"), [("OZLINALG_MAX_SLICES", "0"),
                                               ("OZLINALG_COMPLEX_SCHEME", "x"),
                                               ("OZLINALG_SCRATCH_CACHE", "abc")])
    def test_subprocess(self, app_dir, var, text):
        proc = python(["-m", "ozlinalg", "run", "app.py"], app_dir, **{var: text})
        assert proc.returncode == 2 and proc.stdout == "", proc.stderr
        assert len(proc.stderr.splitlines()) == 1 and f"{var}={text!r}" in proc.stderr

    def test_bad_flag_values_name_the_flag(self, app_dir):
        for flag, text in (("--max-slices", "0"), ("--complex-scheme", "x")):
            proc = python(["-m", "ozlinalg", "run", flag, text, "app.py"], app_dir)
            assert proc.returncode == 2 and proc.stdout == ""
            assert f"{flag} {text!r}" in proc.stderr and "usage:" in proc.stderr

    def test_blank_variables_are_unset(self, app_dir):
        proc = python(["-m", "ozlinalg", "run", "app.py"], app_dir, OZLINALG_MAX_SLICES=" ",
                      OZLINALG_SCRATCH_CACHE="", OZLINALG_COMPLEX_SCHEME="")
        assert proc.returncode == 0, proc.stderr
