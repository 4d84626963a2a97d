"""``python -m ozlinalg``: the shell's view of the main job -- the version, the help
texts, the default subcommand, and usage errors instead of tracebacks.

The jobs themselves are tested where their subject is: compare's rows in
tests/ozaki/test_faithful.py, solve in tests/linalg/test_refine.py, tune in
tests/test_tuning.py, run in tests/test_launcher.py.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ozlinalg
from ozlinalg.__main__ import _parser, main

ROOT = Path(__file__).resolve().parents[1]

#: reST in a help text: argparse prints it as it is (``literal``, :role:`target`)
REST = re.compile(r"``|:[a-z]+:`")


def python_m(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OZLINALG_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep)
    return subprocess.run([sys.executable, "-m", "ozlinalg", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def exits(argv, capsys):
    """``(status, stdout, stderr)`` of a main() that ends in SystemExit."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def assert_usage_error(status, out, err, *words):
    """argparse's parser.error: status 2, nothing on stdout, the usage and ONE error
    line, last, naming what was wrong; no traceback."""
    assert status == 2 and out == "", (status, out, err)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines[0].startswith("usage: python -m ozlinalg")
    errors = [line for line in lines if ": error: " in line]
    assert errors == [lines[-1]], err
    for w in words:
        assert w in lines[-1], (w, lines[-1])


class TestVersion:
    def test_prints_the_version_and_exits_0(self, capsys):
        status, out, err = exits(["--version"], capsys)
        assert status in (0, None) and out == f"ozlinalg {ozlinalg.__version__}\n"

    def test_from_a_shell(self):
        proc = python_m("--version")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == f"ozlinalg {ozlinalg.__version__}\n"


class TestUsageErrors:
    @pytest.mark.parametrize(("argv", "words"), [
        (["compare", "--methods", "foo"], ["--methods", "'foo'", "hybrid-ef"]),
        (["compare", "--methods", "crt", "foo"], ["--methods", "'foo'"]),
        (["compare", "--methods", "all", "crt"], ["--methods", "all"]),
        (["compare", "--slices", "many"], ["--slices", "'many'"]),
        (["--methods", "foo"], ["--methods", "'foo'"]),  # compare by default
        (["solve", "--method", "foo"], ["--method", "'foo'"]),
        (["accuracy", "--methods", "foo"], ["--methods", "'foo'"]),
    ])
    def test_status_2_and_one_error_line(self, capsys, argv, words):
        assert_usage_error(*exits(argv, capsys), *words)

    def test_unknown_method_from_a_shell(self):
        proc = python_m("compare", "--methods", "foo")
        assert_usage_error(proc.returncode, proc.stdout, proc.stderr, "unknown method 'foo'")

    def test_aliases_are_methods(self):
        ap, _ = _parser()
        args = ap.parse_args(["compare", "--methods", "ozimmu_h", "gemmul8"])
        assert args.methods == ["ozimmu_h", "gemmul8"]  # the table names them as typed


class TestHelp:
    @pytest.mark.parametrize("argv", [[], ["compare"], ["solve"], ["tune"], ["accuracy"],
                                      ["run"]])
    def test_plain_text(self, capsys, argv):
        status, out, _ = exits([*argv, "--help"], capsys)
        assert status in (0, None) and out.startswith("usage: ")
        assert not REST.search(out), REST.search(out)

    @pytest.mark.parametrize("name", ["compare", "solve"])
    def test_every_option_says_what_it_does(self, name):
        _, subs = _parser()
        for action in subs[name]._actions:
            assert action.help, action.option_strings or action.dest

    def test_the_default_job_is_named(self, capsys):
        _, out, _ = exits(["--help"], capsys)
        text = " ".join(out.split())
        assert "Without a subcommand, python -m ozlinalg runs compare" in text
        assert "compare speed and accuracy of every method vs native FP64 (the default)" in text


def test_options_alone_run_compare(capsys):
    # what the help promises: python -m ozlinalg [compare's options] is compare
    main(["--n", "16", "--methods", "crt", "--repeat", "1", "--check-rows", "0",
          "--accuracy", "dgemm", "--device", "cpu", "--json"])
    res = json.loads(capsys.readouterr().out)
    assert res["n"] == 16 and [r["method"] for r in res["rows"]] == ["native FP64", "crt"]


def test_compare_shows_each_methods_int8_floor(capsys):
    """The INT8 products' own time beside the whole time (the method's floor on this
    engine): a positive number below the whole, in the table and in the JSON."""
    argv = ["compare", "--n", "96", "--methods", "hybrid-ef", "crt", "--repeat", "1",
            "--check-rows", "0", "--accuracy", "dgemm", "--device", "cpu"]
    main(argv + ["--json"])
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert "int8_seconds" not in rows[0]  # native FP64
    for r in rows[1:]:
        assert 0 < r["int8_seconds"] <= r["seconds"], r
    main(argv)
    out = capsys.readouterr().out
    assert re.search(r"time \[s\]\s+INT8 \[s\]\s+%", out)
    for r in rows[1:]:
        line = next(ln for ln in out.splitlines() if ln.split()[:1] == [r["method"]])
        t, floor, share = (float(x) for x in line.split()[2:5])
        assert 0 < floor <= t and 0 < share <= 100
