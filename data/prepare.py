#!/usr/bin/env python3
"""Text -> train/val token shards in llm.c's format, plus the decode table eco-train prints with.

  python data/prepare.py --input FILE --out DIR --tokenizer {bytes,bpe,gpt2}
                         [--vocab-size N (bpe)] [--val-fraction 0.1 | --val-input FILE]
                         [--shard-tokens 100000000]

Split: the first (1 - f) of the text (in characters) is train, the last f is val; each part is
tokenized on its own. With --val-input the whole of --input is train and the whole of that file
is val (corpora that ship their own heldout split, e.g. LM1B). The BPE tokenizer is trained on
the train part only, so val stays unseen.

Writes to DIR:
  train_000000.bin ...  val_000000.bin ...   256 x int32 header (magic 20240520, version, count),
      then the tokens little-endian: version 1 = uint16 (llm.c), 2 = uint32 (vocab > 65535).
      A split's tokens are spread evenly over ceil(count / shard_tokens) shards, so no shard is a
      tiny tail that the loader would have to reject.
  decode_table.bin   uint32 magic 0x45434F44 ("ECOD"), uint32 vocab_size, then per token id:
      uint32 byte_length, that many raw bytes.
  meta.json          tokenizer, vocab size, token counts, source file, split, arguments.
  tokenizer.json     (bpe only) the trained HF tokenizer.

Re-running with the same arguments is a no-op when every output exists and is newer than the
input (--force rebuilds). Exit codes: 0 ok, 1 tokenizer unavailable, 2 usage, 3 bad input.
"""
import argparse
import glob
import json
import os
import struct
import sys
import time

import numpy as np

SHARD_MAGIC = 20240520
DECODE_MAGIC = 0x45434F44
HEADER_INTS = 256
META_FORMAT = "ecotrain-shards-1"


def fail(message, code=3):
    print(f"prepare.py: error: {message}", file=sys.stderr)
    sys.exit(code)


# ---- tokenizers ------------------------------------------------------------------------------
# Each one: .name, .vocab_size, .encode(str) -> np.uint32 array, .token_bytes() -> list of bytes
# (index = token id), .save(out_dir) for anything beyond the decode table.


def text_chunks(text, target_chars=1 << 20):
    """Split text only where a newline is followed by an ASCII letter or digit. The GPT-2 / ByteLevel
    pre-tokenizer regex always breaks there and BPE never merges across pre-tokens, so encoding
    the chunks separately (and in parallel) gives exactly the tokens of encoding the whole text."""
    start = 0
    while len(text) - start > target_chars:
        cut = start + target_chars
        while True:
            cut = text.find("\n", cut)
            if cut < 0 or cut + 1 >= len(text) or (text[cut + 1].isascii() and text[cut + 1].isalnum()):
                break
            cut += 1
        if cut < 0 or cut + 1 >= len(text):
            break
        yield text[start:cut + 1]
        start = cut + 1
    if start < len(text):
        yield text[start:]


class BytesTokenizer:
    name = "bytes"
    vocab_size = 256

    def encode(self, text):
        return np.frombuffer(text.encode("utf-8", "surrogateescape"), dtype=np.uint8).astype(np.uint32)

    def token_bytes(self):
        return [bytes([i]) for i in range(256)]

    def save(self, out_dir):
        pass


