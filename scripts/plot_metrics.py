#!/usr/bin/env python3
"""Plot train/val loss curves from one or more run directories (their metrics.jsonl).

    python3 scripts/plot_metrics.py RUN_DIR [RUN_DIR...] --out loss.png [--title T] [--hline 1.88:label]
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_metrics(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        sys.exit(f"plot_metrics: {path} not found (is {run_dir} a run directory?)")
    train, val = [], []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if "train_loss" in r:
                train.append((r["step"], r["train_loss"]))
            if "val_loss" in r:
                val.append((r["step"], r["val_loss"]))
    return train, val


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="")
    ap.add_argument("--hline", action="append", default=[], help="VALUE:LABEL reference line")
    args = ap.parse_args()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for run in args.runs:
        name = os.path.basename(os.path.normpath(run))
        train, val = read_metrics(run)
        if train:
            ax.plot(*zip(*train), lw=1, alpha=0.6, label=f"{name} train")
        if val:
            ax.plot(*zip(*val), "o-", ms=3, label=f"{name} val")
    for h in args.hline:
        value, _, label = h.partition(":")
        ax.axhline(float(value), ls="--", c="gray", lw=1)
        ax.text(ax.get_xlim()[1], float(value), f" {label}", va="bottom", ha="right", fontsize=8)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(args.title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"plot_metrics: wrote {args.out}")


if __name__ == "__main__":
    main()
