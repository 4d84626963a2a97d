"""Ozaki scheme II: FP64 products from one exact INT8 GEMM per modulus (CRT).

Ozaki, Uchino & Imamura (2025), GEMMul8 (arXiv 2504.08009). For ``C = A B``
(A is m x k, B is k x p) with pairwise coprime moduli ``p_1 .. p_N <= 256``
and ``P = p_1 ... p_N``:

1. **Normalize** rows of A and columns of B by powers of two (max in
   [0.5, 1)), as the Ozaki-I driver does; X, Y are the normalized A and B^T.
2. **Scale** row i of X by ``2**mu_i`` and row j of Y by ``2**nu_j`` and round
   to integers ``A' = rint(2**mu X)``, ``B' = rint(2**nu Y)`` (``trunc`` for
   rows whose shift is too small for the rounding margin) so that
   ``sum_k |A'_ik| |B'_jk| < P / 2`` for every (i, j): then ``C' = A' B'^T``
   is determined by its residues modulo P.

   * ``scaling="fast"``: Cauchy-Schwarz, ``|A'_i . B'_j| <= ||A'_i|| ||B'_j||``:
     ``mu_i = floor(H - log2 ||X_i||)`` with ``H = (log2(P / 2) - margin) / 2``,
     the same for ``nu_j``. No extra GEMM.
   * ``scaling="accurate"``: one extra exact INT8 GEMM of upper bounds
     ``W = ceil(128 |X|) ceil(128 |Y|)^T >= 2**14 |X| |Y|^T`` (stored as the
     negative values in [-128, 0], which INT8 holds, and whose products are the
     same). With ``L_ij = log2(P / 2) + 14 - log2 W_ij - margin``:
     ``mu_i = floor(min_j L_ij / 2)``, then ``nu_j = floor(min_i (L_ij - mu_i))``
     (>= ``floor(min_i L_ij / 2)``, so never worse than the symmetric split).
     The bound follows the magnitudes of the actual products instead of
     ``sqrt(k) * max``, which pays off when exponents spread (phi >= 2).

   ``margin = 0.05`` bits covers round-to-nearest (``|A'| <= 2**mu |X| + 1/2``),
   hence rows with ``mu_i >= 12`` (accurate) or ``mu_i >= 6 + log2(k) / 2``
   (fast) are rounded to nearest, the others truncated; it also keeps ``C'``
   at least ``0.017 P`` away from ``+-P/2``, which the reconstruction needs.
3. **Residues.** For each modulus the symmetric residues of A' and B' (in
   [-128, 127]) are computed exactly in FP64: A' (up to ~2**180) is cut into
   integer digits of D <= 44 bits, ``A' mod p = sum_t digit_t (2**(D t) mod p)``
   reduced twice with ``x - p floor(x / p)`` (every intermediate an integer
   of at most 2**52).
4. **One exact INT8 GEMM per modulus** through the engine
   (``engine.int_matmul_sum(ra, rb, [(t, t)], 128, 128)``), reduced mod p_t to
   ``c_t`` with ``|c_t| <= 128``.
5. **CRT in FP64 limbs.** With ``w_t = (P / p_t) * ((P / p_t)^-1 mod p_t)``
   the sum ``S = sum_t w_t c_t`` is congruent to C' mod P, and
   ``C' = S - P * rint(S / P)``. ``rint(S / P) = rint(sum_t (w_t / P) c_t)`` is
   one FP64 accumulation (error < 2**-38, far from the 0.017 margin), and S
   is accumulated EXACTLY as integers in 40-bit limbs
   (``|limb_tl * c_t| <= 2**47``, N <= 32 terms: below 2**53), then ``q P`` is
   subtracted limb-wise, carries are propagated to balanced digits and the
   limbs are combined top-down: C' to a few ulps, exactly 0 when C' = 0. This
   is GEMMul8's sum of double-double weights, made exact. Cost: ``1 + L``
   axpy passes per modulus (L = ceil(log2 P / 40): 3 for N <= 15, 4 for N <= 20).
6. **Unscale** by ``2**(e_i - mu_i)`` and ``2**(f_j - nu_j)`` (exact, or one
   rounding near the ends of the FP64 range), as the Ozaki-I driver does.

Everything is written against the array namespace ``xp`` (NumPy or CuPy) and
the engine interface of :mod:`ozlinalg.engines.base`; the inner dimension is
cut into blocks of at most ``CRT_INNER_BLOCK`` (``k 128**2 < 2**31``).


Modules: :mod:`.moduli` (the moduli, the CRT constants, residues, the calibrated
count rule), :mod:`.shifts` (scalings and the bound products' operands),
:mod:`.count` (``moduli="auto"``'s decision, the fixed count's check),
:mod:`.reconstruct` (the exact CRT rebuild), :mod:`.block` (one inner block, phase
by phase), :mod:`.certify` (the faithful certificate) and :mod:`.product` (the
driver, :func:`crt_matmul_2d`).

Choosing the moduli count (``moduli="auto"``)
---------------------------------------------
The error of C'_ij comes from rounding A and B to integers:
``|dC'_ij| ~ (||B'_j|| + ||A'_i||) / sqrt(12)`` for random signs, i.e. in
normalized units ``2**-mu_i ||Y_j|| + 2**-nu_j ||X_i||``. Native DGEMM's error
in the same entry scales with ``u sqrt(sum_k (x_ik y_jk)**2)``. With
``Q = (X**2)(Y**2)^T`` (one float32 GEMM of the squared operands, as Ozaki-I's
``auto`` uses) the predicted ratio is

    E_ij = (2**-mu_i ||Y_j|| + 2**-nu_j ||X_i||) / sqrt(Q_ij)

and each extra bit of log2 P adds half a bit to mu and nu. The scaling is
computed once for a reference count (``P_ref``: 20 moduli, whatever the cap
``max_moduli``), ``rho = max_ij log2 E_ij`` is taken over the entries with
``Q_ij > 0`` (underflow-safe, :func:`ozlinalg.ozaki.counts.slices.squared_products`;
``rho = inf`` beyond float64's range), and the count chosen is the smallest N
with

    log2 P_N >= log2 P_ref + 2 (0.7 (rho + 53) + c_scaling + 0.25 max(0, rho + 60))

``c_fast = -9.0``, ``c_accurate = -8.75`` bits. The slope 0.7 < 1 (as in
Ozaki-I's ``auto``, 0.85 there): the entry with the worst predicted ratio is
rarely the one whose cancellation decides the max relative error; the knee term
adds slope for wide exponent ranges. The constants are measured, not proven
(how, and by which benchmark: docs/calibration.md); the deterministic part is
the bound ``sum |A'||B'| < P/2`` (the result is the exact CRT value of the
rounded operands).
Entries whose predicted spread no count up to ``max_moduli`` serves (or
whose magnitude even float64 loses) are computed in native FP64, and the
count is chosen for the rest (:func:`rho_capacity`); :func:`choose_moduli`
alone clips at ``max_moduli`` with an :class:`~ozlinalg.AccuracyWarning`.
Cost of ``auto``: with ``scaling="accurate"``, usually none beyond the bound GEMM W
the scaling needs anyway: W bounds every ``q_ij`` from below (Cauchy-Schwarz on
``|X||Y|^T``), and when that bound and a float64 evaluation of the 16 entries with the
smallest bound fall between the same two thresholds, the count is decided
(:func:`.count._bound_decision`; dense operands with a narrow exponent range, phi <= 0.5).
Otherwise, and with ``scaling="fast"``, one estimate GEMM of the squares (BF16 on
the oneDNN engine and tensor cores, float32 elsewhere). Both routes reach the
same count: the decision is a function of the exact ``q`` (:mod:`ozlinalg.ozaki.counts.estimate`).
"""
from __future__ import annotations

