#!/usr/bin/env python3
"""Text corpora -> train/val token shards in llm.c's format, plus the decode table eco-train prints with.

  python data/prepare.py --input FILE|GLOB... --out DIR
      --tokenizer {bytes,bpe,gpt2,sentencepiece,hf} [--tokenizer-model PATH] [--eot-token STR]
      [--vocab-size N (bpe)] [--bpe-train-chars N]
      [--format {auto,text,lines,jsonl}] [--json-field text | a+b]
      [--val-fraction 0.1 [--split-seed 0] | --val-input FILE|GLOB...]
      [--shard-tokens 100000000] [--workers auto|N] [--force]

Streams: inputs are read a line at a time (gzip too, by .gz suffix or magic), encoded in batches
of about BATCH_CHARS and appended to shards that are closed as they fill, so memory does not grow
with the corpus (data/corpus_reader.py says what a document is in each --format). Documents go
in the order of the --input files; each is followed by the tokenizer's end-of-text id
(data/tokenizer_backends.py lists them; bytes has none and keeps the text's own separator).

Workers: --workers N encodes on N processes, one thread each: this one (which also reads the
inputs and writes the shards) and N - 1 spawned workers, each building its own tokenizer. Batches
of about WORKER_BATCH_CHARS go to the workers in input order, this process encoding one itself
whenever the workers are busy; at most 8 x N are queued, and their tokens are written in input
order, so the output is byte for byte the same for every N (data/encode_workers.py). auto (the
default) is one per core this process may run on, at most MAX_AUTO (each worker holds its own
tokenizer) and at most one per AUTO_WORKER_BYTES of input (starting a worker costs about what
encoding a few MB does, so a small input stays in one process). A re-run that differs only in
--workers is a no-op.

Split: document i of --input goes to val when splitmix64(seed, i) / 2^64 < --val-fraction, so
the split is by document, deterministic, and the same for every tokenizer. With --val-input the
whole of --input is train and the whole of those files is val (corpora that ship their own
heldout split, e.g. LM1B). The BPE tokenizer is trained on the first --bpe-train-chars of the
train documents only, so val stays unseen.

Writes to DIR: train_000000.bin ... val_000000.bin ... (data/shard_writer.py), decode_table.bin,
meta.json (tokenizer, vocab, end-of-text id, token and document counts, inputs, arguments) and
tokenizer.json (bpe only). A progress line (bytes read / total, tokens, tokens/s, MB/s, ETA) goes
to stderr.

Re-running with the same arguments is a no-op when every output exists and is newer than the
inputs (--force rebuilds). Exit codes: 0 ok, 1 tokenizer unavailable or a worker process died,
2 usage, 3 bad input (a document the tokenizer cannot encode included).
"""
import argparse
import glob
import json
import os
import sys
import time


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus_reader import InputError, InputFile, detect_format, documents, expand_inputs  # noqa: E402
from encode_workers import DocumentError, Encoder, WorkerDied, not_text  # noqa: E402
from shard_writer import ShardWriter, write_decode_table  # noqa: E402
import tokenizer_backends as tb  # noqa: E402

META_FORMAT = "ecotrain-shards-2"
BATCH_CHARS = 4 << 20
WORKER_BATCH_CHARS = 256 << 10
MAX_AUTO = 8
AUTO_WORKER_BYTES = 8 << 20
MASK64 = (1 << 64) - 1


def fail(message, code=3):
    print(f"prepare.py: error: {message}", file=sys.stderr)
    sys.exit(code)


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


class Splitter:
    """Which split document i of --input goes to: a pure function of (seed, i, fraction)."""

    def __init__(self, fraction, seed):
        self.threshold = int(fraction * 2.0**64)
        self.seed = splitmix64(seed & MASK64)

    def __call__(self, i):
        return "val" if splitmix64(self.seed ^ i) < self.threshold else "train"


