"""The structure detection and the symmetric mirror of ``solve`` / ``inv``, and the
factorizations' ``keep_triangle``, at small orders (cached masks) against the
``np.tril`` / ``np.triu`` forms they replace: the same verdicts and the same bits."""
from __future__ import annotations

import numpy as np
import pytest

from ozlinalg.lapack import _common
from ozlinalg.linalg import _basic


def _matrices(rng, n, dtype):
    a = rng.standard_normal((n, n))
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal((n, n))
    a = a.astype(dtype)
    out = [a, np.tril(a), np.triu(a), a + a.T, np.diag(np.diag(a)), np.triu(np.tril(a, 1), -1),
           np.triu(np.tril(a, 2), -2), np.zeros_like(a), -np.zeros_like(a)]
    if n:
        nan = a.copy()
        nan[n - 1, 0] = np.nan
        neg = np.triu(a)
        neg[0, n - 1] = -0.0
        out += [nan, neg]
    if np.dtype(dtype).kind == "c":
        out.append(a + a.conj().T)
    return out


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
def test_same_verdicts_and_bits_as_the_triangles(monkeypatch, dtype):
    rng = np.random.default_rng(12)
    for n in list(range(0, 12)) + [31, 64, 65]:
        for a in _matrices(rng, n, dtype):
            got = [_basic._detect(a), _basic._detect(a, tridiagonal=False)]
            full = [_basic._full_from_triangle(np, a, low, True) for low in (True, False)]
            with monkeypatch.context() as mp:
                mp.setattr(_basic, "MASKED_UP_TO", -1)  # the np.tril / np.triu forms
                mp.setattr(_common, "MASKED_UP_TO", -1)
                want = [_basic._detect(a), _basic._detect(a, tridiagonal=False)]
                ref = [_basic._full_from_triangle(np, a, low, True) for low in (True, False)]
            assert got == want, (n, dtype)
            for x, y in zip(full, ref):
                assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), (n, dtype)
            for lower in (True, False):
                got_c, ref_c = a.copy(), a.copy()
                _common.keep_triangle(np, got_c, lower)
                with monkeypatch.context() as mp:
                    mp.setattr(_common, "MASKED_UP_TO", -1)
                    _common.keep_triangle(np, ref_c, lower)
                assert got_c.tobytes() == ref_c.tobytes(), (n, dtype, lower)


def test_masks_are_read_only():
    for m in _common.band_masks(5):
        assert not m.flags.writeable
