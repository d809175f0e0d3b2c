#!/usr/bin/env python3
"""Hugging Face checkpoint fixtures for ecotrain's import and export (tests/fixtures/hf/).

Two directions, each a directory per family holding config.json, model.safetensors and
logits.safetensors (tokens: I32 (2, 8); logits: F32 (2, 8, vocab), transformers' in float32):

  hf/<family>/         a tiny random model built with transformers and saved by save_pretrained
                       (gpt2: GPT2LMHeadModel in F32, llama: LlamaForCausalLM in BF16, gemma3:
                       Gemma3ForCausalLM in F16, mixtral: MixtralForCausalLM in F32). Every weight
                       is random (norm gains and biases too), so a name or layout mix-up shows.
                       tests/unit/test_hf_fixtures.cpp imports it (model.init_from) and compares
                       ecotrain's logits with these.
  hf/export_<family>/  a checkpoint trained a few steps by ecotrain (llama: under fp8-eco-rtn, so
                       the export dequantizes) and written by `eco-train export --dtype f32`;
                       logits.safetensors holds transformers' logits of that export (loaded by
                       AutoModelForCausalLM). The same test imports the export into ecotrain and
                       compares: transformers reads what ecotrain writes as ecotrain means it.

transformers and torch are needed only here (pip install torch transformers safetensors); CI
reads the committed files. Usage:
  python tools/hf_fixture.py [--eco-train build/eco-train] [--out tests/fixtures/hf]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import save_file
import transformers
from transformers import (AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, Gemma3ForCausalLM,
                          Gemma3TextConfig, LlamaConfig, LlamaForCausalLM, MixtralConfig,
                          MixtralForCausalLM)

B, T = 2, 8
VOCAB = 37


def tokens(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (B, T), generator=g)


def randomize(model, seed, gain_offset):
    """Every parameter random: matrices N(0, 0.1^2) (routers 0.5), gains gain_offset + 0.1 N,
    biases 0.1 N. Rounded to the save dtype later; logits are taken after that rounding."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            z = torch.randn(p.shape, generator=g)
            if p.ndim == 1 and ("norm" in name or "ln_" in name) and name.endswith("weight"):
                p.copy_(gain_offset + 0.1 * z)
            elif p.ndim == 1:
                p.copy_(0.1 * z)
            elif name.endswith("gate.weight") and "experts" not in name:
                p.copy_(0.5 * z)
            else:
                p.copy_(0.1 * z)


def logits_of(model, toks):
    model.eval()
    with torch.no_grad():
        return model.float()(toks).logits.float()


def routing_margin(model, toks):
    """Smallest (k-th minus (k+1)-th) router logit over tokens and layers: ecotrain routes as
    transformers does only when no choice is a near tie."""
    with torch.no_grad():
        out = model.float()(toks, output_router_logits=True)
    k = model.config.num_experts_per_tok
    margin = float("inf")
    for z in out.router_logits:
        s = z.sort(-1, descending=True).values
        margin = min(margin, (s[:, k - 1] - s[:, k]).min().item())
    return margin


def load_f32(path, name):
    """The checkpoint at path as transformers loads it in float32 (buffers such as RoPE's
    inverse frequencies and Gemma's embedding scale computed afresh in float32, not rounded to
    the save dtype), with every tensor found under its expected name."""
    model, info = AutoModelForCausalLM.from_pretrained(
        path, attn_implementation="eager", dtype=torch.float32, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        sys.exit(f"{name}: transformers' loading report: {bad}")
    return model


def save(model, out, dtype, toks):
    if os.path.isdir(out):
        shutil.rmtree(out)
    model.to(dtype).save_pretrained(out, safe_serialization=True)
    gen = os.path.join(out, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)
    logits = logits_of(load_f32(out, out), toks)
    save_file({"tokens": toks.to(torch.int32).contiguous(), "logits": logits.contiguous()},
              os.path.join(out, "logits.safetensors"))
    return logits


def hf_models():
    """(family, model, save dtype, gain offset): tiny configs of each class."""
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=T, n_embd=32, n_layer=2,
                                      n_head=2, activation_function="gelu_new", resid_pdrop=0.0,
                                      embd_pdrop=0.0, attn_pdrop=0.0))
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, max_position_embeddings=T,
                                         rms_norm_eps=1e-5, rope_theta=10000.0,
                                         tie_word_embeddings=False))
    # Layer 0 local (window 3 of 8 tokens, RoPE base 100), layer 1 global (base 10000); head_dim
    # 12 is not d_model / n_head; queries scaled by 10^-1/2.
    gemma3 = Gemma3ForCausalLM(Gemma3TextConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=12, max_position_embeddings=T,
        sliding_window=3, layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}},
        query_pre_attn_scalar=10, rms_norm_eps=1e-6))
    mixtral = MixtralForCausalLM(MixtralConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=16, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=T,
        num_local_experts=4, num_experts_per_tok=2, rope_theta=10000.0, rms_norm_eps=1e-5))
    return [("gpt2", gpt2, torch.float32, 1.0), ("llama", llama, torch.bfloat16, 1.0),
            ("gemma3", gemma3, torch.float16, 0.0), ("mixtral", mixtral, torch.float32, 1.0)]