from ..counts.moduli import crt_thresholds
from .moduli import (
    AUTO_HIGH_SLOPE,
    AUTO_OFFSET_BITS,
    AUTO_REF_MODULI,
    AUTO_RHO_KNEE,
    AUTO_RHO_SLOPE,
    CRT_INNER_BLOCK,
    LIMB_BITS,
    MARGIN_BITS,
    MAX_MODULI,
    MODULI,
    MODULI_RULE,
    CRTConstants,
    choose_moduli,
    crt_constants,
    residues_into,
    rho_capacity,
    symmetric_mod,
)
from .product import crt_matmul_2d
from .reconstruct import CRTAccumulator, crt_reconstruct

__all__ = [
    "LIMB_BITS",
    "MODULI",
    "MAX_MODULI",
    "rho_capacity",
    "CRT_INNER_BLOCK",
    "AUTO_HIGH_SLOPE",
    "AUTO_OFFSET_BITS",
    "AUTO_REF_MODULI",
    "AUTO_RHO_KNEE",
    "AUTO_RHO_SLOPE",
    "CRTConstants",
    "MARGIN_BITS",
    "MODULI_RULE",
    "crt_constants",
    "crt_matmul_2d",
    "crt_thresholds",
    "choose_moduli",
    "symmetric_mod",
    "residues_into",
    "crt_reconstruct",
    "CRTAccumulator",
]

