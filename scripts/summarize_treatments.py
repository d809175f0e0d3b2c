#!/usr/bin/env python3
"""Summarise a treatments sweep: runs/<name>/<treatment>/ -> results/<name>/.

Writes summary.csv and summary.md (final val loss, delta to bf16-mw, static bytes per quantized
parameter, the whole model's static MiB, tokens/s, diverged), loss_curves.png (val loss of every
treatment), memory_vs_loss.png (the paper's Figure 1: static memory per quantized parameter vs
final val loss), memory_vs_loss_model.png (the same against the whole model's static bytes:
weights, codes, scales, masters and optimizer state, as the ledger and `eco-train --plan` count
them; where only some parameters are quantized, e.g. an MoE's experts, this is what a user saves)
and gap_to_bf16.png (val loss minus bf16-mw's at the same step, over training).

    python3 scripts/summarize_treatments.py runs/NAME --out results/NAME [--paper 30m|100m|800m]
                                            [--vs TREATMENT]

Only folders named after a treatment are read (a sweep's folder may hold others, e.g. the
pretraining run of a fine-tune). Runs started from a Hugging Face checkpoint (model.init_from)
add the imported weights' val loss (summary.json initial_val_loss, metrics.jsonl step 0) and the
change from it. --vs adds a column of gaps to that treatment's final val loss (e.g. int4-mw-rtn).

--paper adds the ECO paper's final C4 validation losses of that size (its Table 1, PAPER below;
docs/eco.md) and their gaps to bf16-mw beside ours: a reproduction at another scale
or on another corpus compares gaps, not losses.
"""
import argparse
import csv
import json
import math
import os
import shutil

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ORDER = ["fp32", "bf16-mw", "fp8-mw-rtn", "fp8-mw-sr", "fp8-naive-rtn", "fp8-naive-sr",
         "fp8-eco-rtn", "fp8-eco-sr", "int4-mw-rtn", "int4-mw-sr", "int4-naive-rtn",
         "int4-naive-sr", "int4-eco-rtn", "int4-eco-sr"]


def load(run_dir):
    s = json.load(open(os.path.join(run_dir, "summary.json")))
    val, train = [], []
    for line in open(os.path.join(run_dir, "metrics.jsonl")):
        r = json.loads(line)
        if "val_loss" in r:
            val.append((r["step"], r["val_loss"]))
        if "train_loss" in r:
            train.append((r["step"], r["train_loss"]))
    return s, val, train


# The paper's Table 1: final C4 validation loss of the Llama-style models at 100 tokens/param.
PAPER = {
    "30m": {"bf16-mw": 3.3238, "fp8-mw-rtn": 3.3248, "fp8-naive-sr": 3.4008, "fp8-eco-rtn": 3.3640,
            "fp8-eco-sr": 3.3317},
    "100m": {"bf16-mw": 2.9811, "fp8-mw-rtn": 2.9846, "fp8-naive-sr": 3.1006, "fp8-eco-rtn": 3.0025,
             "fp8-eco-sr": 2.9888},
    "800m": {"bf16-mw": 2.5306, "fp8-mw-rtn": 2.5343, "fp8-naive-sr": 2.9471, "fp8-eco-rtn": 2.6046,
             "fp8-eco-sr": 2.5399},
}

COLORS = [plt.get_cmap("tab10")(i) for i in range(10)] + ["black", "gold", "navy", "magenta"]


def color_of(t):
    """The same colour for a treatment in every plot: its place in ORDER (distinct for all 14)."""
    return COLORS[(ORDER.index(t) if t in ORDER else len(ORDER)) % len(COLORS)]


