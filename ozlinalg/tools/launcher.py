"""``python -m ozlinalg run``: run a program with routing installed before it starts.

::

    python -m ozlinalg run [options] script.py [args ...]
    python -m ozlinalg run [options] -m module [args ...]

The way ``coverage run`` and ``python -m cProfile`` work: :func:`ozlinalg.install`
runs first, so every ``numpy.linalg`` / ``scipy.linalg`` name the program binds
at import (``from scipy.linalg import cholesky``) is the routing shim, and
routing is active in every thread for the whole run. The program then runs as
``python script.py [args]`` / ``python -m module [args]`` would run it: a fresh
``__main__`` module, ``sys.argv`` as the program expects it, ``sys.path[0]``
the script's directory (the current directory for ``-m``), and the same exit
status (``sys.exit(n)``: n; an uncaught exception: its traceback on stderr and
status 1; an unknown script: status 2, an unknown module: status 1).

Options come from flags, else from environment variables ``OZLINALG_<NAME>``
(``OZLINALG_STRATEGY``, ``OZLINALG_METHOD``, ``OZLINALG_SLICES``,
``OZLINALG_MIN_SIZE``, ...: one per field of :class:`ozlinalg.Options`), else
from :func:`ozlinalg.install`'s defaults (strategy "performant"). Before the
program starts every variable is checked, the engines' ones and ``OZLINALG_TUNING``
too (:func:`ozlinalg.engines.select.check_environment`,
:func:`ozlinalg._tuning.tuning_mode`): a bad one gives status 2 and
one line on stderr naming it; a bad flag value status 2 and the usage.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.machinery
import os
import runpy
import sys
import types

from .._env import env_text

__all__ = ["checked_option", "main", "options_from_env", "parse_option"]

ENV_PREFIX = "OZLINALG_"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _fields():
    from .._options import Options

    return [f.name for f in dataclasses.fields(Options)]


def parse_option(name: str, text: str):
    """The value of option `name` written as `text` (a flag or an environment
    variable): integers, ``"auto"``, ``none``, booleans for ``balance``."""
    from .._options import default_options

    t = text.strip()
    low = t.lower()
    default = getattr(default_options(), name)
    if name == "balance":
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        return t
    if low == "none" and (default is None or name == "memory_limit"):
        return None
    if isinstance(default, bool):
        if low in _TRUE | _FALSE:
            return low in _TRUE
        raise ValueError(f"expected true or false, got {text!r}")
    if isinstance(default, int) or default is None or name == "slices":
        try:
            return int(t)
        except ValueError:
            if isinstance(default, int):
                raise ValueError(f"expected an integer, got {text!r}") from None
            return t  # "auto", or a name the option validates
    return t


def checked_option(name: str, text: str):
    """:func:`parse_option`, then the check of :func:`ozlinalg.options`: the value
    of option `name` written as `text`, or ValueError / TypeError."""
    from .._options import validate

    return validate({name: parse_option(name, text)})[name]


def options_from_env(environ=None) -> dict:
    """``{name: value}`` from the ``OZLINALG_<NAME>`` variables that are set (and
    not blank), each checked: ValueError naming the variable on a bad one."""
    environ = os.environ if environ is None else environ
    out = {}
    for name in _fields():
        var = ENV_PREFIX + name.upper()
        text = env_text(var, environ)
        if text is not None:
            try:
                out[name] = checked_option(name, text)
            except (ValueError, TypeError) as e:
                raise ValueError(f"environment variable {var}={text!r}: {_reason(e)}") from None
    return out


def _reason(exc):
    """The message of `exc` without the library's ``ozlinalg...: `` prefix."""
    msg = str(exc)
    head, sep, rest = msg.partition(": ")
    return rest if sep and head.startswith("ozlinalg") else msg


_HELP = {
    "strategy": "eager | performant (default): emulate every call at or above MIN_SIZE, "
                "or only from the engine's measured crossover on",
    "method": "emulated GEMM method (ozlinalg.METHODS), default hybrid-ef",
    "slices": "slice count, or auto (default)",
    "min_size": "products of a smaller dimension run natively; calls too, unless "
                "MIN_ORDER is given (default 0)",
    "min_order": "factorizations, solves and decompositions of a smaller matrix order run "
                 "natively (default: MIN_SIZE)",
    "native_order": "eager: LU / Cholesky calls of a smaller order run natively (default 16)",
    "max_slices": "upper limit of slices=auto",
    "memory_limit": "working bytes of one emulated product, or none (engine default)",
    "complex_scheme": "4m | 4m-fused | 3m",
    "balance": "auto | true | false",
}


def _parser():
    ap = argparse.ArgumentParser(
        prog="python -m ozlinalg run", allow_abbrev=False,
        usage="python -m ozlinalg run [options] (script.py | -m module) [args ...]",
        description="Run a Python program with ozlinalg's routing installed before it "
                    "imports anything (numpy.linalg / scipy.linalg calls go to the emulation "
                    "where the strategy says so, in every thread).",
        epilog="Each option also reads the environment variable OZLINALG_<NAME> "
               "(e.g. OZLINALG_STRATEGY=eager, OZLINALG_SLICES=auto); a flag wins over "
               "the variable. Default strategy: performant (emulate only from the "
               "engine's measured crossover on).")
    from .._options import Options

    for f in dataclasses.fields(Options):
        flag = "--" + f.name.replace("_", "-")
        ap.add_argument(flag, dest=f.name, metavar=f.name.upper(), default=None,
                        help=f"{_HELP.get(f.name, 'see ozlinalg.Options')} "
                             f"(env {ENV_PREFIX}{f.name.upper()})")
    ap.add_argument("--profile", action="store_true",
                    help="print ozlinalg.profile()'s summary of the main thread to stderr "
                         "at exit (routing decisions, emulated GEMMs)")
    return ap


