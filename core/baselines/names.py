"""The learned-topology methods' names, torch-free (the CLI lists them without loading torch);
:data:`core.baselines.registry.METHODS` maps each to its class."""

METHOD_NAMES = ("gptswarm", "agentprune", "agentdropout", "gdesigner")

METHOD_KNOBS: dict[str, str | None] = {
    "gptswarm": None,
    "agentprune": "prune_ratio",
    "agentdropout": "edge_dropout",
    "gdesigner": "sparsity_weight",
}
"""Each method's knob (its class's ``knob``; None: the token weight is its only one), so the
lab can name a training run's knob without loading torch."""