def document_stream(paths, fmt, fields, strict_utf8, split_of, on_file=None):
    """(text, end, split, where) for every piece of every document of `paths`, in order; split_of
    maps a document's index (counted over all the paths) to its split, and where is the
    document's (path, format, number in the file, line it starts on)."""
    index = 0
    for path in paths:
        f = InputFile(path, strict_utf8)
        if on_file is not None:
            on_file(f)
        start, number, form = True, 0, detect_format(path, fmt)
        for text, end in documents(f, form, fields):
            if start:
                split = split_of(index)
                index += 1
                number += 1
                where = (path, form, number, f.line)
            yield text, end, split, where
            start = end is not None


def document_name(where):
    """How an error names a document: file:line for JSON lines and lines, else its paragraph."""
    path, form, number, line = where
    return f"{path}: paragraph {number}" if form == "text" else f"{path}:{line}"


def bpe_sample(paths, fmt, fields, split_of, budget):
    """Train-document text, up to `budget` chars, for training the BPE."""
    seen = 0
    for text, _, split, where in document_stream(paths, fmt, fields, True, split_of):
        if split != "train":
            continue
        problem = not_text(text)
        if problem is not None:
            raise InputError(f"{document_name(where)}: the bpe tokenizer cannot train on this document: "
                             f"{problem}")
        yield text
        seen += len(text)
        if seen >= budget:
            return


class Progress:
    """bytes read / total, tokens, tokens/s, MB/s, ETA on stderr: redrawn in place on a terminal,
    else a line every INTERVAL seconds. `done` is the bytes read for the tokens written so far."""
    INTERVAL = 10.0

    def __init__(self, total_bytes):
        self.total, self.done_before, self.file = total_bytes, 0, None
        self.t0 = self.last = time.time()
        self.tty = sys.stderr.isatty()
        self.printed = False

    def next_file(self, f):
        if self.file is not None:
            self.done_before += self.file.size
        self.file = f

    def position(self):
        return self.done_before + (self.file.position if self.file else 0)

    def update(self, tokens, done, final=False):
        now = time.time()
        if not final and now - self.last < (0.5 if self.tty else self.INTERVAL):
            return
        self.last = now
        elapsed = max(now - self.t0, 1e-9)
        rate = done / elapsed
        eta = (self.total - done) / rate if rate > 0 else 0
        line = (f"prepare.py: {done / 1e6:,.1f}/{self.total / 1e6:,.1f} MB "
                f"({100 * done / max(self.total, 1):.0f}%), {tokens:,} tokens, "
                f"{tokens / elapsed:,.0f} tokens/s, {rate / 1e6:.2f} MB/s, ETA {int(eta) // 60}m{int(eta) % 60:02d}s")
        if self.tty:
            print("\r" + line + "\033[K", end="\n" if final else "", file=sys.stderr, flush=True)
        elif not final or self.printed:
            print(line, file=sys.stderr, flush=True)
        self.printed = True


# ---- idempotence -----------------------------------------------------------------------------


def file_entry(path):
    return {"path": os.path.abspath(path), "bytes": os.path.getsize(path)}


def request_of(args, inputs, val_inputs):
    """The arguments that decide the output; a re-run with the same request may skip work."""
    request = {"inputs": [file_entry(p) for p in inputs], "val_inputs": [file_entry(p) for p in val_inputs],
               "format": args.format, "json_field": args.json_field, "tokenizer": args.tokenizer,
               "tokenizer_model": None, "eot_token": args.eot_token, "requested_vocab_size": args.vocab_size,
               "val_fraction": args.val_fraction, "split_seed": args.split_seed,
               "shard_tokens": args.shard_tokens}
    if args.tokenizer_model is not None and os.path.exists(args.tokenizer_model):
        request["tokenizer_model"] = os.path.abspath(args.tokenizer_model)
    if args.tokenizer == "bpe":
        request["bpe_train_chars"] = args.bpe_train_chars
    return request


