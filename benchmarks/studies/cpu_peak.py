"""The INT8 peak of this CPU, measured: core clock and AVX-512 VNNI throughput.

Two micro-benchmarks, compiled with the system C compiler (``cc``):

* the core clock: a chain of dependent integer adds (one per cycle on every
  x86-64 core) for 2e9 iterations; ``/proc/cpuinfo`` shows only the TSC rate;
* ``vpdpbusd`` on 512-bit registers (64 u8 x s8 multiply-adds = 128 INT8
  operations each) over 12 independent accumulators: instructions per cycle.

Peak = cores x clock x IPC x 128 INT8 ops. On AMX machines the tile units do
2048 INT8 ops per cycle per core instead (not measured here). Both loops time
the process's CPU time (``CLOCK_PROCESS_CPUTIME_ID``), so other processes on a
shared machine do not lower the figures. Usage::

    python benchmarks/studies/cpu_peak.py
"""
from __future__ import annotations

import os
import subprocess
import tempfile

CLOCK_C = r"""
#include <stdio.h>
#include <time.h>
int main(void) {
  struct timespec a, b; long n = 2000000000L, x = 0;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
  __asm__ volatile("1: addq $1, %0\n\t addq $1, %0\n\t addq $1, %0\n\t addq $1, %0\n\t"
                   "subq $4, %1\n\t jnz 1b" : "+r"(x), "+r"(n));
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
  printf("%f\n", 2e9 / ((b.tv_sec - a.tv_sec) + 1e-9 * (b.tv_nsec - a.tv_nsec)) / 1e9);
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
    ghz = max(run_c(CLOCK_C) for _ in range(3))
    gips = max(run_c(VNNI_C, ["-mavx512f", "-mavx512bw", "-mavx512vnni"]) for _ in range(2))
    ipc = gips / ghz
    peak = cores * ghz * ipc * 128 / 1e3
    print(f"core clock {ghz:.2f} GHz (dependent adds), vpdpbusd zmm {gips:.2f} G/s per core "
          f"= {ipc:.2f} per cycle -> {ipc * 128:.0f} INT8 ops/cycle/core")
    print(f"peak: {cores} cores x {ghz:.2f} GHz x {round(ipc) * 128} = "
          f"{cores * ghz * round(ipc) * 128 / 1e3:.2f} TOPS (measured IPC: {peak:.2f})")


if __name__ == "__main__":
    main()
