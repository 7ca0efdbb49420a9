"""Training data: text files, folders, JSONL, or the embedded default corpus, as token windows.

Deterministic: (seed, iteration, microbatch) decides exactly which windows a microbatch holds, and
holder k of K takes microbatches m with m % K == k. So every holder draws a disjoint share, the
global batch does not depend on how many holders there are, and a resumed run continues the same
stream from its iteration number alone.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import sysconfig
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from models.tokenizer import ByteTokenizer, Tokenizer

if TYPE_CHECKING:  # (imported where a microbatch is made: the CLI starts without torch)
    import torch

EMBEDDED = "embedded"
TEXT_SUFFIXES = {".txt", ".md", ".rst", ".py", ".text", ".c", ".h", ".html", ".tex"}


class DataError(ValueError):
    """Data that cannot be used: missing, empty, unreadable, malformed."""


def embedded_corpus_files() -> list[Path]:
    """The Python standard library's own sources: real text present wherever Python is.

    Installed third-party packages are excluded so the corpus is the same on every machine with the
    same Python version.
    """
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [
        p
        for p in root.rglob("*.py")
        if "site-packages" not in p.parts and "dist-packages" not in p.parts and p.is_file()
    ]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


class TokenSource:
    """A flat stream of token ids with random access."""

    id: str

    def __len__(self) -> int:
        raise NotImplementedError

    def read(self, offset: int, length: int) -> np.ndarray:
        raise NotImplementedError


class ByteFilesSource(TokenSource):
    """Files read lazily as bytes, each followed by end-of-text: nothing is loaded up front."""

    def __init__(self, files: list[Path]):
        self.files = files
        sizes = [f.stat().st_size for f in files]
        self.starts = list(np.cumsum([0] + [s + 1 for s in sizes]))
        digest = hashlib.sha256()
        for f, s in zip(files, sizes):
            digest.update(f"{f.name}:{s};".encode())
        self.id = f"bytes-files-{len(files)}-{digest.hexdigest()[:16]}"

    def __len__(self) -> int:
        return int(self.starts[-1])

    def read(self, offset: int, length: int) -> np.ndarray:
        out = np.empty(length, dtype=np.int64)
        filled = 0
        index = bisect.bisect_right(self.starts, offset) - 1
        while filled < length:
            start, end = self.starts[index], self.starts[index + 1]
            inner = offset + filled - start
            take = min(length - filled, end - start - inner)
            content_len = end - start - 1
            data = b""
            if inner < content_len:
                with open(self.files[index], "rb") as fh:
                    fh.seek(inner)
                    data = fh.read(min(take, content_len - inner))
            out[filled : filled + len(data)] = np.frombuffer(data, dtype=np.uint8)
            if len(data) < take:  # the end-of-text token after the file
                out[filled + len(data) : filled + take] = ByteTokenizer.eot_id
            filled += take
            index += 1
        return out


class ArraySource(TokenSource):
    """Documents tokenised in memory (JSONL, or any data with a transformers tokenizer)."""

    def __init__(self, tokens: np.ndarray, ident: str):
        self.tokens = tokens
        self.id = ident

    def __len__(self) -> int:
        return len(self.tokens)

    def read(self, offset: int, length: int) -> np.ndarray:
        return self.tokens[offset : offset + length].astype(np.int64)


def _jsonl_texts(path: Path, field: str) -> list[str]:
    texts = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            if not isinstance(record, dict) or not isinstance(record.get(field), str):
                raise DataError(f"{path}:{lineno}: no string field {field!r}")
            texts.append(record[field])
    return texts


def _collect(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(
        p for p in path.rglob("*") if p.is_file() and (p.suffix in TEXT_SUFFIXES or p.suffix == ".jsonl")
    )


def open_source(data: str, tokenizer: Tokenizer, text_field: str = "text") -> TokenSource:
    """`embedded`, a text file, a JSONL file, or a folder of them."""
    if data == EMBEDDED:
        files = embedded_corpus_files()
        if not files:
            raise DataError("the embedded corpus (the Python standard library sources) was not found")
    else:
        path = Path(data)
        if not path.exists():
            raise DataError(f"data path {data} does not exist")
        files = _collect(path)
        if not files:
            raise DataError(f"data path {data} holds no text or JSONL files")
    has_jsonl = any(f.suffix == ".jsonl" for f in files)
    if isinstance(tokenizer, ByteTokenizer) and not has_jsonl:
        source: TokenSource = ByteFilesSource(files)
    else:
        pieces: list[np.ndarray] = []
        eot = np.asarray([tokenizer.eot_id], dtype=np.int32)
        for f in files:
            try:
                texts = (
                    _jsonl_texts(f, text_field) if f.suffix == ".jsonl" else [f.read_text("utf-8", "replace")]
                )
            except OSError as exc:
                raise DataError(f"cannot read {f}: {exc.strerror}") from None
            for text in texts:
                pieces += [tokenizer.encode(text), eot]
        tokens = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int32)
        digest = hashlib.sha256(tokens.tobytes()).hexdigest()[:16]
        source = ArraySource(tokens, f"{tokenizer.name}-{digest}")
    if len(source) == 0 or (isinstance(source, ByteFilesSource) and len(source) == len(files)):
        raise DataError(f"data {data} is empty")
    return source


@dataclass(frozen=True)
class Schedule:
    """How an iteration's global batch is cut: shared by the local trainer and the swarm."""

    batch_size: int
    microbatch_size: int

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.microbatch_size < 1:
            raise DataError("batch size and microbatch size must be positive")
        if self.batch_size % self.microbatch_size:
            raise DataError(
                f"microbatch size {self.microbatch_size} does not divide batch size {self.batch_size}"
            )

    @property
    def microbatches(self) -> int:
        return self.batch_size // self.microbatch_size

    def holder_share(self, holder_index: int, num_holders: int) -> list[int]:
        """The microbatch indices holder k of K trains in every iteration (disjoint, covering)."""
        if not 0 <= holder_index < num_holders:
            raise DataError(f"holder index {holder_index} outside 0..{num_holders - 1}")
        return [m for m in range(self.microbatches) if m % num_holders == holder_index]


class DataStream:
    """Token windows of `seq_len` in a seeded order, one permutation per epoch."""

    def __init__(self, source: TokenSource, seq_len: int, seed: int):
        if seq_len < 2:
            raise DataError("sequence length must be at least 2")
        self.source, self.seq_len, self.seed = source, seq_len, seed
        self.num_windows = len(source) // seq_len
        if self.num_windows < 1:
            raise DataError(f"data has {len(source)} tokens, fewer than one sequence of {seq_len}")

    @lru_cache(maxsize=2)  # noqa: B019 - a stream lives as long as its run
    def _permutation(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_windows)

    def window(self, index: int) -> np.ndarray:
        epoch, position = divmod(index, self.num_windows)
        start = int(self._permutation(epoch)[position]) * self.seq_len
        return self.source.read(start, self.seq_len)

    def microbatch(self, iteration: int, microbatch: int, schedule: Schedule) -> torch.Tensor:
        """Token ids [microbatch_size, seq_len] of one microbatch of one iteration."""
        first = iteration * schedule.batch_size + microbatch * schedule.microbatch_size
        rows = [self.window(first + r) for r in range(schedule.microbatch_size)]
        import torch

        return torch.from_numpy(np.stack(rows))
