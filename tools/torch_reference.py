#!/usr/bin/env python3
"""PyTorch float64 reference for ecotrain's CPU model: writes tests/fixtures/torch_reference_*.bin.

The tiny GPT-2, Llama and Gemma 3 models are written here from the math (no HF transformers), with the
parameter names and layouts of src/model/param_table.cpp and the op conventions of
kernels/cpu/kernels.h. For each family the fixture holds the config, every parameter, one batch
(inputs, targets), the logits, the mean cross-entropy loss, every parameter gradient and the
losses / gradient norms of 10 steps of torch.optim.AdamW with clip_grad_norm_ on that batch.
Two SMoE fixtures (moe_topk_softmax on the GPT-2 family, moe_softmax_topk on Llama; 4 experts,
top 2, one shared expert, MoE in every layer) do the same with ecotrain's MoE MLP
(docs/moe.md): the loss written is the cross-entropy that ecotrain returns, the
gradients and the AdamW run are of cross-entropy + every layer's aux + z losses (the routed
counts n_i held constant), as ecotrain's backward adds them.
tests/unit/test_torch_reference.cpp replays all of it on the CPU backend (f32 and f64).

The Gemma 3 fixture (gemma3_forward) follows HF transformers' Gemma3ForCausalLM (sandwich
(1 + w) RMSNorms, QK-norm, GQA, sliding-window layers with their own RoPE base, GeGLU, scaled
tied embeddings, no soft-capping), written from the math here as well.

Usage: python tools/torch_reference.py [--out tests/fixtures] [--check-only] [--families ...]

Fixture format (little-endian), a sequence of records:
  [uint32 name_len][name bytes][uint32 dtype: 0=f32, 1=i32, 2=f64][uint32 ndim][int64 dims...]
  [data, row-major]
ending with a record named "end" (dtype i32, ndim 0, one element). Scalars have ndim 0.
"""
import argparse
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)

# The run both families share (ecotrain: ModelConfig / OptimConfig fields of the same names).
BATCH = 2
SEQ_LEN = 8
COMMON = dict(vocab_size=37, d_model=16, n_head=2, n_layer=2, seq_len=SEQ_LEN,
              max_seq_len=SEQ_LEN, rope_theta=10000.0,
              # ecotrain passes norm_eps as a float; the reference uses exactly that value so
              # the f64 comparison is not limited by the rounding of 1e-5 (2.5e-9 relative in
              # eps, 3e-10 in the Llama logits).
              norm_eps=float(np.float32(1e-5)))
FAMILIES = {
    "gpt2": dict(COMMON, family="gpt2", mlp_hidden=64, tie_embeddings=True, seed=1234),
    "llama": dict(COMMON, family="llama", mlp_hidden=48, tie_embeddings=False, seed=5678),
    # SMoE (docs/moe.md): MoE in every layer, 4 routed experts, top 2, one shared expert; experts
    # take the family's activation (gpt2: GELU with biases, llama: SwiGLU [gate | up]). Nonzero
    # aux and z coefficients so their gradients are covered. mlp_hidden is unused (no dense MLP).
    "moe_topk_softmax": dict(COMMON, family="gpt2", mlp_hidden=64, tie_embeddings=True, seed=113,
                             moe=dict(n_experts=4, top_k=2, expert_hidden=8, n_shared_experts=1,
                                      router="topk_softmax", aux_loss_coef=0.1,
                                      z_loss_coef=0.05)),
    "moe_softmax_topk": dict(COMMON, family="llama", mlp_hidden=48, tie_embeddings=False,
                             seed=109,
                             moe=dict(n_experts=4, top_k=2, expert_hidden=8, n_shared_experts=1,
                                      router="softmax_topk", aux_loss_coef=0.1,
                                      z_loss_coef=0.05)),
    # Gemma 3 (gemma3_forward): 4 query heads sharing 2 key/value heads of 6 (head_dim is not
    # d_model / n_head), layer 0 local (window 3 < seq 8, RoPE base 100), layer 1 global (base
    # 10000), queries scaled by 5^-1/2, GeGLU, tied embeddings scaled by sqrt(16) = 4 (exact).
    "gemma3": dict(COMMON, family="gemma3", mlp_hidden=24, tie_embeddings=True, seed=4242,
                   n_head=4, n_kv_head=2, head_dim=6, sliding_window=3, sliding_window_pattern=2,
                   rope_local_theta=100.0, query_pre_attn_scalar=5.0,
                   norm_eps=float(np.float32(1e-6))),
}
FAMILY_IDS = {"gpt2": 0, "llama": 1, "gemma3": 2}  # ecotrain's ModelFamily values
ROUTERS = {"topk_softmax": 0, "softmax_topk": 1}  # ecotrain's MoeRouter values
OPTIM = dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=1.0, steps=10)


