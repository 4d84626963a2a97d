"""Every option is checked where it is set, with a TypeError / ValueError naming it
and the value (ozlinalg/_options.py)."""
import dataclasses

import numpy as np
import pytest

import ozlinalg
from ozlinalg import _options
from ozlinalg.testing import ExactReference

#: (option, bad value, exception): at least one wrong type and one bad value each.
BAD = [
    ("method", "ozimmu-x", ValueError), ("method", 3, TypeError),
    ("slices", 0, ValueError), ("slices", 65, ValueError), ("slices", "many", ValueError),
    ("slices", 2.0, TypeError), ("slices", None, TypeError),
    ("min_size", -1, ValueError), ("min_size", 2.5, TypeError), ("min_size", "8", TypeError),
    ("min_size", True, TypeError),
    ("max_slices", 0, ValueError), ("max_slices", -3, ValueError),
    ("max_slices", 65, ValueError), ("max_slices", "x", TypeError),
    ("max_slices", None, TypeError), ("max_slices", 4.0, TypeError),
    ("max_slices", True, TypeError),
    ("memory_limit", 0, ValueError), ("memory_limit", -1, ValueError),
    ("memory_limit", 1.5, ValueError), ("memory_limit", "2GiB", ValueError),
    ("memory_limit", True, ValueError),
    ("complex_scheme", "5m", ValueError), ("complex_scheme", "4M", ValueError),
    ("complex_scheme", 4, ValueError), ("complex_scheme", None, ValueError),
    ("balance", "yes", ValueError), ("balance", 1, ValueError), ("balance", None, ValueError),
    ("strategy", "lazy", ValueError), ("strategy", None, ValueError),
    ("engine", "mkl", ValueError), ("engine", 3, ValueError),
    ("accuracy", "exact", ValueError), ("accuracy", None, ValueError),
]


def test_every_option_has_a_check():
    fields = {f.name for f in dataclasses.fields(ozlinalg.Options)}
    assert set(_options._CHECKS) == fields
    assert {name for name, _, _ in BAD} == fields


@pytest.mark.parametrize(("name", "value", "exc"), BAD)
def test_bad_values_are_rejected_where_they_are_set(name, value, exc):
    for setter in (ozlinalg.options, ozlinalg.backend):
        with pytest.raises(exc) as info:
            setter(**{name: value})
        msg = str(info.value)
        assert name in msg and repr(value) in msg, msg
    assert ozlinalg.get_options() == ozlinalg.Options()


def test_install_rejects_before_anything_changes():
    with pytest.raises(ValueError, match="max_slices"):
        ozlinalg.install(max_slices=0)
    with pytest.raises(ValueError, match="complex_scheme"):
        ozlinalg.install(complex_scheme="x")
    assert not ozlinalg.backend.active() and ozlinalg.backend.installed() == []


def test_good_values_become_canonical():
    with ozlinalg.options(max_slices=np.int64(5), memory_limit=np.int32(1 << 20),
                          min_size=np.int16(3), method="ozimmu_h", engine="SGEMM",
                          complex_scheme="3m") as o:
        assert (o.max_slices, o.memory_limit, o.min_size) == (5, 1 << 20, 3)
        assert all(type(v) is int for v in (o.max_slices, o.memory_limit, o.min_size))
        assert (o.method, o.engine, o.complex_scheme) == ("hybrid-ef", "sgemm", "3m")


@pytest.mark.parametrize("max_slices", [1, _options.MAX_SLICES_LIMIT])
@pytest.mark.parametrize("method", ["hybrid-ef", "crt"])
def test_max_slices_at_its_limits(rng, method, max_slices):
    # One slice (modulus) serves no entry of these operands: all run natively. The
    # largest limit is that of slices (crt: 32 moduli), and the count stays below it.
    a = rng.standard_normal((20, 30))
    with ozlinalg.options(method=method, max_slices=max_slices), ozlinalg.profile() as prof:
        c = ozlinalg.matmul(a, a.T)
    if max_slices == 1:
        assert prof.slices == [0] and prof.native_flops == 2 * 20 * 30 * 20
    else:
        assert prof.native_flops == 0 and 1 < prof.slices[0] <= (32 if method == "crt" else 64)
    # Either way within the FP64 dot-product bound gamma_n |a| |a^T| of the exact product
    n, u = a.shape[1], 2.0**-53
    err = np.abs(c - ExactReference(a, a.T).rounded())
    assert (err <= (n * u / (1 - n * u)) * (np.abs(a) @ np.abs(a.T)) + u * np.abs(c)).all()
