"""Batches of document pieces -> token arrays, encoded by this process and --workers - 1 spawned
ones, the results handed back in the order the batches were submitted.

A batch is a list of (text, end, split) pieces (data/prepare.py's document stream) and its result
{split: tokens} (each piece's ids, then the end-of-text id where a document ends). The result is a
pure function of the batch, and the pieces of a batch are encoded independently, so the shards do
not depend on how the pieces are batched or on which process encodes which batch. An error (a
piece the tokenizer cannot encode) is raised when its batch's turn comes, so the first in input
order is the one reported, whatever the number of workers.

Workers are spawned, not forked (no tokenizer thread pool or lock is inherited), and build the
tokenizer from its .spec() in their initializer. They ignore SIGINT (the parent cleans up) and
exit when the parent is gone. At most 8 x workers batches are queued, so memory stays bounded
however fast the reader is; a worker that dies fails the run with WorkerDied instead of leaving
the parent waiting for its result.
"""
import collections
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import numpy as np

import tokenizer_backends as tb


class DocumentError(Exception):
    """The tokenizer cannot encode piece `index` of a batch; `detail` says why. The Encoder sets
    .tag to the batch's tag, so the caller can name the document."""

    def __init__(self, index, detail):
        super().__init__(index, detail)
        self.index, self.detail, self.tag = index, detail, None


class WorkerDied(Exception):
    """A worker process ended without handing back its result (killed, out of memory)."""


def encode_pieces(tok, batch, dtype):
    """{split: tokens as `dtype`} for one batch; raises DocumentError for a piece that fails."""
    texts = [t if tok.eot is not None or not end else t + end for t, end, _ in batch]
    try:
        encoded = tok.encode_batch(texts)
    except Exception:
        raise failing_piece(tok, texts) from None
    parts = {}
    eot = np.array([tok.eot], dtype=np.uint32) if tok.eot is not None else None
    for ids, (_, end, split) in zip(encoded, batch):
        out = parts.setdefault(split, [])
        out.append(np.asarray(ids, dtype=np.uint32))
        if end is not None and eot is not None:
            out.append(eot)
    result = {}
    for split, out in parts.items():
        tokens = np.concatenate(out)
        if len(tokens) and int(tokens.max()) >= tok.vocab_size:
            raise AssertionError(f"token {int(tokens.max())} >= vocab {tok.vocab_size}")
        result[split] = tokens.astype(dtype)
    return result


def not_text(text, errors="strict"):
    """Why `text` has no UTF-8 form (a lone surrogate), or None. errors="surrogateescape" lets
    through the bytes that the bytes tokenizer's reader kept from invalid UTF-8."""
    try:
        text.encode("utf-8", errors)
    except UnicodeEncodeError as e:
        return (f"it holds the lone surrogate U+{ord(text[e.start]):04X} (in JSON, a \\u escape of "
                "half a UTF-16 pair), which is not text")
    return None


def failing_piece(tok, texts):
    """The DocumentError for the first of `texts` the tokenizer fails on alone."""
    errors = "surrogateescape" if tok.name == "bytes" else "strict"
    for i, text in enumerate(texts):
        problem = not_text(text, errors)
        if problem is not None:
            return DocumentError(i, problem)
        try:
            tok.encode_batch([text])
        except Exception as e:
            return DocumentError(i, f"{type(e).__name__}: {e}")
    return DocumentError(0, "the batch failed, though each of its documents encodes alone")


_worker_tok = None
_worker_error = None


_WORKER_DIED = ("a --workers process ended without its result (killed by a signal, or out of "
                "memory)")


def _init_worker(spec, parent):
    global _worker_tok, _worker_error
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    try:
        _worker_tok = tb.from_spec(spec)
    except Exception as e:  # raised with the first batch: the parent reports it as one error
        _worker_error = e


def _exit_with_parent(parent):
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def _encode_in_worker(batch, dtype):
    if _worker_error is not None:
        raise _worker_error
    return encode_pieces(_worker_tok, batch, dtype)


class _Encoded:
    """A batch encoded in this process, queued beside the workers' futures; its error, if any,
    is raised when the batch's turn comes, so errors come in input order."""

    def __init__(self, encode):
        try:
            self.value, self.error = encode(), None
        except Exception as e:
            self.value, self.error = None, e

    def done(self):
        return True

    def result(self):
        if self.error is not None:
            raise self.error
        return self.value


class Encoder:
    """submit(batch, tag) -> the (tag, result) pairs complete so far, in submission order;
    finish() -> the rest; close() stops the workers.

    `workers` processes encode: this one and workers - 1 spawned. A batch goes to a worker while
    fewer than 2 per worker are running, else it is encoded here, so this process encodes instead
    of waiting. Up to 8 x workers batches are queued (a few MB), so a worker that falls behind (a
    busy machine) holds up the writing of the batches after it but not this process's encoding;
    past that, this process waits for the oldest."""

    def __init__(self, tok, dtype, workers):
        self.tok, self.dtype = tok, dtype
        self.running_limit, self.queued_limit = 2 * (workers - 1), 8 * workers
        self.pending = collections.deque()  # (tag, future or _Encoded), in submission order
        self.pool = None
        if workers > 1:
            self.pool = ProcessPoolExecutor(
                workers - 1, mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker, initargs=(tok.spec(), os.getpid()))

    def submit(self, batch, tag):
        running = sum(not entry.done() for _, entry in self.pending)
        if self.pool is not None and running < self.running_limit:
            try:
                entry = self.pool.submit(_encode_in_worker, batch, self.dtype)
            except BrokenProcessPool:  # a worker died after the last result was read
                raise WorkerDied(_WORKER_DIED) from None
        else:
            entry = _Encoded(lambda: encode_pieces(self.tok, batch, self.dtype))
        self.pending.append((tag, entry))
        done = []
        while self.pending and (len(self.pending) > self.queued_limit or self.pending[0][1].done()):
            done.append(self._next())
        return done

    def finish(self):
        done = []
        while self.pending:
            done.append(self._next())
        return done

    def close(self):
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None

    def _next(self):
        tag, entry = self.pending.popleft()
        try:
            return tag, entry.result()
        except DocumentError as e:
            e.tag = tag
            raise
        except BrokenProcessPool:
            raise WorkerDied(_WORKER_DIED) from None
