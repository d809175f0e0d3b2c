#!/usr/bin/env python3
"""PyTorch eager CPU speed of a nanoGPT-style fp32 GPT-2 124M training step, the reference for
eco-bench's CPU figures (same shape as configs/gpt2-124m-cpu-bench.yaml: 12 layers, d 768,
12 heads, vocab 50257, B 4, T 64). A step is forward + backward + AdamW, random tokens.

    python3 tools/torch_cpu_bench.py [--threads 2] [--steps 5] [--warmup 2] [--batch 4] [--seq 64]

Needs torch (CPU is enough); torch stays out of the training path, this is a benchmark only.
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.fc_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, max_seq, n_layer, d, n_head):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(max_seq, d)
        self.blocks = nn.ModuleList(Block(d, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied, as GPT-2 and ecotrain
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    vocab = 50257
    model = GPT(vocab, 1024, 12, 768, 12)
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.0, fused=False, foreach=True)
    idx = torch.randint(0, vocab, (a.batch, a.seq))
    tgt = torch.randint(0, vocab, (a.batch, a.seq))
    params = sum(p.numel() for p in model.parameters())
    print(f"torch {torch.__version__} eager CPU, {torch.get_num_threads()} threads, "
          f"{params} params, B {a.batch} T {a.seq}")
    ms = []
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        opt.step()
        dt = (time.perf_counter() - t0) * 1e3
        if s >= a.warmup:
            ms.append(dt)
        print(f"  step {s + 1:2d}: {dt:8.1f} ms  loss {loss.item():.4f}{'  (warm-up)' if s < a.warmup else ''}")
    med = statistics.median(ms)
    assert math.isfinite(med)
    print(f"median ms/step {med:.1f}")
    print(f"tokens/s {a.batch * a.seq / (med / 1e3):.1f}")


if __name__ == "__main__":
    main()