# ---- parameters -------------------------------------------------------------------------------
def gemma3_param_specs(cfg):
    """Gemma 3's table (src/model/param_table.cpp): sandwich norms, QK-norm, GeGLU [gate | up],
    fused qkv rows [q (NH heads) | k (KVH) | v (KVH)] x head_dim, tied embeddings."""
    C, V, H, L = cfg["d_model"], cfg["vocab_size"], cfg["mlp_hidden"], cfg["n_layer"]
    NH, KVH, hd = cfg["n_head"], cfg["n_kv_head"], cfg["head_dim"]
    specs = [("wte", (V, C), "matrix")]
    for l in range(L):
        p = f"h.{l}."
        specs += [(p + "norm1.weight", (C,), "offset_gain"),
                  (p + "attn.qkv.weight", ((NH + 2 * KVH) * hd, C), "matrix"),
                  (p + "attn.q_norm.weight", (hd,), "offset_gain"),
                  (p + "attn.k_norm.weight", (hd,), "offset_gain"),
                  (p + "attn.proj.weight", (C, NH * hd), "matrix"),
                  (p + "attn.post_norm.weight", (C,), "offset_gain"),
                  (p + "norm2.weight", (C,), "offset_gain"),
                  (p + "mlp.fc.weight", (2 * H, C), "matrix"),
                  (p + "mlp.proj.weight", (C, H), "matrix"),
                  (p + "mlp.post_norm.weight", (C,), "offset_gain")]
    specs.append(("norm_f.weight", (C,), "offset_gain"))
    return specs


def param_specs(cfg):
    """(name, shape, kind) in ecotrain's table order; kind picks the random init."""
    if cfg["family"] == "gemma3":
        return gemma3_param_specs(cfg)
    C, V, H, L = cfg["d_model"], cfg["vocab_size"], cfg["mlp_hidden"], cfg["n_layer"]
    llama = cfg["family"] == "llama"
    specs = [("wte", (V, C), "matrix")]
    if not llama:
        specs.append(("wpe", (cfg["max_seq_len"], C), "matrix"))
    for l in range(L):
        p = f"h.{l}."
        specs.append((p + "norm1.weight", (C,), "gain"))
        if not llama:
            specs.append((p + "norm1.bias", (C,), "bias"))
        specs.append((p + "attn.qkv.weight", (3 * C, C), "matrix"))
        if not llama:
            specs.append((p + "attn.qkv.bias", (3 * C,), "bias"))
        specs.append((p + "attn.proj.weight", (C, C), "matrix"))
        if not llama:
            specs.append((p + "attn.proj.bias", (C,), "bias"))
        specs.append((p + "norm2.weight", (C,), "gain"))
        if not llama:
            specs.append((p + "norm2.bias", (C,), "bias"))
        if "moe" in cfg:  # model/moe_mlp.h: router, experts.{e}, shared (one MLP of n_shared * H)
            m = cfg["moe"]
            He, Hs = m["expert_hidden"], m["expert_hidden"] * m["n_shared_experts"]
            specs.append((p + "mlp.router.weight", (m["n_experts"], C), "router"))
            experts = [(f"mlp.experts.{e}.", He) for e in range(m["n_experts"])]
            if m["n_shared_experts"] > 0:
                experts.append(("mlp.shared.", Hs))
            for q, h in experts:
                specs.append((p + q + "fc.weight", (2 * h if llama else h, C), "matrix"))
                if not llama:
                    specs.append((p + q + "fc.bias", (h,), "bias"))
                specs.append((p + q + "proj.weight", (C, h), "matrix"))
                if not llama:
                    specs.append((p + q + "proj.bias", (C,), "bias"))
            continue
        # llama: rows [0, H) gate, rows [H, 2H) up.
        specs.append((p + "mlp.fc.weight", (2 * H if llama else H, C), "matrix"))
        if not llama:
            specs.append((p + "mlp.fc.bias", (H,), "bias"))
        specs.append((p + "mlp.proj.weight", (C, H), "matrix"))
        if not llama:
            specs.append((p + "mlp.proj.bias", (C,), "bias"))
    specs.append(("norm_f.weight", (C,), "gain"))
    if not llama:
        specs.append(("norm_f.bias", (C,), "bias"))
    if not cfg["tie_embeddings"]:
        specs.append(("lm_head.weight", (V, C), "matrix"))
    return specs


