"""The learned-topology methods' names, torch-free (the CLI lists them without loading torch);
:data:`core.baselines.registry.METHODS` maps each to its class."""

METHOD_NAMES = ("gptswarm", "agentprune", "agentdropout", "gdesigner")
