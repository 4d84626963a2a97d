"""Render a pytest-benchmark JSON file as a markdown comparison table.

Each benchmark group (one operation and size on one device) becomes a block
of rows: every implementation's best time, its ratio to the native baseline
of the same group (measured in the same run), effective GFLOPS and the error
recorded in ``extra_info``.

Usage::

    python -m pytest benchmarks --benchmark-only --benchmark-json=bench.json
    python benchmarks/suite/render_table.py bench.json > docs/bench-table.md
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict


def _is_native(b):
    info = b.get("extra_info", {})
    return info.get("method") == "native" or info.get("impl") == "native" or \
        "native" in b["name"]


def _fmt_err(info):
    for key in ("max_rel_err", "backward_error", "residual"):
        if key in info and info[key] is not None:
            return f"{info[key]:.2e} ({key.replace('_', ' ')})"
    return "-"


def render(data):
    groups = defaultdict(list)
    for b in data["benchmarks"]:
        groups[b.get("group") or b["name"]].append(b)
    m = data.get("machine_info", {})
    out = [f"Machine: {m.get('cpu', {}).get('brand_raw', m.get('processor', '?'))}, "
           f"python {m.get('python_version', '?')}; run {data.get('datetime', '?')}", "",
           "| group | implementation | slices | best [ms] | x native | GFLOP/s | error |",
           "|---|---|---|---|---|---|---|"]
    for group in sorted(groups):
        rows = groups[group]
        native = [b for b in rows if _is_native(b)]
        t_nat = native[0]["stats"]["min"] if native else None
        for b in sorted(rows, key=lambda b: (not _is_native(b), b["stats"]["min"])):
            info = b.get("extra_info", {})
            t = b["stats"]["min"]
            ratio = f"{t / t_nat:.1f}" if t_nat else "-"
            impl = info.get("method") or info.get("impl") or b["name"]
            gf = info.get("gflops")
            out.append(f"| {group} | {impl} | {info.get('slices') or '-'} | {1e3 * t:.2f} | "
                       f"{ratio} | {gf:.1f} | {_fmt_err(info)} |" if gf is not None else
                       f"| {group} | {impl} | {info.get('slices') or '-'} | {1e3 * t:.2f} | "
                       f"{ratio} | - | {_fmt_err(info)} |")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json_file")
    args = ap.parse_args(argv)
    with open(args.json_file) as f:
        print(render(json.load(f)), end="")


if __name__ == "__main__":
    main()