def init_params(cfg, gen):
    """Non-trivial random weights, rounded to float32 so the f32 backend loads them exactly."""
    params = {}
    for i, (name, shape, kind) in enumerate(param_specs(cfg)):
        z = torch.randn(shape, generator=gen)
        if kind == "gain":
            w = 1.0 + 0.1 * z
        elif kind == "offset_gain":  # Gemma's norms scale by (1 + w)
            w = 0.1 * z
        elif kind == "bias":
            w = 0.1 * z
        elif kind == "router":  # logits spread wide enough that no top-k choice is a close call
            w = 0.5 * z
        else:  # matrices: std spread over [0.02, 0.2] so each one has its own scale
            w = (0.02 + 0.18 * ((i * 7) % 11) / 10.0) * z
        params[name] = w.float().double().requires_grad_(True)
    return params


# ---- ops, written from the math -----------------------------------------------------------------
def layernorm(x, w, b, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * w + b


def rmsnorm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def rope(x, theta):
    """x (B, NH, T, hs): HF rotate_half pairing (i, i + hs/2), angle = t * theta^(-2i/hs)."""
    T, hs = x.shape[-2], x.shape[-1]
    half = hs // 2
    inv_freq = theta ** (-2.0 * torch.arange(half) / hs)
    ang = torch.arange(T)[:, None] * inv_freq[None, :]  # (T, half)
    cos = torch.cat([ang.cos(), ang.cos()], -1)
    sin = torch.cat([ang.sin(), ang.sin()], -1)
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def causal_attention(q, k, v):
    """q, k, v (B, NH, T, hs) -> (B, NH, T, hs), scale 1/sqrt(hs)."""
    T, hs = q.shape[-2], q.shape[-1]
    scores = q @ k.transpose(-1, -2) / math.sqrt(hs)
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, -1) @ v


def moe_mlp(cfg, P, p, h, extras):
    """A MoE layer's MLP on h (B, T, C), docs/moe.md: router logits z = h W_r^T over all B*T tokens,
    top-k (ties to the lower id), gates by the router mode, the weighted sum of the k experts'
    outputs plus the shared experts. Appends (aux, z) losses to extras; aux treats the routed
    counts n_i as constants; the routing margins (k-th minus (k+1)-th logit) go to extras too."""
    m, llama = cfg["moe"], cfg["family"] == "llama"
    E, k = m["n_experts"], m["top_k"]
    B, T, C = h.shape
    x = h.reshape(B * T, C)
    N = x.shape[0]

    def mlp(q, v):
        f = v @ P[q + "fc.weight"].T
        if llama:
            H = f.shape[-1] // 2
            return (F.silu(f[..., :H]) * f[..., H:]) @ P[q + "proj.weight"].T
        return gelu_tanh(f + P[q + "fc.bias"]) @ P[q + "proj.weight"].T + P[q + "proj.bias"]

    z = x @ P[p + "router.weight"].T  # (N, E)
    prob = torch.softmax(z, -1)
    lse = torch.logsumexp(z, -1)
    order = torch.sort(z.detach(), stable=True, dim=-1, descending=True).indices
    idx = order[:, :k]
    zs = z.detach().gather(1, order)
    extras["margins"].append((zs[:, k - 1] - zs[:, k]).min().item())
    if m["router"] == "topk_softmax":
        gates = torch.softmax(z.gather(1, idx), -1)
    else:  # softmax_topk without renormalisation
        gates = prob.gather(1, idx)
    combine = torch.zeros(N, E, dtype=x.dtype).scatter(1, idx, gates)  # (N, E), k nonzeros a row
    y = sum(combine[:, e:e + 1] * mlp(p + f"experts.{e}.", x) for e in range(E))
    if m["n_shared_experts"] > 0:
        y = y + mlp(p + "shared.", x)
    counts = torch.zeros(E, dtype=x.dtype).scatter_add(
        0, idx.reshape(-1), torch.ones(N * k, dtype=x.dtype))
    aux = m["aux_loss_coef"] * E * ((counts / (N * k)) * prob.mean(0)).sum()
    zl = m["z_loss_coef"] * (lse ** 2).mean()
    extras["router_losses"].append(aux + zl)
    return y.reshape(B, T, C)


