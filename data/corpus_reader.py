"""Documents from text, line and JSON-lines files (gzip or not), read in bounded pieces.

A reader yields (text, end) pairs: `end` is None while the document goes on (its next piece
follows) and the document's raw separator once it ends ("" when there is none). The separator
is what a tokenizer without an end-of-text id (bytes) writes instead of one, so bytes shards of a
text file give the file back. No piece is longer than 2 x PIECE_CHARS and no read is
longer than a line capped at PIECE_CHARS (JSON lines: JSON_LINE_CHARS), so memory is bounded
by these constants, not by the file or the document.

Formats:
  text   documents are paragraphs: separated by one or more blank (whitespace-only) lines;
  lines  one document per line (LM1B); empty lines are skipped;
  jsonl  one JSON object per line, the document is a string field or several joined (C4).
Empty documents are skipped everywhere.
"""
import glob
import gzip
import io
import json
import os
import zlib

PIECE_CHARS = 1 << 20
JSON_LINE_CHARS = 64 << 20
GZIP_MAGIC = b"\x1f\x8b"


class InputError(Exception):
    """Bad input; the message names the file (and line) and the problem."""


def expand_inputs(patterns):
    """Paths in the order given; a glob expands to its sorted matches and must match something."""
    paths = []
    for pattern in patterns:
        if glob.has_magic(pattern):
            matches = sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
            if not matches:
                raise InputError(f"{pattern}: no input file matches this pattern")
            paths += matches
        elif not os.path.exists(pattern):
            raise InputError(f"input file not found: {pattern}")
        elif not os.path.isfile(pattern):
            raise InputError(f"input is not a regular file: {pattern}")
        else:
            paths.append(pattern)
    return paths


def is_gzip(path):
    with open(path, "rb") as f:
        magic = f.read(2)
    if path.endswith(".gz") and magic != GZIP_MAGIC:
        raise InputError(f"{path}: named .gz but is not gzip (first bytes {magic.hex() or 'none'}, "
                         f"expected {GZIP_MAGIC.hex()})")
    return magic == GZIP_MAGIC


def detect_format(path, requested):
    """`requested` unless it is auto: jsonl for *.json / *.jsonl / *.ndjson (before .gz), else text."""
    if requested != "auto":
        return requested
    name = path[:-3] if path.endswith(".gz") else path
    return "jsonl" if name.endswith((".json", ".jsonl", ".ndjson")) else "text"


class InputFile:
    """One input opened for streaming: .lines(limit) yields lines of at most `limit` chars,
    .position is how many bytes of the file on disk (compressed, for gzip) were consumed and
    .line the number (from 1) of the line the last one yielded belongs to."""

    def __init__(self, path, strict_utf8):
        self.path = path
        self.size = os.path.getsize(path)
        self.gzip = is_gzip(path)
        self.strict = strict_utf8
        self.line = 0
        self._ended = 0  # complete lines yielded
        self._raw = None

    @property
    def position(self):
        return self._raw.tell() if self._raw is not None and not self._raw.closed else self.size

    def lines(self, limit):
        self._raw = open(self.path, "rb")
        try:
            stream = gzip.GzipFile(fileobj=self._raw, mode="rb") if self.gzip else self._raw
            # newline="\n": lines end at \n only, and nothing is translated (bytes shards give the
            # file back); surrogateescape keeps invalid UTF-8 for the bytes tokenizer.
            text = io.TextIOWrapper(stream, encoding="utf-8",
                                    errors="strict" if self.strict else "surrogateescape",
                                    newline="\n")
            while True:
                try:
                    line = text.readline(limit)
                except UnicodeDecodeError as e:
                    raise InputError(f"{self.path}: not valid UTF-8 (byte {e.object[e.start:e.start + 1].hex()} "
                                     f"near byte {self.position} of the file); this tokenizer needs UTF-8 "
                                     "text (--tokenizer bytes accepts any bytes)") from None
                except (gzip.BadGzipFile, EOFError, zlib.error) as e:
                    raise InputError(f"{self.path}: corrupt gzip near byte {self.position} of "
                                     f"{self.size} ({type(e).__name__}: {e})") from None
                if not line:
                    return
                self.line = self._ended + 1
                self._ended += line.endswith("\n")
                yield line
        finally:
            self._raw.close()