def up_to_date(out_dir, request):
    """meta.json if every output exists, is newer than the inputs and was made by this request."""
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
    sources = [e["path"] for e in request["inputs"] + request["val_inputs"]]
    if request["tokenizer_model"] is not None:
        sources.append(request["tokenizer_model"])
    newest = max(os.path.getmtime(p) for p in sources)
    for name in files:
        path = os.path.join(out_dir, name)
        if not os.path.isfile(path) or os.path.getmtime(path) < newest:
            return None
    return meta


def summary(out_dir, split, info, version, seconds=None):
    n = len(info["shards"])
    dtype = "uint16" if version == 1 else "uint32"
    took = f" in {seconds:.2f}s" if seconds is not None else " (up to date)"
    return (f"prepare.py: {split}: {info['tokens']:,} tokens ({dtype}) from {info['documents']:,} documents, "
            f"{info['chars']:,} chars in {n} shard{'s' if n != 1 else ''} -> "
            f"{os.path.join(out_dir, split + '_*.bin')}{took}")


# ---- main ------------------------------------------------------------------------------------


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--input", required=True, nargs="+", action="extend",
                   help="text / JSON-lines files or globs, gzip or not, read in this order")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--tokenizer", required=True, choices=["bytes", "bpe", "gpt2", "sentencepiece", "hf"])
    p.add_argument("--tokenizer-model", help="sentencepiece: the .model; hf: tokenizer.json; "
                   "gpt2: a folder with encoder.json and vocab.bpe (default: tiktoken's download)")
    p.add_argument("--eot-token", help="the end-of-text token (sentencepiece, hf; default: the model's)")
    p.add_argument("--vocab-size", type=int, help="vocabulary size to train (bpe, >= 257)")
    p.add_argument("--bpe-train-chars", type=int, default=64 << 20,
                   help="train the BPE on the first N chars of the train documents (default 64 Mi)")
    p.add_argument("--format", default="auto", choices=["auto", "text", "lines", "jsonl"],
                   help="text: paragraphs are documents; lines: one per line; jsonl: one JSON object "
                   "per line; auto (default): jsonl for *.json[l][.gz], else text")
    p.add_argument("--json-field", default="text",
                   help="jsonl: the string field that is the document, or fields joined as a+b")
    p.add_argument("--val-fraction", type=float, help="fraction of the documents for val (default 0.1)")
    p.add_argument("--split-seed", type=int, default=0, help="seed of the document split")
    p.add_argument("--val-input", nargs="+", action="extend",
                   help="files that are the whole val split (--input is all train)")
    p.add_argument("--shard-tokens", type=int, default=100_000_000, help="max tokens per shard")
    p.add_argument("--workers", default="auto",
                   help="processes that encode: N, or auto (default): one per usable core, at most "
                   f"{MAX_AUTO} and one per {AUTO_WORKER_BYTES >> 20} MiB of input; the output is the "
                   "same for every N")
    p.add_argument("--force", action="store_true", help="rebuild even if the outputs are up to date")
    args = p.parse_args()

    if args.tokenizer == "bpe":
        if args.vocab_size is None or args.vocab_size < 257:
            p.error("--tokenizer bpe needs --vocab-size >= 257 (the byte alphabet and <|endoftext|>)")
        if args.bpe_train_chars < 1:
            p.error(f"--bpe-train-chars {args.bpe_train_chars} must be >= 1")
    elif args.vocab_size is not None:
        fixed = {"bytes": 256, "gpt2": 50257}.get(args.tokenizer)
        if fixed is None:
            p.error(f"--vocab-size: --tokenizer {args.tokenizer} takes its vocab from --tokenizer-model")
        if args.vocab_size != fixed:
            p.error(f"--vocab-size {args.vocab_size}: --tokenizer {args.tokenizer} has a fixed vocab of {fixed}")
    if args.tokenizer in ("sentencepiece", "hf") and args.tokenizer_model is None:
        p.error(f"--tokenizer {args.tokenizer} needs --tokenizer-model PATH")
    if args.tokenizer_model is not None and args.tokenizer in ("bytes", "bpe"):
        p.error(f"--tokenizer-model: --tokenizer {args.tokenizer} takes none")
    if args.eot_token is not None and args.tokenizer not in ("sentencepiece", "hf"):
        p.error(f"--eot-token: --tokenizer {args.tokenizer} has a fixed end-of-text token")
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
    most = 4 * (os.cpu_count() or 1)
    if args.workers != "auto":
        try:
            args.workers = int(args.workers)
        except ValueError:
            p.error(f"--workers {args.workers!r}: expected a whole number in [1, {most}] or auto")
        if not 1 <= args.workers <= most:
            p.error(f"--workers {args.workers} must be in [1, {most}] (4 x the cores) or auto")
    args.fields = args.json_field.split("+")
    if not all(args.fields):
        p.error(f"--json-field {args.json_field!r}: empty field name")
    return args