def forward(cfg, P, inputs, extras=None):
    """inputs (B, T) int64 -> logits (B*T, V). MoE layers append to extras (see moe_mlp)."""
    if cfg["family"] == "gemma3":
        return gemma3_forward(cfg, P, inputs)
    B, T = inputs.shape
    C, NH, H = cfg["d_model"], cfg["n_head"], cfg["mlp_hidden"]
    hs, eps = C // NH, cfg["norm_eps"]
    llama = cfg["family"] == "llama"

    def norm(x, prefix):
        if llama:
            return rmsnorm(x, P[prefix + ".weight"], eps)
        return layernorm(x, P[prefix + ".weight"], P[prefix + ".bias"], eps)

    def linear(x, prefix):
        y = x @ P[prefix + ".weight"].T
        return y if llama else y + P[prefix + ".bias"]

    x = P["wte"][inputs]  # (B, T, C)
    if not llama:
        x = x + P["wpe"][:T]
    for l in range(cfg["n_layer"]):
        p = f"h.{l}."
        qkv = linear(norm(x, p + "norm1"), p + "attn.qkv")  # (B, T, 3C) = [q | k | v]
        q, k, v = (t.reshape(B, T, NH, hs).transpose(1, 2) for t in qkv.split(C, -1))
        if llama:
            q, k = rope(q, cfg["rope_theta"]), rope(k, cfg["rope_theta"])
        y = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, C)
        x = x + linear(y, p + "attn.proj")
        if "moe" in cfg:
            x = x + moe_mlp(cfg, P, p + "mlp.", norm(x, p + "norm2"), extras)
            continue
        f = linear(norm(x, p + "norm2"), p + "mlp.fc")  # (B, T, H) or (B, T, 2H) = [gate | up]
        a = F.silu(f[..., :H]) * f[..., H:] if llama else gelu_tanh(f)
        x = x + linear(a, p + "mlp.proj")
    head = P["wte"] if cfg["tie_embeddings"] else P["lm_head.weight"]
    return (norm(x, "norm_f") @ head.T).reshape(B * T, -1)


def gemma_rmsnorm(x, w, eps):
    """Gemma's RMSNorm (HF Gemma3RMSNorm): x / rms(x) * (1 + w)."""
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * (1.0 + w)


def window_attention(q, k, v, window, scale):
    """q (B, NH, T, hs), k, v (B, NH, T, hs) (kv heads already repeated): causal, query t sees
    keys (t - window, t] when window > 0 (HF: kv_idx > q_idx - sliding_window), scores * scale."""
    T = q.shape[-2]
    scores = q @ k.transpose(-1, -2) * scale
    t = torch.arange(T)
    mask = t[None, :] > t[:, None]
    if window > 0:
        mask = mask | (t[None, :] <= t[:, None] - window)
    scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, -1) @ v


