"""The one place that seeds every random number generator and picks the device."""

from __future__ import annotations

import random

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


def set_threads(threads: int) -> None:
    """Intra-op CPU threads for torch. The agent networks are small, so on CPU one thread
    is often as fast as several and never collapses when other processes (the lab, a
    second run, a test suite) compete for the cores; 0 keeps torch's default."""
    if threads < 0:
        raise UserError(f"--threads must be >= 0, not {threads}.")
    if threads:
        torch.set_num_threads(threads)
