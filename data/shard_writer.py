"""Token shards in llm.c's format, written as tokens arrive, and the decode table.

Shard: 256 x int32 header (magic 20240520, version, token count), then the tokens little-endian:
version 1 = uint16 (llm.c), 2 = uint32 (vocab > 65535). A shard is closed when it holds
shard_tokens tokens; at the end a last shard shorter than half of that is evened out with the one
before it (both then hold between shard_tokens / 2 and shard_tokens), so no shard is a tiny tail
that a loader would reject. Memory: one COPY_TOKENS chunk at most, never a shard.
"""
import os
import struct

import numpy as np

SHARD_MAGIC = 20240520
DECODE_MAGIC = 0x45434F44
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
COPY_TOKENS = 1 << 24


def shard_header(count, version):
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:3] = [SHARD_MAGIC, version, count]
    return header.tobytes()


class ShardWriter:
    def __init__(self, out_dir, split, shard_tokens, version):
        self.out_dir, self.split, self.limit, self.version = out_dir, split, shard_tokens, version
        self.dtype = np.dtype("<u2" if version == 1 else "<u4")
        self.names, self.counts = [], []
        self.tokens = 0
        self._file = None  # the open shard, named NAME.tmp until it is complete

    def path(self, i):
        return os.path.join(self.out_dir, f"{self.split}_{i:06d}.bin")

    def write(self, tokens):
        tokens = np.asarray(tokens)
        while len(tokens):
            if self._file is None:
                self._file = open(self.path(len(self.names)) + ".tmp", "wb")
                self._file.write(shard_header(0, self.version))
                self._count = 0
            take = tokens[:self.limit - self._count]
            self._file.write(take.astype(self.dtype, copy=False).tobytes())
            self._count += len(take)
            self.tokens += len(take)
            tokens = tokens[len(take):]
            if self._count == self.limit:
                self._finish()

    def _finish(self):
        self._file.seek(0)
        self._file.write(shard_header(self._count, self.version))
        self._file.close()
        self._file = None
        i = len(self.names)
        os.replace(self.path(i) + ".tmp", self.path(i))
        self.names.append(os.path.basename(self.path(i)))
        self.counts.append(self._count)

    def close(self):
        """Finish the open shard, even out a short last one; returns the shard names."""
        if self._file is not None:
            self._finish()
        if len(self.counts) >= 2 and self.counts[-1] < self.limit // 2:
            self._even_out_tail()
        return self.names

    def abandon(self):
        if self._file is not None:
            self._file.close()
            os.remove(self._file.name)
            self._file = None

    def _even_out_tail(self):
        """Move the end of the second-to-last shard to the front of the last one."""
        prev, last = self.path(len(self.names) - 2), self.path(len(self.names) - 1)
        total = self.counts[-2] + self.counts[-1]
        keep = (total + 1) // 2
        width = self.dtype.itemsize
        with open(last + ".tmp", "wb") as out, open(prev, "rb") as a, open(last, "rb") as b:
            out.write(shard_header(total - keep, self.version))
            for src, start in ((a, keep), (b, 0)):
                src.seek(HEADER_BYTES + start * width)
                while chunk := src.read(COPY_TOKENS * width):
                    out.write(chunk)
        with open(prev, "r+b") as a:
            a.write(shard_header(keep, self.version))
            a.truncate(HEADER_BYTES + keep * width)
        os.replace(last + ".tmp", last)
        self.counts[-2:] = [keep, total - keep]


def write_decode_table(path, token_bytes):
    """uint32 magic "ECOD", uint32 vocab_size, then per id: uint32 byte length, the bytes."""
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<II", DECODE_MAGIC, len(token_bytes)))
        for b in token_bytes:
            f.write(struct.pack("<I", len(b)))
            f.write(b)
    os.replace(path + ".tmp", path)
