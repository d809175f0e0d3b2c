"""The tokenizers data/prepare.py writes shards with, behind one small interface.

Each has .name, .vocab_size, .eot (the end-of-text id written after every document, or None),
.encode_batch(list of str) -> list of id sequences, .token_bytes() -> list of bytes (index = id,
for the decode table), .save(out_dir) for anything beyond the decode table, and .describe() for
meta.json. Encoding never adds special tokens (BOS/EOS): the end-of-text id is added by
prepare.py, once per document. Encoding runs on one thread: prepare.py's --workers processes are
the parallelism. .spec() is a picklable description that from_spec() turns back into the same
tokenizer in another process (the trained BPE travels as its tokenizer.json text).

  bytes          vocab 256, no end-of-text id: a document's own separator (its newline, a
                 paragraph's blank lines) is written instead, so the shards give the text back.
  bpe            byte-level BPE trained here; id 0 is <|endoftext|>.
  gpt2           GPT-2's BPE (50,257 ids, <|endoftext|> = 50256) through tiktoken, from
                 encoder.json + vocab.bpe (--tokenizer-model) or tiktoken's own download/cache.
  sentencepiece  a SentencePiece .model (T5: 32,000 pieces, </s> = 1); the model's EOS id.
  hf             a Hugging Face tokenizer.json; the first of <|endoftext|>, </s>, <eos>,
                 <|end_of_text|> it knows (or --eot-token).
"""
import errno
import glob
import json
import os
import re
import stat

import numpy as np

ENDOFTEXT = "<|endoftext|>"
HF_EOT_CANDIDATES = (ENDOFTEXT, "</s>", "<eos>", "<|end_of_text|>")


class TokenizerError(Exception):
    """The tokenizer cannot be loaded (missing package or model file); exit code 1."""


def need(module, why):
    try:
        return __import__(module)
    except ImportError:
        raise TokenizerError(f"the Python package '{module}' is needed for {why} "
                             "(scripts/install_deps.sh installs it)") from None


def path_kind(path):
    """What is at path when it is not a regular file: 'a directory', 'a FIFO', 'a symbolic link
    loop', ...; None for a regular file (symlinks followed). Only stat: a FIFO is never opened."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "a symbolic link loop"
        if os.path.islink(path):
            return f"a dangling symbolic link (to {os.readlink(path)})"
        return "missing" if e.errno == errno.ENOENT else f"unreadable ({e.strerror})"
    for test, kind in ((stat.S_ISREG, None), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def model_file(path, what, expected, pattern=None):
    """path, which must be a regular file: `expected` says which (e.g. 'a SentencePiece .model
    file'); for a directory, the files in it matching the glob `pattern` are named."""
    if path is None:
        raise TokenizerError(f"{what} needs --tokenizer-model PATH")
    kind = path_kind(path)
    if kind == "missing":
        raise TokenizerError(f"tokenizer model not found: {path} ({what} expects {expected})")
    if kind is not None:
        hint = ""
        if kind == "a directory" and pattern is not None:
            inside = sorted(glob.glob(os.path.join(glob.escape(path), pattern)))[:3]
            if inside:
                hint = f"; it holds {', '.join(inside)}: name that file"
        raise TokenizerError(f"tokenizer model {path} is {kind}, not a file ({what} expects "
                             f"{expected}{hint})")
    return os.path.abspath(path)


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


BYTE_OF_UNICODE = {c: b for b, c in gpt2_bytes_to_unicode().items()}
BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def from_spec(spec):
    """The tokenizer that .spec() described (built in a --workers process)."""
    kind, *args = spec
    if kind == "bpe":
        return BpeTokenizer.from_json(*args)
    return {"bytes": BytesTokenizer, "gpt2": Gpt2Tokenizer, "sentencepiece": SentencePieceTokenizer,
            "hf": HfTokenizer}[kind](*args)


class BytesTokenizer:
    name = "bytes"
    vocab_size = 256
    eot = None

    def spec(self):
        return ("bytes",)

    def encode_batch(self, texts):
        return [np.frombuffer(t.encode("utf-8", "surrogateescape"), dtype=np.uint8) for t in texts]

    def token_bytes(self):
        return [bytes([i]) for i in range(256)]

    def save(self, out_dir):
        pass

    def describe(self):
        return {"eot": None}


class BpeTokenizer:
    """Byte-level BPE (GPT-2's pre-tokenizer) trained on `texts`, an iterator the caller bounds."""
    name = "bpe"

    def __init__(self, texts, vocab_size):
        tk = need("tokenizers", "--tokenizer bpe")
        self.tok = tk.Tokenizer(tk.models.BPE())
        self.tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
        self.tok.decoder = tk.decoders.ByteLevel()
        trainer = tk.trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[ENDOFTEXT],
                                         initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
                                         show_progress=False)
        self.tok.train_from_iterator(texts, trainer=trainer)
        self.vocab_size = self.tok.get_vocab_size()
        self.eot = self.tok.token_to_id(ENDOFTEXT)

    @classmethod
    def from_json(cls, text):
        """The trained tokenizer again, from its tokenizer.json text (.spec())."""
        tk = need("tokenizers", "--tokenizer bpe")
        self = cls.__new__(cls)
        self.tok = tk.Tokenizer.from_str(text)
        self.vocab_size = self.tok.get_vocab_size()
        self.eot = self.tok.token_to_id(ENDOFTEXT)
        return self

    def spec(self):
        return ("bpe", self.tok.to_str())

    def encode_batch(self, texts):
        return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]

    def token_bytes(self):
        return [hf_token_bytes(self.tok.id_to_token(i), byte_level=True) for i in range(self.vocab_size)]

    def save(self, out_dir):
        self.tok.save(os.path.join(out_dir, "tokenizer.json"))

    def describe(self):
        return {"eot": self.eot, "eot_token": ENDOFTEXT}