def gemma3_forward(cfg, P, inputs):
    """Gemma 3 (HF Gemma3ForCausalLM's math, no soft-capping): inputs (B, T) -> logits (B*T, V)."""
    B, T = inputs.shape
    C, NH, KVH, hd, H = (cfg["d_model"], cfg["n_head"], cfg["n_kv_head"], cfg["head_dim"],
                         cfg["mlp_hidden"])
    eps, group = cfg["norm_eps"], NH // KVH
    scale = cfg["query_pre_attn_scalar"] ** -0.5
    x = P["wte"][inputs] * torch.tensor(C ** 0.5, dtype=P["wte"].dtype)  # (B, T, C)
    for l in range(cfg["n_layer"]):
        p = f"h.{l}."
        local = (l + 1) % cfg["sliding_window_pattern"] != 0
        theta = cfg["rope_local_theta"] if local else cfg["rope_theta"]
        h = gemma_rmsnorm(x, P[p + "norm1.weight"], eps)
        qkv = h @ P[p + "attn.qkv.weight"].T
        q, k, v = qkv.split([NH * hd, KVH * hd, KVH * hd], -1)
        q = q.reshape(B, T, NH, hd).transpose(1, 2)
        k = k.reshape(B, T, KVH, hd).transpose(1, 2)
        v = v.reshape(B, T, KVH, hd).transpose(1, 2)
        q = gemma_rmsnorm(q, P[p + "attn.q_norm.weight"], eps)
        k = gemma_rmsnorm(k, P[p + "attn.k_norm.weight"], eps)
        q, k = rope(q, theta), rope(k, theta)
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        y = window_attention(q, k, v, cfg["sliding_window"] if local else 0, scale)
        y = y.transpose(1, 2).reshape(B, T, NH * hd) @ P[p + "attn.proj.weight"].T
        x = x + gemma_rmsnorm(y, P[p + "attn.post_norm.weight"], eps)
        f = gemma_rmsnorm(x, P[p + "norm2.weight"], eps) @ P[p + "mlp.fc.weight"].T
        a = gelu_tanh(f[..., :H]) * f[..., H:]
        m = a @ P[p + "mlp.proj.weight"].T
        x = x + gemma_rmsnorm(m, P[p + "mlp.post_norm.weight"], eps)
    x = gemma_rmsnorm(x, P["norm_f.weight"], eps)
    return (x @ P["wte"].T).reshape(B * T, -1)


# ---- self-checks against independent formulations -------------------------------------------
def rope_by_complex_pairs(x, theta):
    """The same rotation as (x_i + i x_{i+half}) * e^{i angle_i}."""
    T, hs = x.shape[-2], x.shape[-1]
    half = hs // 2
    ang = torch.tensor([[t * theta ** (-2.0 * i / hs) for i in range(half)] for t in range(T)])
    z = torch.complex(x[..., :half], x[..., half:]) * torch.polar(torch.ones_like(ang), ang)
    return torch.cat([z.real, z.imag], -1)


def attention_by_loops(q, k, v):
    B, NH, T, hs = q.shape
    out = torch.zeros_like(q)
    for b in range(B):
        for h in range(NH):
            for t in range(T):
                s = torch.stack([q[b, h, t] @ k[b, h, u] for u in range(t + 1)]) / math.sqrt(hs)
                w = torch.exp(s - s.max())
                w = w / w.sum()
                out[b, h, t] = sum(w[u] * v[b, h, u] for u in range(t + 1))
    return out


def self_check():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 2, 8, 8, generator=g)
    q, k, v = (torch.randn(2, 3, 8, 6, generator=g) for _ in range(3))
    h = torch.randn(5, 16, generator=g)
    w, b = 1 + 0.1 * torch.randn(16, generator=g), torch.randn(16, generator=g)
    checks = {
        "rope vs complex pairs": (rope(x, 10000.0), rope_by_complex_pairs(x, 10000.0)),
        "rope at t=0 is identity": (rope(x, 10000.0)[..., 0, :], x[..., 0, :]),
        "attention vs loops": (causal_attention(q, k, v), attention_by_loops(q, k, v)),
        "attention vs sdpa": (causal_attention(q, k, v),
                              F.scaled_dot_product_attention(q, k, v, is_causal=True)),
        "layernorm vs F.layer_norm": (layernorm(h, w, b, 1e-5),
                                      F.layer_norm(h, (16,), w, b, 1e-5)),
        "rmsnorm vs formula": (rmsnorm(h, w, 1e-5),
                               h / torch.sqrt((h ** 2).mean(-1, keepdim=True) + 1e-5) * w),
        "gelu vs F.gelu(tanh)": (gelu_tanh(h), F.gelu(h, approximate="tanh")),
        "window 0 attention vs causal": (window_attention(q, k, v, 0, 6 ** -0.5),
                                         causal_attention(q, k, v)),
        "window attention vs sdpa mask": (
            window_attention(q, k, v, 3, 0.3),
            F.scaled_dot_product_attention(
                q, k, v, scale=0.3,
                attn_mask=(torch.arange(8)[None, :] <= torch.arange(8)[:, None]) &
                          (torch.arange(8)[None, :] > torch.arange(8)[:, None] - 3))),
    }
    for name, (a, ref) in checks.items():
        err = ((a - ref).norm() / ref.norm()).item()
        print(f"  self-check {name:<28} rel err {err:.1e}")
        if err > 1e-13:
            sys.exit(f"self-check failed: {name} (relative error {err:.3e})")


