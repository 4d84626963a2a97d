"""Reading ``OZLINALG_*`` environment variables: one rule for the whole library.

A variable that is unset or empty (only blanks) means its default. A value
that is set but not valid raises :class:`ValueError` naming the variable and
the value where the library reads it: never a warning, never a silent
default, and never a quiet change of engine (an invalid variable read while an
engine is created stops that creation instead of making ``"auto"`` fall back
to the SGEMM engine). ``python -m ozlinalg run`` checks every variable before
the program starts and exits with status 2 on the first bad one.
"""
from __future__ import annotations

import math
import os

__all__ = ["env_text", "env_flag", "env_bytes", "invalid"]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def invalid(name: str, text: str, expected: str) -> ValueError:
    """The error for variable `name` holding `text` where `expected` was wanted."""
    return ValueError(f"ozlinalg: environment variable {name}={text!r} is not valid: "
                      f"expected {expected}")


def env_text(name: str, environ=None) -> str | None:
    """The stripped value of `name`, or None when it is unset or blank."""
    text = (os.environ if environ is None else environ).get(name)
    if text is None or not text.strip():
        return None
    return text.strip()


def env_flag(name: str, default: bool, environ=None) -> bool:
    """A boolean variable: 1/true/yes/on or 0/false/no/off (any case)."""
    text = env_text(name, environ)
    if text is None:
        return default
    low = text.lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise invalid(name, text, "one of " + ", ".join(_TRUE + _FALSE))


def env_bytes(name: str, environ=None) -> int | None:
    """A byte count (``"268435456"``, ``"2.5e8"``): a finite, non-negative whole
    number; None when unset."""
    text = env_text(name, environ)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        try:
            value = float(text)
        except ValueError:
            raise invalid(name, text, "a number of bytes") from None
        if not math.isfinite(value) or value != math.floor(value):
            raise invalid(name, text, "a finite whole number of bytes") from None
        value = int(value)
    if value < 0:
        raise invalid(name, text, "a number of bytes >= 0")
    return value