class Gpt2Tokenizer:
    name = "gpt2"

    def __init__(self, model_path):
        tiktoken = need("tiktoken", "--tokenizer gpt2")
        self.model_path = model_path
        self.model = None
        if model_path is not None:  # a folder with both files, or either file
            folder = model_path if os.path.isdir(model_path) else os.path.dirname(model_path)
            encoder, merges = (os.path.join(folder, n) for n in ("encoder.json", "vocab.bpe"))
            for path in (encoder, merges):
                model_file(path, "--tokenizer gpt2",
                           "a folder with encoder.json and vocab.bpe, or either file")
            from tiktoken.load import data_gym_to_mergeable_bpe_ranks
            from tiktoken_ext.openai_public import r50k_pat_str
            self.enc = tiktoken.Encoding(
                name="gpt2", pat_str=r50k_pat_str, explicit_n_vocab=50257,
                mergeable_ranks=data_gym_to_mergeable_bpe_ranks(merges, encoder),
                special_tokens={ENDOFTEXT: 50256})
            self.model = os.path.abspath(folder)
        else:
            try:
                self.enc = tiktoken.get_encoding("gpt2")
            except Exception as e:  # offline: tiktoken downloads its BPE files on first use
                raise TokenizerError(
                    f"tiktoken could not load the GPT-2 encoding ({type(e).__name__}). It downloads "
                    "its files on first use; offline, give --tokenizer-model a folder with "
                    "encoder.json and vocab.bpe (../shared/data/tokenizers/gpt2)") from None
        self.vocab_size = self.enc.n_vocab
        self.eot = self.enc.eot_token

    def encode_batch(self, texts):
        return [self.enc.encode_ordinary(t) for t in texts]

    def token_bytes(self):
        return [self.enc.decode_single_token_bytes(i) for i in range(self.vocab_size)]

    def save(self, out_dir):
        pass

    def describe(self):
        return {"eot": self.eot, "eot_token": ENDOFTEXT, "model": self.model or "tiktoken gpt2"}

    def spec(self):
        return ("gpt2", self.model_path)