# ---- the reference run --------------------------------------------------------------------------
def model_loss(cfg, P, inputs, targets):
    """(cross-entropy, what is differentiated, forward extras). ecotrain returns the mean
    cross-entropy; the MoE layers' aux and z losses enter only the gradient (loss scale 1)."""
    extras = {"margins": [], "router_losses": []}
    logits = forward(cfg, P, inputs, extras)
    ce = F.cross_entropy(logits, targets.reshape(-1))
    total = ce + sum(extras["router_losses"]) if extras["router_losses"] else ce
    extras["logits"] = logits
    return ce, total, extras


MARGINS = []  # the routing margins of every MoE forward of a run (the printout)


def adamw_run(cfg, P0, inputs, targets, exact_clip=False):
    """OPTIM['steps'] AdamW steps on one batch; returns (losses, pre-clip grad norms)."""
    P = {n: p.detach().clone().requires_grad_(True) for n, p in P0.items()}
    groups = [
        {"params": [p for p in P.values() if p.ndim == 2], "weight_decay": OPTIM["weight_decay"]},
        {"params": [p for p in P.values() if p.ndim != 2], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=OPTIM["lr"], betas=(OPTIM["beta1"], OPTIM["beta2"]),
                            eps=OPTIM["eps"])
    losses, norms = [], []
    for _ in range(OPTIM["steps"]):
        opt.zero_grad()
        loss, total, extras = model_loss(cfg, P, inputs, targets)
        MARGINS.extend(extras["margins"])
        total.backward()
        if exact_clip:  # ecotrain's coefficient: clip / norm
            norm = torch.sqrt(sum((p.grad ** 2).sum() for p in P.values()))
            if norm > OPTIM["grad_clip"]:
                for p in P.values():
                    p.grad.mul_(OPTIM["grad_clip"] / norm)
        else:  # torch's coefficient: clip / (norm + 1e-6)
            norm = torch.nn.utils.clip_grad_norm_(list(P.values()), OPTIM["grad_clip"])
        losses.append(loss.item())
        norms.append(norm.item())
        opt.step()
    return losses, norms


def reference(cfg):
    gen = torch.Generator().manual_seed(cfg["seed"])
    P = init_params(cfg, gen)
    inputs = torch.randint(0, cfg["vocab_size"], (BATCH, SEQ_LEN), generator=gen)
    targets = torch.randint(0, cfg["vocab_size"], (BATCH, SEQ_LEN), generator=gen)

    loss, total, extras = model_loss(cfg, P, inputs, targets)
    logits = extras["logits"]
    total.backward()

    MARGINS.clear()
    MARGINS.extend(extras["margins"])
    losses, norms = adamw_run(cfg, P, inputs, targets)
    if MARGINS:  # a float backend routes as float64 does only when no top-k choice is close
        print(f"  {cfg['name']}: smallest routing margin (k-th minus (k+1)-th router logit) over "
              f"the forwards {min(MARGINS):.2e}")
        # The f32 backend's AdamW trajectory drifts from float64's (Adam amplifies the rounding
        # of near-zero gradients): a closer call may route a token otherwise.
        if min(MARGINS) < 1e-3:
            sys.exit(f"{cfg['name']}: a routing margin under 1e-3; pick another seed")
        unused = [n for n, p in P.items() if ".experts." in n and not p.grad.abs().sum() > 0]
        if unused:  # every expert's gradient is to be covered
            sys.exit(f"{cfg['name']}: no gradient reaches {unused}; pick another seed")
    exact_losses, _ = adamw_run(cfg, P, inputs, targets, exact_clip=True)
    clip_effect = max(abs(a - b) / abs(b) for a, b in zip(losses, exact_losses))
    print(f"  {cfg['name']}: loss {loss.item():.6f}, adamw losses {losses[0]:.4f} -> "
          f"{losses[-1]:.4f}, grad norms {min(norms):.3f}..{max(norms):.3f} "
          f"(clip {OPTIM['grad_clip']}); torch's clip/(norm+1e-6) vs clip/norm changes the "
          f"losses by at most {clip_effect:.1e} relative")

    records = []
    ints = ["vocab_size", "d_model", "n_head", "n_layer", "seq_len", "max_seq_len", "mlp_hidden"]
    for key in ints:
        records.append((f"config.{key}", np.int32(cfg[key])))
    records.append(("config.is_llama", np.int32(cfg["family"] == "llama")))
    if cfg["family"] == "gemma3":  # the family by id, and its attention keys
        records.append(("config.family", np.int32(FAMILY_IDS[cfg["family"]])))
        for key in ["n_kv_head", "head_dim", "sliding_window", "sliding_window_pattern"]:
            records.append((f"config.{key}", np.int32(cfg[key])))
        for key in ["rope_local_theta", "query_pre_attn_scalar"]:
            records.append((f"config.{key}", np.float64(cfg[key])))
    records.append(("config.tie_embeddings", np.int32(cfg["tie_embeddings"])))
    records.append(("config.batch", np.int32(BATCH)))
    if "moe" in cfg:
        m = cfg["moe"]
        for key in ["n_experts", "top_k", "expert_hidden", "n_shared_experts"]:
            records.append((f"config.moe.{key}", np.int32(m[key])))
        records.append(("config.moe.router", np.int32(ROUTERS[m["router"]])))
        for key in ["aux_loss_coef", "z_loss_coef"]:
            records.append((f"config.moe.{key}", np.float64(m[key])))
    records.append(("config.norm_eps", np.float64(cfg["norm_eps"])))
    records.append(("config.rope_theta", np.float64(cfg["rope_theta"])))
    for key in ["lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip"]:
        records.append((f"optim.{key}", np.float64(OPTIM[key])))
    records.append(("optim.steps", np.int32(OPTIM["steps"])))
    records.append(("inputs", inputs.numpy().astype(np.int32)))
    records.append(("targets", targets.numpy().astype(np.int32)))
    for name, p in P.items():
        records.append((name, p.detach().numpy()))
    records.append(("logits", logits.detach().numpy()))
    records.append(("loss", np.float64(loss.item())))
    for name, p in P.items():
        records.append(("grad." + name, p.grad.numpy()))
    records.append(("adamw.loss", np.array(losses)))
    records.append(("adamw.grad_norm", np.array(norms)))
    return records


def write_fixture(path, records):
    codes = {np.dtype(np.float32): 0, np.dtype(np.int32): 1, np.dtype(np.float64): 2}
    with open(path, "wb") as f:
        for name, value in records + [("end", np.int32(0))]:
            a = np.asarray(value)
            a = a.astype(a.dtype.newbyteorder("<"))
            raw = name.encode()
            f.write(struct.pack("<I", len(raw)) + raw)
            f.write(struct.pack("<II", codes[a.dtype], a.ndim))
            f.write(struct.pack(f"<{a.ndim}q", *a.shape))
            f.write(np.ascontiguousarray(a).tobytes())


def read_fixture(path):
    """The inverse of write_fixture (used to verify what was written)."""
    dtypes = {0: "<f4", 1: "<i4", 2: "<f8"}
    out = {}
    with open(path, "rb") as f:
        while True:
            (n,) = struct.unpack("<I", f.read(4))
            name = f.read(n).decode()
            code, ndim = struct.unpack("<II", f.read(8))
            shape = struct.unpack(f"<{ndim}q", f.read(8 * ndim))
            count = int(np.prod(shape)) if ndim else 1
            dt = np.dtype(dtypes[code])
            out[name] = np.frombuffer(f.read(count * dt.itemsize), dt).reshape(shape)
            if name == "end":
                assert f.read() == b"", f"{path}: data after the end record"
                return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                  "fixtures"))
    ap.add_argument("--check-only", action="store_true", help="run the self-checks only")
    ap.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(FAMILIES),
                    help="write only these fixtures (default: all)")
    args = ap.parse_args()
    print(f"torch {torch.__version__}")
    self_check()
    if args.check_only:
        return
    os.makedirs(args.out, exist_ok=True)
    for family in args.families:
        cfg = FAMILIES[family]
        records = reference(dict(cfg, name=family))
        path = os.path.join(args.out, f"torch_reference_{family}.bin")
        write_fixture(path, records)
        back = read_fixture(path)
        for name, value in records:
            assert np.array_equal(back[name], np.asarray(value)), f"{path}: {name} round trip"
        print(f"  wrote {os.path.normpath(path)} ({os.path.getsize(path)} bytes, "
              f"{len(records)} records)")


if __name__ == "__main__":
    main()
