#!/usr/bin/env python3
"""Plot an MoE run's expert load over training from its metrics.jsonl (the "moe" record of each log step).

    python3 scripts/plot_moe_load.py RUN_DIR --out moe_load.png [--title T]

Three panels against the step: the tokens per expert (min / mean / max over the experts of every
MoE layer, the step's last micro-batch), the router entropy, and the aux (load-balance) and z losses.
Exits with an error when the run logged no MoE metrics (a dense model).
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

KEYS = ("load_min", "load_mean", "load_max", "router_entropy", "aux_loss", "z_loss")


def read_moe(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        sys.exit(f"plot_moe_load: {path} not found (is {run_dir} a run directory?)")
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"plot_moe_load: {path}:{n}: not JSON ({e})")
            m = r.get("moe")
            if isinstance(m, dict) and "step" in r and all(k in m for k in KEYS):
                rows.append((r["step"], m))
    if not rows:
        sys.exit(f"plot_moe_load: {path} has no MoE metrics (no \"moe\" record with {', '.join(KEYS)}): "
                 "is this a dense model's run? (MoE runs set model.moe.n_experts)")
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run")
    ap.add_argument("--out", required=True)
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    rows = read_moe(args.run)
    steps = [s for s, _ in rows]
    col = lambda k: [m[k] for _, m in rows]  # noqa: E731

    fig, (a0, a1, a2) = plt.subplots(3, 1, figsize=(7, 8), sharex=True)
    a0.fill_between(steps, col("load_min"), col("load_max"), alpha=0.25, label="min..max")
    a0.plot(steps, col("load_max"), lw=1, label="max")
    a0.plot(steps, col("load_mean"), lw=1.5, label="mean")
    a0.plot(steps, col("load_min"), lw=1, label="min")
    if any("dropped" in m for _, m in rows) and any(m.get("dropped", 0) for _, m in rows):
        a0.plot(steps, [m.get("dropped", 0) for _, m in rows], lw=1, ls="--", label="dropped")
    a0.set_ylabel("tokens per expert")
    a0.legend(fontsize=8)
    a0.grid(alpha=0.3)
    a1.plot(steps, col("router_entropy"), color="tab:purple")
    a1.set_ylabel("router entropy (nats)")
    a1.grid(alpha=0.3)
    a2.plot(steps, col("aux_loss"), label="aux loss", color="tab:red")
    a2.set_ylabel("aux loss")
    a2.grid(alpha=0.3)
    az = a2.twinx()
    az.plot(steps, col("z_loss"), label="z loss", color="tab:green")
    az.set_ylabel("z loss")
    lines = a2.get_lines() + az.get_lines()
    a2.legend(lines, [l.get_label() for l in lines], fontsize=8)
    a2.set_xlabel("step")
    fig.suptitle(args.title or f"MoE expert load: {os.path.basename(os.path.normpath(args.run))}")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"plot_moe_load: {len(rows)} log steps -> {args.out}")


if __name__ == "__main__":
    main()
