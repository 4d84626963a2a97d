"""The INT8 peak of this CPU, measured: core clock, AVX-512 VNNI, AMX and AVX2 throughput.

Micro-benchmarks compiled with the system C compiler (``cc``), each run only where
``/proc/cpuinfo`` lists the instructions it needs:

* the core clock: a chain of dependent 64-bit ``imul`` (latency 3 cycles on every
  x86-64 core since Nehalem and Zen; ``/proc/cpuinfo`` shows only the TSC rate).
  A chain of dependent adds is no clock: recent Intel cores (Golden Cove and
  later) retire about four ``addq $1`` of one chain per cycle, which read as a
  14.65 GHz clock on a Xeon;
* ``vpdpbusd`` on 512-bit registers (64 u8 x s8 multiply-adds = 128 INT8
  operations each) over 12 independent accumulators: instructions per cycle;
* AMX (``amx_int8``): ``tdpbssd`` on full 16 x 64 tiles (16 x 16 x 64 = 16384
  multiply-adds = 32768 INT8 operations each) into four independent accumulator
  tiles: tile products per second and per cycle (the tile peak: 2048 ops per
  cycle per core where one ``tdpbssd`` issues every 16 cycles);
* AVX2 (the AVX2 engine's GEMM, ``ozlinalg/engines/_csrc/k_gemm16.c``): ``vpmaddwd``
  on 256-bit registers with its ``vpaddd`` (16 int16 products = 32 INT8-range
  operations each), ``vfmadd231ps`` (SGEMM's 8 multiply-adds), and the two
  interleaved one to one: where they share the multiply pipes the mix runs no more
  multiply-adds per cycle than either alone.

Peak = cores x clock x ops per cycle per core. The loops time the process's CPU
time (``CLOCK_PROCESS_CPUTIME_ID``) on one thread, so other processes on a shared
machine do not lower the figures; the multi-core peak assumes every core sustains
the single-core rate. Usage::

    python benchmarks/studies/cpu_peak.py
"""
from __future__ import annotations

import os
import subprocess
import tempfile

#: Latency of a 64-bit register ``imul`` in cycles (Intel since Nehalem, AMD since Zen).
IMUL_LATENCY = 3

CLOCK_C = r"""
#include <stdio.h>
#include <time.h>
int main(void) {
  struct timespec a, b; long n = 400000000L, x = 7, y = 3;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
  __asm__ volatile("1: imulq %2, %0\n\t imulq %2, %0\n\t imulq %2, %0\n\t imulq %2, %0\n\t"
                   "subq $4, %1\n\t jnz 1b" : "+r"(x), "+r"(n) : "r"(y));
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
  printf("%f %ld\n", 4e8 / ((b.tv_sec - a.tv_sec) + 1e-9 * (b.tv_nsec - a.tv_nsec)) / 1e9,
         x & 1);
  return 0;
}
"""

VNNI_C = r"""
#include <immintrin.h>
#include <stdio.h>
#include <time.h>
int main(void) {
  struct timespec a, b; long iters = 200000000L;
  __m512i acc[12];
  for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_epi32(i);
  __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(5);
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
  for (long i = 0; i < iters; i++) {
#pragma GCC unroll 12
    for (int j = 0; j < 12; j++) acc[j] = _mm512_dpbusd_epi32(acc[j], x, y);
    __asm__ volatile("" : "+v"(x));
  }
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
  int s = 0;
  for (int i = 0; i < 12; i++) s += _mm512_reduce_add_epi32(acc[i]);
  printf("%f %d\n", 12.0 * iters / ((b.tv_sec - a.tv_sec) + 1e-9 * (b.tv_nsec - a.tv_nsec)) / 1e9,
         s & 1);
  return 0;
}
"""


AMX_C = r"""
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
typedef struct { uint8_t palette, start; uint8_t pad[14]; uint16_t colsb[16];
                 uint8_t rows[16]; } tilecfg;
int main(void) {
  if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) {
    printf("nan 0\n"); return 0;  /* the kernel refuses AMX state to this process */
  }
  tilecfg cfg; memset(&cfg, 0, sizeof cfg); cfg.palette = 1;
  for (int t = 0; t < 8; t++) { cfg.rows[t] = 16; cfg.colsb[t] = 64; }
  _tile_loadconfig(&cfg);
  static int8_t buf[16 * 64]; for (int i = 0; i < 16 * 64; i++) buf[i] = (int8_t)(i % 7 - 3);
  static int32_t out[16 * 16];
  _tile_loadd(4, buf, 64); _tile_loadd(5, buf, 64); _tile_loadd(6, buf, 64);
  _tile_loadd(7, buf, 64);
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
  struct timespec a, b; long iters = 20000000L;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
  for (long i = 0; i < iters; i++) {
    _tile_dpbssd(0, 4, 6); _tile_dpbssd(1, 4, 7); _tile_dpbssd(2, 5, 6); _tile_dpbssd(3, 5, 7);
  }
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
  _tile_stored(0, out, 64); _tile_release();
  printf("%f %d\n", 4.0 * iters / ((b.tv_sec - a.tv_sec) + 1e-9 * (b.tv_nsec - a.tv_nsec)) / 1e9,
         out[0] & 1);
  return 0;
}
"""