def _split(argv):
    """``(launcher options, target kind, target, program args)``: the launcher's
    own options end at the script name, at ``-m module`` or after ``--``."""
    ap = _parser()
    takes_value = {a for act in ap._actions if act.nargs is None and act.option_strings
                   for a in act.option_strings}
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            return argv[:i], "script", (argv[i + 1] if i + 1 < len(argv) else None), \
                argv[i + 2:]
        if tok == "-m":
            return argv[:i], "module", (argv[i + 1] if i + 1 < len(argv) else None), \
                argv[i + 2:]
        if tok.startswith("-m") and not tok.startswith("--"):
            return argv[:i], "module", tok[2:], argv[i + 1:]
        if tok.startswith("-"):
            i += 2 if (tok in takes_value and "=" not in tok) else 1
            continue
        return argv[:i], "script", tok, argv[i + 1:]
    return argv, None, None, []


def _fresh_main(**attrs):
    """A new, empty ``__main__`` module in ``sys.modules`` (as the interpreter
    gives a program); the launcher's own module keeps running from its frames."""
    mod = types.ModuleType("__main__")
    mod.__dict__.update(attrs)
    sys.modules["__main__"] = mod
    return mod


def _run_script(path, args):
    if os.path.isdir(path) or (os.path.isfile(path) and _is_zip(path)):
        sys.argv = [path, *args]
        sys.path[0] = path
        _fresh_main()
        runpy._run_module_as_main("__main__", alter_argv=False)  # as `python dir/`
        return
    try:
        with open(path, "rb") as fh:  # noqa: PTH123
            source = fh.read()
    except OSError as e:
        print(f"{sys.executable}: can't open file {os.path.abspath(path)!r}: "
              f"[Errno {e.errno}] {e.strerror}", file=sys.stderr)
        raise SystemExit(2) from None
    sys.argv = [path, *args]
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    path = os.path.abspath(path)  # __file__ and tracebacks: absolute, as since Python 3.9
    code = compile(source, path, "exec", dont_inherit=True)
    main = _fresh_main(__file__=path, __package__=None, __spec__=None, __cached__=None,
                       __loader__=importlib.machinery.SourceFileLoader("__main__", path))
    exec(code, main.__dict__)


def _is_zip(path):
    import zipfile

    return zipfile.is_zipfile(path)


def _run_module(name, args):
    sys.argv = [name, *args]  # argv[0] becomes the module's file, as with python -m
    _fresh_main()
    runpy._run_module_as_main(name, alter_argv=True)


def _launcher_frame(tb):
    # Only the launcher's own frames: `python -m module` shows runpy's too.
    return tb.tb_frame.f_globals.get("__name__") == __name__


def main(argv=None) -> int:
    """Entry point of ``python -m ozlinalg run``; returns the exit status."""
    argv = sys.argv[2:] if argv is None else list(argv)
    own, kind, target, args = _split(argv)
    ap = _parser()
    ns = ap.parse_args(own)
    if target is None:
        ap.error("give a script (script.py [args]) or a module (-m module [args])")
    try:
        # Variables first (one line on stderr, status 2: nothing to do with usage)
        opts = options_from_env()
        from .._tuning import tuning_mode
        from ..engines.select import check_environment

        check_environment()
        tuning_mode()  # OZLINALG_TUNING: else a bad value stops the program mid-run
    except ValueError as e:
        print(f"{ap.prog}: error: {_reason(e)}", file=sys.stderr)
        return 2
    try:
        for name in _fields():
            text = getattr(ns, name)
            if text is not None:
                try:
                    opts[name] = checked_option(name, text)
                except (ValueError, TypeError) as e:
                    raise ValueError(f"--{name.replace('_', '-')} {text!r}: "
                                     f"{_reason(e)}") from None
        import ozlinalg

        ozlinalg.install(**opts)
    except (ValueError, TypeError) as e:
        ap.error(str(e))

    prof_cm = None
    if ns.profile:
        import ozlinalg

        prof_cm = ozlinalg.profile()
        prof = prof_cm.__enter__()
    try:
        if kind == "module":
            _run_module(target, args)
        else:
            _run_script(target, args)
    except SystemExit:
        raise
    except KeyboardInterrupt:
        raise  # the interpreter's own handling (traceback, exit by SIGINT)
    except BaseException as err:
        # As the interpreter reports an uncaught exception: sys.excepthook with
        # the program's frames only, then status 1.
        tb = err.__traceback__
        while tb is not None and _launcher_frame(tb):
            tb = tb.tb_next
        sys.excepthook(type(err), err.with_traceback(tb), tb)
        return 1
    finally:
        if prof_cm is not None:
            prof_cm.__exit__(None, None, None)
            print("ozlinalg profile (main thread):\n" + prof.summary(), file=sys.stderr)
    return 0