# ecotrain configs of the export direction (trained a few steps on the synthetic corpus).
ECO_MODELS = {
    "gpt2": "model: {family: gpt2, n_layer: 2, n_head: 2, d_model: 32, vocab_size: 37, seq_len: 8}",
    "llama": "model: {family: llama, n_layer: 2, n_head: 4, n_kv_head: 2, d_model: 32, "
             "mlp_hidden: 48, vocab_size: 37, seq_len: 8}\nprecision: {treatment: fp8-eco-rtn}",
    "gemma3": "model: {family: gemma3, n_layer: 2, n_head: 4, n_kv_head: 2, head_dim: 12, "
              "d_model: 32, mlp_hidden: 48, vocab_size: 37, seq_len: 8, sliding_window: 3, "
              "sliding_window_pattern: 2, rope_theta: 10000, rope_local_theta: 100, "
              "query_pre_attn_scalar: 10}",
    "mixtral": "model: {family: llama, n_layer: 2, n_head: 4, n_kv_head: 2, d_model: 32, "
               "vocab_size: 37, seq_len: 8, moe: {n_experts: 4, top_k: 2, expert_hidden: 16}}",
}


def eco_export(eco_train, family, out, work):
    cfg = os.path.join(work, f"{family}.yaml")
    with open(cfg, "w") as f:
        f.write(ECO_MODELS[family] + "\n")
        f.write("data: {source: synthetic}\noptim: {lr: 3.0e-2, warmup_steps: 0}\n")
        f.write(f"train: {{batch_size: 4, max_steps: 6, log_interval: 6, eval_batches: 1, "
                f"sample_tokens: 0, out_dir: {work}/{family}}}\n")
    subprocess.run([eco_train, cfg], check=True, stdout=subprocess.DEVNULL)
    if os.path.isdir(out):
        shutil.rmtree(out)
    subprocess.run([eco_train, "export", f"{work}/{family}/ckpt_00000006.bin", "--out", out,
                    "--dtype", "f32"], check=True, stdout=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "hf"))
    ap.add_argument("--eco-train", default=os.path.join(root, "build", "eco-train"))
    args = ap.parse_args()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    torch.manual_seed(0)
    for seed, (family, model, dtype, gain) in enumerate(hf_models()):
        randomize(model, 100 + seed, gain)
        toks = tokens(seed)
        logits = save(model, os.path.join(args.out, family), dtype, toks)
        if family == "mixtral":
            m = routing_margin(load_f32(os.path.join(args.out, family), family), toks)
            print(f"  mixtral: smallest routing margin {m:.2e}")
            if m < 1e-3:
                sys.exit("mixtral: a routing margin under 1e-3; pick another seed")
        print(f"  hf/{family}: {dtype}, logits std {logits.std():.3f}")

    with tempfile.TemporaryDirectory() as work:
        for seed, family in enumerate(ECO_MODELS):
            out = os.path.join(args.out, f"export_{family}")
            eco_export(args.eco_train, family, out, work)
            model = load_f32(out, f"export_{family}")
            toks = tokens(50 + seed)
            if family == "mixtral":
                m = routing_margin(model, toks)
                print(f"  export_mixtral: smallest routing margin {m:.2e}")
                if m < 1e-3:
                    sys.exit("export_mixtral: a routing margin under 1e-3; change the run")
            logits = logits_of(model, toks)
            save_file({"tokens": toks.to(torch.int32).contiguous(), "logits": logits.contiguous()},
                      os.path.join(out, "logits.safetensors"))
            print(f"  hf/export_{family}: {type(model).__name__}, logits std {logits.std():.3f}")
    for d in sorted(os.listdir(args.out)):
        size = sum(os.path.getsize(os.path.join(args.out, d, f))
                   for f in os.listdir(os.path.join(args.out, d)))
        print(f"  {d}: {size} bytes")


if __name__ == "__main__":
    main()