def gpt2_bytes_to_unicode():
    """GPT-2's reversible byte -> printable unicode map, used by ByteLevel BPE vocabularies."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class BpeTokenizer:
    name = "bpe"

    def __init__(self, train_text, vocab_size):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        self.tok = Tokenizer(models.BPE())
        self.tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        self.tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        self.tok.train_from_iterator(text_chunks(train_text), trainer=trainer)
        self.vocab_size = self.tok.get_vocab_size()

    def encode(self, text):
        parts = [np.asarray(e.ids, dtype=np.uint32) for e in self.tok.encode_batch(list(text_chunks(text)))]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)

    def token_bytes(self):
        byte_of = {c: b for b, c in gpt2_bytes_to_unicode().items()}
        return [bytes(byte_of[c] for c in self.tok.id_to_token(i)) for i in range(self.vocab_size)]

    def save(self, out_dir):
        self.tok.save(os.path.join(out_dir, "tokenizer.json"))


class Gpt2Tokenizer:
    name = "gpt2"

    def __init__(self):
        try:
            import tiktoken
            self.enc = tiktoken.get_encoding("gpt2")
        except Exception as e:  # offline: tiktoken downloads its BPE files on first use
            fail(f"tiktoken could not load the GPT-2 encoding ({type(e).__name__}: {e}). It downloads "
                 "its files on first use; offline, point TIKTOKEN_CACHE_DIR at a cache that holds "
                 "them, or use --tokenizer bpe or bytes", code=1)
        self.vocab_size = self.enc.n_vocab

    def encode(self, text):
        parts = [np.asarray(ids, dtype=np.uint32) for ids in self.enc.encode_ordinary_batch(list(text_chunks(text)))]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)

    def token_bytes(self):
        return [self.enc.decode_single_token_bytes(i) for i in range(self.vocab_size)]

    def save(self, out_dir):
        pass


# ---- output files ----------------------------------------------------------------------------


def write_atomically(path, chunks):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        for c in chunks:
            f.write(c)
    os.replace(tmp, path)


def write_shard(path, tokens, version):
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:3] = [SHARD_MAGIC, version, len(tokens)]
    body = tokens.astype("<u2" if version == 1 else "<u4", copy=False)
    write_atomically(path, [header.tobytes(), body.tobytes()])


def write_decode_table(path, token_bytes):
    out = [struct.pack("<II", DECODE_MAGIC, len(token_bytes))]
    for b in token_bytes:
        out += [struct.pack("<I", len(b)), b]
    write_atomically(path, out)


def split_shards(tokens, shard_tokens):
    """ceil(n / shard_tokens) shards of near-equal size (none empty unless n == 0)."""
    if len(tokens) == 0:
        return []
    count = -(-len(tokens) // shard_tokens)
    return np.array_split(tokens, count)


# ---- idempotence -----------------------------------------------------------------------------


def request_of(args, source, val_source):
    """The arguments that decide the output; a re-run with the same request may skip work."""
    request = {"source": source, "source_bytes": os.path.getsize(source), "tokenizer": args.tokenizer,
               "requested_vocab_size": args.vocab_size, "val_fraction": args.val_fraction,
               "shard_tokens": args.shard_tokens}
    if val_source is not None:  # absent otherwise, so earlier outputs stay up to date
        request.update(val_source=val_source, val_source_bytes=os.path.getsize(val_source))
    return request


def up_to_date(out_dir, request):
    """meta.json if every output exists, is newer than the input and was made by this request."""
    try:
        with open(os.path.join(out_dir, "meta.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    if meta.get("format") != META_FORMAT or meta.get("request") != request:
        return None
    files = ["meta.json", "decode_table.bin"] + (["tokenizer.json"] if meta["tokenizer"] == "bpe" else [])
    for split in ("train", "val"):
        shards = meta["splits"].get(split, {}).get("shards", [])
        present = sorted(os.path.basename(p) for p in glob.glob(os.path.join(out_dir, f"{split}_*.bin")))
        if present != shards:
            return None
        files += shards
    source_mtime = max(os.path.getmtime(request[k]) for k in ("source", "val_source") if k in request)
    for name in files:
        path = os.path.join(out_dir, name)
        if not os.path.isfile(path) or os.path.getmtime(path) < source_mtime:
            return None
    return meta


def summary(out_dir, split, info, version, seconds=None):
    n = len(info["shards"])
    dtype = "uint16" if version == 1 else "uint32"
    took = f" in {seconds:.2f}s" if seconds is not None else " (up to date)"
    return (f"prepare.py: {split}: {info['tokens']:,} tokens ({dtype}) from {info['chars']:,} chars in "
            f"{n} shard{'s' if n != 1 else ''} -> {os.path.join(out_dir, split + '_*.bin')}{took}")


# ---- main ------------------------------------------------------------------------------------


def read_text(path, given, tokenizer):
    with open(path, "rb") as f:
        raw = f.read()
    # surrogateescape keeps any invalid UTF-8 byte, so the bytes tokenizer sees the file exactly.
    text = raw.decode("utf-8", "surrogateescape")
    if tokenizer != "bytes":
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            bad = len(text[:e.start].encode("utf-8", "surrogateescape"))
            fail(f"{given}: not valid UTF-8 at byte {bad}; --tokenizer {tokenizer} needs "
                 "UTF-8 text (--tokenizer bytes accepts any bytes)")
    return text


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--input", required=True, help="UTF-8 text file")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--tokenizer", required=True, choices=["bytes", "bpe", "gpt2"])
    p.add_argument("--vocab-size", type=int, help="vocabulary size to train (bpe, >= 256)")
    p.add_argument("--val-fraction", type=float, help="last fraction of the text for val (default 0.1)")
    p.add_argument("--val-input", help="UTF-8 text file that is the whole val split (--input is all train)")
    p.add_argument("--shard-tokens", type=int, default=100_000_000, help="max tokens per shard")
    p.add_argument("--force", action="store_true", help="rebuild even if the outputs are up to date")
    args = p.parse_args()

    if args.tokenizer == "bpe":
        if args.vocab_size is None or args.vocab_size < 256:
            p.error("--tokenizer bpe needs --vocab-size >= 256 (the byte alphabet)")
    elif args.vocab_size is not None:
        fixed = {"bytes": 256, "gpt2": 50257}[args.tokenizer]
        if args.vocab_size != fixed:
            p.error(f"--vocab-size {args.vocab_size}: --tokenizer {args.tokenizer} has a fixed vocab of {fixed}")
    if args.val_input is not None:
        if args.val_fraction is not None:
            p.error("--val-input and --val-fraction exclude each other (--val-input is the whole val split)")
        args.val_fraction = 0.0
    elif args.val_fraction is None:
        args.val_fraction = 0.1
    if not 0.0 <= args.val_fraction < 1.0:
        p.error(f"--val-fraction {args.val_fraction} must be in [0, 1)")
    if not 1 <= args.shard_tokens <= 2**31 - 1:
        p.error(f"--shard-tokens {args.shard_tokens} must be in [1, 2^31 - 1] (int32 header count)")

    source = os.path.abspath(args.input)
    val_source = os.path.abspath(args.val_input) if args.val_input is not None else None
    for given, path in ((args.input, source), (args.val_input, val_source)):
        if path is None:
            continue
        if not os.path.exists(path):
            fail(f"input file not found: {given}")
        if not os.path.isfile(path):
            fail(f"input is not a regular file: {given}")
    out_dir = args.out
    request = request_of(args, source, val_source)

    meta = None if args.force else up_to_date(out_dir, request)
    if meta is not None:
        for split, info in meta["splits"].items():
            print(summary(out_dir, split, info, meta["token_version"]))
        return

    t_start = time.time()
    text = read_text(source, args.input, args.tokenizer)
    n_val = int(round(len(text) * args.val_fraction))
    parts = {"train": text[:len(text) - n_val], "val": text[len(text) - n_val:]}
    if val_source is not None:
        parts["val"] = read_text(val_source, args.val_input, args.tokenizer)
    elif args.val_fraction == 0.0:
        del parts["val"]

    t0 = time.time()
    if args.tokenizer == "bytes":
        tok = BytesTokenizer()
    elif args.tokenizer == "bpe":
        tok = BpeTokenizer(parts["train"], args.vocab_size)
    else:
        tok = Gpt2Tokenizer()
    t_tokenizer = time.time() - t0

    os.makedirs(out_dir, exist_ok=True)
    # Until meta.json is rewritten the outputs are incomplete; and a previous run may have written
    # more shards, or a val split this one does not have.
    for pattern in ("meta.json", "tokenizer.json", "train_*.bin", "val_*.bin"):
        for stale in glob.glob(os.path.join(out_dir, pattern)):
            os.remove(stale)
    version = 1 if tok.vocab_size <= 65535 else 2
    meta = {"format": META_FORMAT, "request": request, "tokenizer": tok.name, "vocab_size": tok.vocab_size,
            "source": source, "val_source": val_source, "val_fraction": args.val_fraction,
            "token_version": version, "splits": {}}
    if args.tokenizer == "bpe":
        meta["bpe_trained_on"] = "train split"
    lines = []
    for split, part in parts.items():
        t0 = time.time()
        tokens = tok.encode(part)
        assert len(tokens) == 0 or int(tokens.max()) < tok.vocab_size
        names = []
        for i, shard in enumerate(split_shards(tokens, args.shard_tokens)):
            names.append(f"{split}_{i:06d}.bin")
            write_shard(os.path.join(out_dir, names[-1]), shard, version)
        info = {"tokens": int(len(tokens)), "chars": len(part), "shards": names}
        meta["splits"][split] = info
        lines.append(summary(out_dir, split, info, version, time.time() - t0))
        if not names:
            lines.append(f"prepare.py: warning: {split} split is empty; no {split} shard written")
    write_decode_table(os.path.join(out_dir, "decode_table.bin"), tok.token_bytes())
    tok.save(out_dir)
    meta["seconds"] = {"tokenizer": round(t_tokenizer, 3), "total": round(time.time() - t_start, 3)}
    # meta.json last: its presence marks a complete output for the next run's up-to-date check.
    write_atomically(os.path.join(out_dir, "meta.json"), [json.dumps(meta, indent=2).encode() + b"\n"])
    for line in lines:
        print(line)
    print(f"prepare.py: {tok.name} tokenizer, vocab {tok.vocab_size}: {out_dir} written in "
          f"{time.time() - t_start:.2f}s (tokenizer {t_tokenizer:.2f}s)")


if __name__ == "__main__":
    main()