def memory_vs_loss(rows, key, xlabel, title, path):
    """Final val loss against a memory figure, one labelled point per treatment."""
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for r in rows:
        if r["final_val_loss"] is None or r[key] is None:
            continue
        ax.scatter(r[key], r["final_val_loss"], s=25, color=color_of(r["treatment"]))
        ax.annotate(r["treatment"], (r[key], r["final_val_loss"]), fontsize=7, xytext=(3, 3),
                    textcoords="offset points")
    ax.set_xlabel(xlabel, fontsize=8); ax.set_ylabel("final val loss")
    ax.set_title(title); ax.grid(alpha=0.3)
    fig.tight_layout(); fig.savefig(path, dpi=120); plt.close(fig)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs")
    ap.add_argument("--out", required=True)
    ap.add_argument("--paper", choices=sorted(PAPER), help="the paper's Table 1 size to set beside")
    ap.add_argument("--vs", choices=ORDER, help="a second baseline: a column of gaps to its final val loss")
    args = ap.parse_args()
    paper = PAPER.get(args.paper, {})
    os.makedirs(args.out, exist_ok=True)
    found = [t for t in os.listdir(args.runs)
             if t in ORDER and os.path.exists(os.path.join(args.runs, t, "summary.json"))]
    found.sort(key=lambda t: (ORDER.index(t) if t in ORDER else 99, t))
    if not found:
        raise SystemExit(f"summarize_treatments: no finished run (summary.json) under {args.runs}")
    data = {t: load(os.path.join(args.runs, t)) for t in found}
    base = data.get("bf16-mw")
    base_loss = base[0].get("final_val_loss") if base else None
    base_val = dict(base[1]) if base else {}
    vs = data.get(args.vs) if args.vs else None
    vs_loss = vs[0].get("final_val_loss") if vs else None
    imported = any("initial_val_loss" in data[t][0] for t in found)

    rows = []
    for t in found:
        s, val, _ = data[t]
        loss = s.get("final_val_loss")
        mem = s.get("memory", {})
        start = s.get("initial_val_loss")
        row = {"treatment": t}
        if imported:
            row["initial_val_loss"] = start
        row["final_val_loss"] = loss
        if imported:
            row["change_from_initial"] = (loss - start) if (loss is not None and start is not None) else None
        row["delta_vs_bf16_mw"] = (loss - base_loss) if (loss is not None and base_loss is not None) else None
        if args.vs:
            row["delta_vs_" + args.vs] = (loss - vs_loss) if (loss is not None and vs_loss is not None) else None
        rows.append(row | {
            "static_bytes_per_quantized_param": mem.get("static_bytes_per_quantized_param"),
            "static_mib": mem["static"] / 2**20 if "static" in mem else None,
            "tokens_per_s": s.get("tokens_per_s"),
            "steps": s.get("steps"),
            "diverged": bool(s.get("diverged")),
        })
    with open(os.path.join(args.out, "summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)

    def fmt(v, spec):
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)

    md = ["| treatment |" + (" val loss at step 0 (imported) |" if imported else "") + " final val loss |" +
          (" change from step 0 |" if imported else "") + " vs bf16-mw |" + (f" vs {args.vs} |" if args.vs else "") +
          " static B / quantized param | static MiB (model) | tokens/s "
          "| steps | diverged |" + (f" paper {args.paper} loss | paper vs bf16-mw |" if paper else ""),
          "|---|---|---|---|---|---|---|---|" + ("---|---|" if imported else "") + ("---|" if args.vs else "") +
          ("---|---|" if paper else "")]
    for r in rows:
        p_loss = paper.get(r["treatment"])
        p_gap = p_loss - paper["bf16-mw"] if p_loss is not None else None
        md.append(f"| {r['treatment']} |" +
                  (f" {fmt(r['initial_val_loss'], '.4f')} |" if imported else "") +
                  f" {fmt(r['final_val_loss'], '.4f')} |" +
                  (f" {fmt(r['change_from_initial'], '+.4f')} |" if imported else "") +
                  f" {fmt(r['delta_vs_bf16_mw'], '+.4f')} |" +
                  (f" {fmt(r['delta_vs_' + args.vs], '+.4f')} |" if args.vs else "") + " "
                  f"{fmt(r['static_bytes_per_quantized_param'], '.2f')} | {fmt(r['static_mib'], '.2f')} | "
                  f"{fmt(r['tokens_per_s'], '.0f')} | "
                  f"{r['steps']} | {'yes' if r['diverged'] else 'no'} |" +
                  (f" {fmt(p_loss, '.4f')} | {fmt(p_gap, '+.4f')} |" if paper else ""))
    open(os.path.join(args.out, "summary.md"), "w").write("\n".join(md) + "\n")
    print("\n".join(md))

    fig, ax = plt.subplots(figsize=(8, 5))
    for t in found:
        val = data[t][1]
        if val:
            ax.plot(*zip(*val), marker="o", ms=2, lw=1.2, label=t, color=color_of(t))
    ax.set_xlabel("step"); ax.set_ylabel("val loss (nats/token)"); ax.grid(alpha=0.3)
    finals = [r["final_val_loss"] for r in rows if r["final_val_loss"] is not None and not r["diverged"]]
    if finals:
        lo = min(finals)
        ax.set_ylim(lo - 0.05, lo + 1.0)
    ax.legend(fontsize=7, ncol=2); ax.set_title(os.path.basename(os.path.normpath(args.runs)) + ": val loss")
    fig.tight_layout(); fig.savefig(os.path.join(args.out, "loss_curves.png"), dpi=120); plt.close(fig)

    memory_vs_loss(rows, "static_bytes_per_quantized_param", "static bytes per quantized parameter",
                   "memory vs quality", os.path.join(args.out, "memory_vs_loss.png"))
    memory_vs_loss(rows, "static_mib", "static MiB of the whole model (weights, codes, scales, masters, "
                   "optimizer state)", "memory vs quality, whole model",
                   os.path.join(args.out, "memory_vs_loss_model.png"))

    if base_val:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for t in found:
            if t == "bf16-mw":
                continue
            pts = [(s, v - base_val[s]) for s, v in data[t][1] if s in base_val]
            if pts:
                ax.plot(*zip(*pts), marker="o", ms=2, lw=1.2, label=t, color=color_of(t))
        ax.axhline(0, c="gray", lw=1)
        ax.set_xlabel("step"); ax.set_ylabel("val loss - bf16-mw val loss"); ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2); ax.set_title("gap to bf16-mw over training")
        fig.tight_layout(); fig.savefig(os.path.join(args.out, "gap_to_bf16.png"), dpi=120); plt.close(fig)
    for t in found:  # keep the raw curves and summaries beside the table (treatments.sh resumes from them)
        shutil.copy(os.path.join(args.runs, t, "metrics.jsonl"), os.path.join(args.out, f"{t}.metrics.jsonl"))
        shutil.copy(os.path.join(args.runs, t, "summary.json"), os.path.join(args.out, f"{t}.summary.json"))
    print(f"summarize_treatments: wrote {args.out}")


if __name__ == "__main__":
    main()
