"""Tokenizers: a byte-level default that needs no download, or a transformers tokenizer on disk."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

EOT = 256  # end of text, between documents


class Tokenizer(Protocol):
    name: str
    vocab_size: int
    eot_id: int

    def encode(self, text: str) -> np.ndarray: ...

    def decode(self, ids) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes are the tokens (0..255), 256 ends a document. Fits every preset's vocabulary."""

    name = "bytes"
    vocab_size = 257
    eot_id = EOT

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int32)

    def decode(self, ids) -> str:
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")


class TokenizerError(ValueError):
    """A tokenizer directory that cannot be used."""


class HFTokenizer:
    """A transformers tokenizer loaded from a local directory (never from a hub)."""

    def __init__(self, directory: str | Path):
        from transformers import AutoTokenizer

        path = Path(directory)
        if not path.is_dir():
            raise TokenizerError(f"tokenizer directory {directory} does not exist")
        try:
            self._tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except (OSError, ValueError) as exc:
            raise TokenizerError(f"cannot load a tokenizer from {directory}: {exc}") from None
        self.name = f"hf:{path.resolve().name}"
        self.vocab_size = len(self._tok)
        eot = self._tok.eos_token_id
        self.eot_id = int(eot) if eot is not None else 0

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self._tok.encode(text, add_special_tokens=False), dtype=np.int32)

    def decode(self, ids) -> str:
        return self._tok.decode([int(i) for i in ids])


def load_tokenizer(spec: str | None) -> Tokenizer:
    """`None` or "bytes" gives the byte tokenizer; anything else is a local tokenizer directory."""
    if spec in (None, "", "bytes"):
        return ByteTokenizer()
    return HFTokenizer(spec)
