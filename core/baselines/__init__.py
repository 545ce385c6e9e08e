"""Learned-topology methods from the field, run on this lab's own team runtime (issue 20).

One module per method — :mod:`~core.baselines.gptswarm` (arXiv 2402.16823),
:mod:`~core.baselines.agentprune` (arXiv 2410.02506), :mod:`~core.baselines.agentdropout`
(arXiv 2503.18891), :mod:`~core.baselines.gdesigner` (arXiv 2410.11782) — and a small
shared part: Bernoulli edges, REINFORCE with a baseline, the low-rank penalty and pruning
(:mod:`~core.baselines.edges`); from edges to round plans (:mod:`~core.baselines.plans`);
the method contract (:mod:`~core.baselines.method`); the actor the rollout path drives
(:mod:`~core.baselines.policy`); the training loop (:mod:`~core.baselines.training`);
checkpoints (:mod:`~core.baselines.checkpoint`); the registry
(:mod:`~core.baselines.registry`, names in :mod:`~core.baselines.names`).

Layer: above the team and its back-ends, below :mod:`core.experiment`, which logs their
runs and puts them beside Agent Q-Mix and the fixed topologies (docs/baselines.md).
Nothing is imported here, so that :mod:`core.baselines.names` stays torch-free for the CLI.
"""
