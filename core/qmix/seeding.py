"""The one place that seeds every random number generator, picks the device and sets
torch's CPU threads."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from core.errors import UserError

DEVICES = ("auto", "cpu", "cuda")


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and every CUDA device)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def resolve_device(device: str = "auto") -> torch.device:
    """``auto`` -> CUDA when present, else CPU; ``cuda`` without a GPU is a user error."""
    if device not in DEVICES:
        raise UserError(f"--device must be one of {', '.join(DEVICES)}, not {device!r}.")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda was asked for but no CUDA GPU is visible to torch.")
    return torch.device(device)


MAX_THREADS = 1024


def check_threads(threads: int) -> None:
    if not 0 <= threads <= MAX_THREADS:
        raise UserError(f"--threads must be between 0 and {MAX_THREADS}, not {threads}.")


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    """Intra-op CPU threads for torch inside the block, restored after it; 0 keeps torch's
    setting. The agent networks are small, so on CPU one thread is often as fast as several
    and never collapses when other processes (the lab, a second run, a test suite) compete
    for the cores."""
    check_threads(threads)
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