#: Eight independent accumulators in assembly (no compiler can hoist or fuse them):
#: BODY is one loop iteration of eight steps, ymm0 / ymm1 the constant operands.
AVX2_C = r"""
#include <stdio.h>
#include <time.h>
int main(void) {
  struct timespec a, b; long iters = 100000000L, n = iters;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
  __asm__ volatile("vpxor %%ymm0, %%ymm0, %%ymm0\n\t vpxor %%ymm1, %%ymm1, %%ymm1\n\t"
                   "1:\n\t" BODY "dec %0\n\t jnz 1b" : "+r"(n) :
                   : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
                     "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
  printf("%f 0\n", STEPS * iters / ((b.tv_sec - a.tv_sec) + 1e-9 * (b.tv_nsec - a.tv_nsec)) / 1e9);
  return 0;
}
"""
# vpmaddwd into a temporary (ymm14 / ymm15 in turn), vpaddd into one of eight accumulators
# (the GEMM's step); vfmadd231ps into twelve (its latency of up to 5 cycles hidden at two
# a cycle); the mix: six of each per iteration.
def _madd(i, acc):
    t = 14 + i % 2
    return (f"vpmaddwd %%ymm0, %%ymm1, %%ymm{t}\\n\\t "
            f"vpaddd %%ymm{t}, %%ymm{acc}, %%ymm{acc}\\n\\t")


def _fma(acc):
    return f"vfmadd231ps %%ymm0, %%ymm1, %%ymm{acc}\\n\\t"


MADD = "".join(_madd(i, 2 + i) for i in range(8))
FMA = "".join(_fma(2 + i) for i in range(12))
MIX = "".join(_madd(i, 2 + i) + _fma(8 + i) for i in range(6))

#: INT8 operations of one instruction: vpdpbusd on zmm, tdpbssd on full tiles,
#: vpmaddwd on ymm (16 products and their pairwise sums).
OPS_VNNI = 128
OPS_TILE = 2 * 16 * 16 * 64
OPS_MADD = 32


def cpu_flags():
    """The instruction-set flags of ``/proc/cpuinfo`` (empty where it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def run_c(src, flags=()):
    with tempfile.TemporaryDirectory() as d:
        c, exe = os.path.join(d, "m.c"), os.path.join(d, "m")
        with open(c, "w") as fh:
            fh.write(src)
        subprocess.run(["cc", "-O2", *flags, c, "-o", exe], check=True, capture_output=True)
        return float(subprocess.run([exe], check=True, capture_output=True,
                                    text=True).stdout.split()[0])


def main():
    cores = os.cpu_count()
    flags = cpu_flags()
    ghz = IMUL_LATENCY * max(run_c(CLOCK_C) for _ in range(3))
    print(f"core clock {ghz:.2f} GHz (a chain of dependent imul, {IMUL_LATENCY} cycles each)")
    if {"avx512_vnni", "avx512bw"} <= flags:
        gips = max(run_c(VNNI_C, ["-mavx512f", "-mavx512bw", "-mavx512vnni"])
                   for _ in range(2))
        ipc = gips / ghz
        print(f"vpdpbusd zmm {gips:.2f} G/s per core = {ipc:.2f} per cycle -> "
              f"{ipc * OPS_VNNI:.0f} INT8 ops/cycle/core; peak {cores} cores x {ghz:.2f} GHz x "
              f"{ipc * OPS_VNNI:.0f} = {cores * gips * OPS_VNNI / 1e3:.2f} TOPS")
    else:
        print("vpdpbusd zmm: not measured (no avx512_vnni / avx512bw in /proc/cpuinfo)")
    if {"amx_tile", "amx_int8"} <= flags:
        gtps = max(run_c(AMX_C, ["-mamx-tile", "-mamx-int8"]) for _ in range(2))
        if gtps != gtps:
            print("tdpbssd: not measured (the kernel refused AMX tile state, arch_prctl)")
        else:
            per_cycle = gtps / ghz * OPS_TILE
            print(f"tdpbssd {gtps:.3f} G tiles/s per core = {per_cycle:.0f} INT8 ops/cycle/core; "
                  f"tile peak {cores} cores = {cores * gtps * OPS_TILE / 1e3:.2f} TOPS")
    else:
        print("tdpbssd (AMX): not measured (no amx_tile / amx_int8 in /proc/cpuinfo)")
    if {"avx2", "fma"} <= flags:
        rate = {}
        for name, body, steps in (("madd", MADD, 8), ("fma", FMA, 12), ("mix", MIX, 6)):
            src = AVX2_C.replace("BODY", f'"{body}"').replace("STEPS", f"{steps}.0")
            rate[name] = max(run_c(src) for _ in range(2))
        madd, fma, mix = rate["madd"], rate["fma"], rate["mix"]
        print(f"vpmaddwd ymm (+ vpaddd) {madd:.2f} G/s per core = {madd / ghz:.2f} per cycle "
              f"-> {madd / ghz * OPS_MADD:.0f} INT8 ops/cycle/core ({madd * 16:.1f} G "
              f"multiply-adds/s); vfmadd231ps ymm {fma:.2f} G/s = {fma / ghz:.2f} per cycle "
              f"({fma * 8:.1f} G multiply-adds/s); both 1:1 {mix:.2f} G pairs/s "
              f"({mix * 24:.1f} G multiply-adds/s: more than either alone only where "
              f"they issue on separate pipes); AVX2 INT8 peak {cores} cores = "
              f"{cores * madd * OPS_MADD / 1e3:.2f} TOPS")
    else:
        print("vpmaddwd ymm: not measured (no avx2 / fma in /proc/cpuinfo)")


if __name__ == "__main__":
    main()