def make_tokenizer(args, inputs, split_of):
    if args.tokenizer == "bytes":
        return tb.BytesTokenizer()
    if args.tokenizer == "bpe":
        print(f"prepare.py: training the BPE on up to {args.bpe_train_chars:,} chars of the train documents",
              file=sys.stderr, flush=True)
        sample = bpe_sample(inputs, args.format, args.fields, split_of, args.bpe_train_chars)
        try:
            return tb.BpeTokenizer(sample, args.vocab_size)
        finally:
            sample.close()
    if args.tokenizer == "gpt2":
        return tb.Gpt2Tokenizer(args.tokenizer_model)
    if args.tokenizer == "sentencepiece":
        return tb.SentencePieceTokenizer(args.tokenizer_model, args.eot_token)
    return tb.HfTokenizer(args.tokenizer_model, args.eot_token)


def worker_count(requested, total_bytes):
    """--workers as a number: auto is one per core this process may run on, at most MAX_AUTO and
    at most one per AUTO_WORKER_BYTES of input."""
    if requested != "auto":
        return requested
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(cores, MAX_AUTO, total_bytes // AUTO_WORKER_BYTES))


def convert(args, tok, inputs, val_inputs, split_of, out_dir, version, workers):
    """Stream every input into the shard writers; returns the per-split info for meta.json."""
    splits = ["train"] + (["val"] if val_inputs or args.val_fraction > 0 else [])
    writers = {s: ShardWriter(out_dir, s, args.shard_tokens, version) for s in splits}
    stats = {s: {"documents": 0, "chars": 0} for s in splits}
    progress = Progress(sum(os.path.getsize(p) for p in inputs + val_inputs))
    streams = [(inputs, split_of), (val_inputs, lambda i: "val")]
    batch_chars = BATCH_CHARS if workers == 1 else WORKER_BATCH_CHARS
    batch, wheres, size = [], [], 0

    def write(done):  # (tag, {split: tokens}) in input order; the tag is (wheres, bytes read)
        for (_, position), result in done:
            for split, tokens in result.items():
                writers[split].write(tokens)
            progress.update(sum(w.tokens for w in writers.values()), position)

    encoder = Encoder(tok, writers["train"].dtype, workers)
    try:
        for paths, route in streams:
            pieces = document_stream(paths, args.format, args.fields, tok.name != "bytes", route,
                                     on_file=progress.next_file)
            for text, end, split, where in pieces:
                batch.append((text, end, split))
                wheres.append(where)
                size += len(text)
                stats[split]["chars"] += len(text) + (len(end) if end and tok.eot is None else 0)
                stats[split]["documents"] += end is not None
                if size >= batch_chars:
                    write(encoder.submit(batch, (wheres, progress.position())))
                    batch, wheres, size = [], [], 0
        if batch:
            write(encoder.submit(batch, (wheres, progress.position())))
        write(encoder.finish())
        progress.update(sum(w.tokens for w in writers.values()), progress.position(), final=True)
    except BaseException as e:
        encoder.close()
        for w in writers.values():
            w.abandon()
            for name in w.names:
                os.remove(os.path.join(out_dir, name))
        if isinstance(e, DocumentError):
            raise InputError(f"{document_name(e.tag[0][e.index])}: the {tok.name} tokenizer cannot encode "
                             f"this document: {e.detail}") from None
        raise
    encoder.close()
    return {s: {"tokens": writers[s].tokens, **stats[s], "shards": writers[s].close()} for s in splits}


def main():
    args = parse_args()
    try:
        inputs = expand_inputs(args.input)
        val_inputs = expand_inputs(args.val_input) if args.val_input else []
    except InputError as e:
        fail(str(e))
    out_dir = args.out
    request = request_of(args, inputs, val_inputs)
    meta = None if args.force else up_to_date(out_dir, request)
    if meta is not None:
        for split, info in meta["splits"].items():
            print(summary(out_dir, split, info, meta["token_version"]))
        return

    t_start = time.time()
    split_of = Splitter(args.val_fraction, args.split_seed)
    try:
        tok = make_tokenizer(args, inputs, split_of)
    except tb.TokenizerError as e:
        fail(str(e), code=1)
    except InputError as e:
        fail(str(e))
    t_tokenizer = time.time() - t_start

    os.makedirs(out_dir, exist_ok=True)
    # Until meta.json is rewritten the outputs are incomplete; and a previous run may have written
    # more shards, or a val split this one does not have.
    for pattern in ("meta.json", "tokenizer.json", "train_*.bin", "val_*.bin", "*.tmp"):
        for stale in glob.glob(os.path.join(out_dir, pattern)):
            os.remove(stale)
    version = 1 if tok.vocab_size <= 65535 else 2
    # One encoding thread per process (the BPE above trained on all of them); --workers is the
    # parallelism. An explicit TOKENIZERS_PARALLELISM is kept, and spawned workers inherit it.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    workers = worker_count(args.workers, sum(os.path.getsize(p) for p in inputs + val_inputs))
    t_convert = time.time()
    try:
        splits = convert(args, tok, inputs, val_inputs, split_of, out_dir, version, workers)
    except InputError as e:
        fail(str(e))
    except tb.TokenizerError as e:
        fail(str(e), code=1)
    except WorkerDied as e:
        fail(str(e), code=1)
    t_convert = time.time() - t_convert
    meta = {"format": META_FORMAT, "request": request, "tokenizer": tok.name, "vocab_size": tok.vocab_size,
            **tok.describe(), "inputs": [os.path.abspath(p) for p in inputs],
            "val_inputs": [os.path.abspath(p) for p in val_inputs],
            "source": os.path.abspath(inputs[0]) if len(inputs) == 1 else None,
            "val_fraction": args.val_fraction, "split_seed": args.split_seed,
            "token_version": version, "splits": splits}
    if args.tokenizer == "bpe":
        meta["bpe_trained_on"] = f"the first {args.bpe_train_chars:,} chars of the train documents"
    write_decode_table(os.path.join(out_dir, "decode_table.bin"), tok.token_bytes())
    tok.save(out_dir)
    meta["seconds"] = {"tokenizer": round(t_tokenizer, 3), "encode": round(t_convert, 3),
                       "total": round(time.time() - t_start, 3)}
    # meta.json last: its presence marks a complete output for the next run's up-to-date check.
    with open(os.path.join(out_dir, "meta.json.tmp"), "w") as f:
        f.write(json.dumps(meta, indent=2) + "\n")
    os.replace(os.path.join(out_dir, "meta.json.tmp"), os.path.join(out_dir, "meta.json"))
    for split, info in splits.items():
        print(summary(out_dir, split, info, version, meta["seconds"]["total"]))
        if not info["shards"]:
            print(f"prepare.py: warning: {split} split is empty; no {split} shard written")
    tokens = sum(info["tokens"] for info in splits.values())
    print(f"prepare.py: {tok.name} tokenizer, vocab {tok.vocab_size}, end-of-text id {tok.eot}: {out_dir} "
          f"written in {time.time() - t_start:.2f}s (tokenizer {t_tokenizer:.2f}s, encoding "
          f"{tokens / max(t_convert, 1e-9):,.0f} tokens/s on {workers} worker{'s' if workers != 1 else ''})")


if __name__ == "__main__":
    main()
