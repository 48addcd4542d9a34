#!/usr/bin/env python3
"""Convergence histogram: how long a change written to the API server takes to reach a client.

Question: with 10,000 Services × 10 endpoints, how are the event-to-live times of single
changes distributed, on a quiet pipeline and under a storm of 1,000 changes a second, and how
do two builds (or two sets of flags) compare?

Input: one or more JSON files written by the figure test of `tests/e2e_convergence.rs`:

    cargo build --release
    SWITCHYARD_TEST_BIN=target/release/switchyard SWITCHYARD_FIGURE_JSON=/tmp/new.json \\
        cargo test --release --test e2e_convergence -- --ignored --nocapture figures_10k_services

Then `python3 benches/convergence_chart.py --out docs/charts/convergence.png new.json[=label] ...`
draws, per phase (quiet, storm), one histogram per file on a logarithmic time axis, with the
median and p99 in the legend and the 30 ms (quiet) and 1 s (storm) targets of issue #14 marked.
Needs matplotlib (`pip install matplotlib`); without it, one line and exit 1.
"""

import argparse
import json
import math
import sys


def percentile(xs, q):
    """The nearest-rank percentile, as tests/e2e_convergence.rs prints it."""
    xs = sorted(xs)
    return xs[min(max(math.ceil(q * len(xs)), 1), len(xs)) - 1] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", metavar="FILE[=LABEL]",
                    help="JSON written with SWITCHYARD_FIGURE_JSON; the label defaults to the file name")
    ap.add_argument("--out", required=True, help="the PNG to write")
    ap.add_argument("--title", default="", help="a line above the charts (machine, load, date)")
    args = ap.parse_args()
    runs = []
    for arg in args.files:
        path, _, label = arg.partition("=")
        with open(path) as f:
            runs.append((label or path, json.load(f)))
    empty = [label for label, r in runs for key in ("quiet_ms", "storm_ms") if not r.get(key)]
    if empty:
        sys.exit(f"convergence_chart: no samples of a phase in {empty}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("convergence_chart: matplotlib is not installed (pip install matplotlib)")

    phases = (("quiet_ms", "quiet pipeline: single changes", 30.0),
              ("storm_ms", "during a storm of 1,000 changes/s", 1000.0))
    every = [x for _, r in runs for key, _, _ in phases for x in r[key]]
    lo = max(min(every), 0.5)
    hi = max(every)
    bins = [lo * (hi / lo) ** (i / 40) for i in range(41)] if hi > lo else 10
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2))
    for ax, (key, title, target) in zip(axes, phases):
        for label, r in runs:
            xs = r[key]
            ax.hist(xs, bins=bins, alpha=0.55,
                    label=f"{label}: median {percentile(xs, 0.5):.1f} ms, p99 {percentile(xs, 0.99):.1f} ms "
                          f"({len(xs)} changes)")
        ax.axvline(target, color="#d62728", linestyle="--", linewidth=1)
        ax.text(target, ax.get_ylim()[1] * 0.6, f" target p99 ≤ {target:g} ms", color="#d62728",
                fontsize=8, va="top")
        ax.set_xscale("log")
        ax.set_xlabel("write to the API server → first answer from the new backend (ms, log scale)")
        ax.set_ylabel("changes")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(alpha=0.3)
    services = runs[0][1].get("services", "?")
    head = f"event-to-live, {services} Services × 10 endpoints, fake API server over real HTTP"
    fig.suptitle(head + ("\n" + args.title if args.title else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