def split_piece(text, limit=PIECE_CHARS):
    """Cut a long text where a newline is followed by an ASCII letter or digit: the GPT-2 /
    ByteLevel pre-tokenizer always breaks there, so byte-level BPE gives the same tokens for the
    pieces as for the whole. Text without such a place is cut before a space (pre-tokenizers
    break there too, unless spaces repeat), else at the limit."""
    start = 0
    while len(text) - start > limit:
        cut = start + limit
        while True:
            cut = text.find("\n", cut)
            if cut < 0 or cut + 1 >= len(text) or (text[cut + 1].isascii() and text[cut + 1].isalnum()):
                break
            cut += 1
        if cut < 0 or cut + 1 >= len(text):  # before the last space, else at the limit
            space = text.rfind(" ", start + 1, start + limit)
            cut = space - 1 if space > start else start + limit - 1
        yield text[start:cut + 1]
        start = cut + 1
    yield text[start:]


def bounded_lines(f):
    """(text, complete) for the lines of f: a line longer than PIECE_CHARS comes in pieces with
    complete False, each cut before its last space (the rest is carried into the next piece), so
    that encoding the pieces gives the line's tokens; a line without a space is cut at the limit."""
    carry, partial = "", False
    for line in f.lines(PIECE_CHARS):
        partial = len(line) >= PIECE_CHARS and not line.endswith("\n")
        line, carry = carry + line, ""
        if partial:
            space = line.rfind(" ")
            if space > 0:
                line, carry = line[:space], line[space:]
        yield line, not partial
    if partial:  # the file ended inside a cut line
        yield carry, True


def text_documents(f):
    """Paragraphs: lines up to a blank line; the separator is the final newline and blank lines."""
    doc, size, blank = [], 0, []
    whole = True  # the previous piece ended its line
    for line, complete in bounded_lines(f):
        starts_line, whole = whole, complete
        if starts_line and complete and not line.strip():
            if doc:
                blank.append(line)
            continue
        if blank:  # a paragraph ended before this line
            yield from end_paragraph(doc, blank)
            doc, size, blank = [], 0, []
        doc.append(line)
        size += len(line)
        if size > PIECE_CHARS:  # hand on a piece: the paragraph may go on
            cut = safe_line_cut(doc)
            yield "".join(doc[:cut]), None
            doc = doc[cut:]
            size = sum(map(len, doc))
    if doc:
        yield from end_paragraph(doc, blank)


def safe_line_cut(lines):
    """The last index > 0 where a line starting with an ASCII letter or digit follows a complete
    line (the split_piece rule), else the last line."""
    for j in range(len(lines) - 1, 0, -1):
        head = lines[j][:1]
        if lines[j - 1].endswith("\n") and head.isascii() and head.isalnum():
            return j
    return len(lines) - 1


def end_paragraph(doc, blank):
    text = "".join(doc)
    body = text.rstrip("\n")
    yield body, text[len(body):] + "".join(blank)


def line_documents(f):
    partial = False  # the line so far was handed on in pieces
    for line, complete in bounded_lines(f):
        if complete:
            ends = line.endswith("\n")
            body = line[:-1] if ends else line
            if body or partial:
                yield body, "\n" if ends else ""
            partial = False
        else:
            yield line, None
            partial = True


def json_documents(f, fields):
    for number, line in enumerate(f.lines(JSON_LINE_CHARS), 1):
        if len(line) >= JSON_LINE_CHARS and not line.endswith("\n"):
            raise InputError(f"{f.path}:{number}: JSON line longer than {JSON_LINE_CHARS >> 20} MiB")
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{f.path}:{number}: not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(record, dict):
            raise InputError(f"{f.path}:{number}: JSON line is a {type(record).__name__}, not an object")
        parts = []
        for field in fields:
            if field not in record:
                have = ", ".join(sorted(record)[:8]) or "none"
                raise InputError(f"{f.path}:{number}: JSON line has no field '{field}' (it has: {have}); "
                                 "name the field with --json-field")
            if not isinstance(record[field], str):
                raise InputError(f"{f.path}:{number}: field '{field}' is a "
                                 f"{type(record[field]).__name__}, not a string")
            parts.append(record[field])
        text = "".join(parts)
        del line, record, parts
        if not text:
            continue
        pieces = list(split_piece(text))
        for i, piece in enumerate(pieces):
            yield piece, "\n" if i + 1 == len(pieces) else None


def documents(f, fmt, fields):
    if fmt == "text":
        return text_documents(f)
    if fmt == "lines":
        return line_documents(f)
    return json_documents(f, fields)

