"""What a policy is, in words: the one place the lab spells a learned policy's method,
family, trained token weight and knob (hovers, legends, tables).

Plain functions, no Streamlit: :mod:`lab.figures` and :mod:`lab.data` both use them.
"""

from __future__ import annotations

import json
from typing import Any


def knob_text(knob: Any) -> str:
    """``prune_ratio=0.5`` from a knob (a dict, its JSON text, or nothing: ``""``)."""
    if isinstance(knob, str):
        knob = json.loads(knob) if knob.strip() else {}
    if not isinstance(knob, dict):
        return ""
    return " ".join(f"{k}={v:g}" for k, v in knob.items())


def describe_policy(
    method: str, family: str | None, token_weight: float | None = None, knob: Any = None
) -> str:
    """``agentprune (learned) · trained at token weight 0.1 · prune_ratio=0.5``,
    ``full (fixed topology)``; a policy of no known family is only its name."""
    if family == "fixed":
        return f"{method} (fixed topology)"
    if family != "learned":
        return str(method)
    parts = [f"{method} (learned)"]
    if token_weight is not None and token_weight == token_weight:  # not NaN
        parts.append(f"trained at token weight {token_weight:g}")
    if knob_text(knob):
        parts.append(knob_text(knob))
    return " · ".join(parts)


def short_policy(method: str, token_weight: float | None = None, knob: Any = None) -> str:
    """``agentprune w=0.1 prune_ratio=0.5``: a learned policy in a legend, as
    :func:`core.experiment.policies.unique_labels` names two checkpoints of one method."""
    parts = [str(method)]
    if token_weight is not None and token_weight == token_weight:  # not NaN
        parts.append(f"w={token_weight:g}")
    if knob_text(knob):
        parts.append(knob_text(knob))
    return " ".join(parts)


def describe_training(method: str) -> str:
    """What a training run's own episodes are, for a hover: how the method explored while
    it learned, and that they are no held-out result of its policy."""
    how = (
        "ε-greedy exploration, ε annealed"
        if method == "qmix"
        else "graphs sampled from its edge probabilities while it learned"
    )
    return f"{method} training episodes ({how}): not a held-out result of its policy"