class SentencePieceTokenizer:
    name = "sentencepiece"

    def __init__(self, model_path, eot_token):
        self.eot_token_arg = eot_token
        spm = need("sentencepiece", "--tokenizer sentencepiece")
        self.model = model_file(model_path, "--tokenizer sentencepiece",
                                "a SentencePiece .model file", "*.model")
        try:
            self.sp = spm.SentencePieceProcessor(model_file=self.model)
        except (OSError, RuntimeError) as e:
            raise TokenizerError(f"{self.model}: not a SentencePiece model ({e})") from None
        self.vocab_size = self.sp.get_piece_size()
        if eot_token is not None:
            self.eot = self.sp.piece_to_id(eot_token)
            if self.eot == self.sp.unk_id() and eot_token != self.sp.id_to_piece(self.eot):
                raise TokenizerError(f"{self.model}: --eot-token {eot_token!r} is not a piece of this model")
        else:
            self.eot = self.sp.eos_id()
            if self.eot < 0:
                raise TokenizerError(f"{self.model}: the model has no EOS piece; name one with --eot-token")

    def encode_batch(self, texts):
        return self.sp.encode(texts, num_threads=1)

    def token_bytes(self):
        out = []
        for i in range(self.vocab_size):
            piece = self.sp.id_to_piece(i)
            byte = BYTE_PIECE.fullmatch(piece) if self.sp.is_byte(i) else None
            if byte:
                out.append(bytes([int(byte.group(1), 16)]))
            elif self.sp.is_control(i) or self.sp.is_unknown(i):
                out.append(piece.encode())
            else:
                out.append(piece.replace("\u2581", " ").encode())
        return out

    def save(self, out_dir):
        pass

    def describe(self):
        return {"eot": self.eot, "eot_token": self.sp.id_to_piece(self.eot), "model": self.model}

    def spec(self):
        return ("sentencepiece", self.model, self.eot_token_arg)


def hf_token_bytes(token, byte_level):
    if token is None:
        return b""
    if byte_level and all(c in BYTE_OF_UNICODE for c in token):
        return bytes(BYTE_OF_UNICODE[c] for c in token)
    byte = BYTE_PIECE.fullmatch(token)
    if byte:
        return bytes([int(byte.group(1), 16)])
    return token.replace("\u2581", " ").encode()


class HfTokenizer:
    name = "hf"

    def __init__(self, model_path, eot_token):
        self.eot_token_arg = eot_token
        tk = need("tokenizers", "--tokenizer hf")
        self.model = model_file(model_path, "--tokenizer hf", "a Hugging Face tokenizer.json file",
                                "tokenizer.json")
        try:
            self.tok = tk.Tokenizer.from_file(self.model)
            with open(self.model, encoding="utf-8") as f:
                self.byte_level = '"ByteLevel"' in json.dumps(json.load(f).get("decoder"))
        except Exception as e:
            raise TokenizerError(f"{self.model}: not a Hugging Face tokenizer.json ({e})") from None
        self.vocab_size = self.tok.get_vocab_size(with_added_tokens=True)
        names = [eot_token] if eot_token is not None else HF_EOT_CANDIDATES
        ids = [(n, self.tok.token_to_id(n)) for n in names]
        found = [(n, i) for n, i in ids if i is not None]
        if not found:
            raise TokenizerError(f"{self.model}: no end-of-text token among {', '.join(names)}; "
                                 "name one with --eot-token")
        self.eot_token, self.eot = found[0]

    def encode_batch(self, texts):
        return [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]

    def token_bytes(self):
        return [hf_token_bytes(self.tok.id_to_token(i), self.byte_level) for i in range(self.vocab_size)]

    def save(self, out_dir):
        pass

    def describe(self):
        return {"eot": self.eot, "eot_token": self.eot_token, "model": self.model}

    def spec(self):
        return ("hf", self.model, self.eot_token_arg)
