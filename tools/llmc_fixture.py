#!/usr/bin/env python3
"""Offline inputs for llm.c's CPU trainer (train_gpt2.c), so that it can be timed without the
Hugging Face download: a random-weight GPT-2 124M checkpoint and two token files of random tokens.

    python3 tools/llmc_fixture.py DIR [--tokens N] [--seed S]

writes, in the paths train_gpt2.c opens relative to its working directory:
    DIR/gpt2_124M.bin                                        gpt2_build_from_checkpoint's format
    DIR/dev/data/tinyshakespeare/tiny_shakespeare_train.bin  dataloader_init's format
    DIR/dev/data/tinyshakespeare/tiny_shakespeare_val.bin
No gpt2_tokenizer.bin: train_gpt2 warns and goes on without it (it only decodes samples).
"""
import argparse
import pathlib

import numpy as np

# gpt2_build_from_checkpoint: int32 header[256] = {magic, version, maxT, V, L, NH, C, Vp, 0...}.
MODEL_MAGIC, MODEL_VERSION = 20240326, 3
# dataloader_load_shard_: int32 header[256] = {magic, version, ntok, 0...}, then ntok uint16.
TOKENS_MAGIC, TOKENS_VERSION = 20240520, 1
HEADER_INTS = 256
MAX_T, V, L, NH, C, VP = 1024, 50257, 12, 12, 768, 50304


def header(*values):
    h = np.zeros(HEADER_INTS, dtype=np.int32)
    h[: len(values)] = values
    return h.tobytes()


def parameter_tensors():
    """(name, shape, init) in fill_in_parameter_sizes' order; init is 'normal', 'ones' or 'zeros'."""
    return [
        ("wte", (VP, C), "normal"),          # rows V..Vp-1 are padding, zeroed below
        ("wpe", (MAX_T, C), "normal"),
        ("ln1w", (L, C), "ones"),
        ("ln1b", (L, C), "zeros"),
        ("qkvw", (L, 3 * C, C), "normal"),
        ("qkvb", (L, 3 * C), "zeros"),
        ("attprojw", (L, C, C), "normal"),
        ("attprojb", (L, C), "zeros"),
        ("ln2w", (L, C), "ones"),
        ("ln2b", (L, C), "zeros"),
        ("fcw", (L, 4 * C, C), "normal"),
        ("fcb", (L, 4 * C), "zeros"),
        ("fcprojw", (L, C, 4 * C), "normal"),
        ("fcprojb", (L, C), "zeros"),
        ("lnfw", (C,), "ones"),
        ("lnfb", (C,), "zeros"),
    ]


def write_checkpoint(path, rng):
    """GPT-2's init: weights normal(0, 0.02), LayerNorm scale 1, biases 0; the padded wte rows 0
    as llm.c's own export writes them. One tensor at a time: the file is ~0.5 GB of fp32."""
    count = 0
    with open(path, "wb") as f:
        f.write(header(MODEL_MAGIC, MODEL_VERSION, MAX_T, V, L, NH, C, VP))
        for name, shape, init in parameter_tensors():
            if init == "normal":
                t = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
            else:
                t = (np.ones if init == "ones" else np.zeros)(shape, dtype=np.float32)
            if name == "wte":
                t[V:] = 0.0
            f.write(t.tobytes())
            count += t.size
    return count


def write_tokens(path, n, rng):
    with open(path, "wb") as f:
        f.write(header(TOKENS_MAGIC, TOKENS_VERSION, n))
        f.write(rng.integers(0, V, size=n, dtype=np.uint16).tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=pathlib.Path, help="train_gpt2's working directory")
    ap.add_argument("--tokens", type=int, default=65536,
                    help="tokens per file (a batch takes B*T+1 = 257; the loader wraps around)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.tokens < 4 * 64 + 1:
        ap.error(f"--tokens {a.tokens}: expected at least 257 (one B 4 x T 64 batch and its target)")
    rng = np.random.default_rng(a.seed)
    data = a.dir / "dev" / "data" / "tinyshakespeare"
    data.mkdir(parents=True, exist_ok=True)
    n = write_checkpoint(a.dir / "gpt2_124M.bin", rng)
    for split in ("train", "val"):
        write_tokens(data / f"tiny_shakespeare_{split}.bin", a.tokens, rng)
    assert n == 124475904, n  # the num_parameters train_gpt2 prints for GPT-2 124M at Vp 50304
    print(f"llmc_fixture: {a.dir}/gpt2_124M.bin ({n} parameters, Vp {VP}), "
          f"{a.tokens} random tokens per split in {data}")


if __name__ == "__main__":
    main()
