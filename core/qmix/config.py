"""The engine's settings: one small dataclass per component, with textbook defaults.

Kept apart from the networks so that reading them (the CLI's ``--help`` shows every
setting's value in every recipe) never imports torch. The components re-export their own
(``core.qmix.learner.LearnerConfig`` ...). Settings tuned for one environment are that
environment's recipe (``core.team.recipes``), never these defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MIXER_KINDS = ("qmix", "vdn")
"""The mixers :data:`core.qmix.mixers.MIXERS` builds (checked there)."""


@dataclass
class AgentNetConfig:
    """Sizes of the per-agent network."""

    gnn_hidden: int = 128
    """Width of the input projection and of every GNN layer."""
    gnn_layers: int = 2
    """Number of message-passing layers over the round graph."""
    gru_hidden: int = 128
    """Width of the GRUCell memory across rounds."""
    q_hidden: int = 128
    """Width of the hidden layer of the Q-head MLP."""
    agent_id: bool = True
    """Append a one-hot agent id to each agent's observation."""
    last_action: bool = True
    """Append a one-hot of the agent's previous action (zeros in the first round)."""

    def validate(self) -> None:
        for name in ("gnn_hidden", "gru_hidden", "q_hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.gnn_layers < 0:
            raise ValueError(f"gnn_layers must be >= 0, got {self.gnn_layers}")


@dataclass
class MixerConfig:
    """Which mixer and its sizes."""

    kind: str = "qmix"
    """``qmix`` (monotonic hypernetwork mixer) or ``vdn`` (sum, the ablation)."""
    embed: int = 64
    """Width of QMIX's mixing layer."""
    hypernet_hidden: int = 64
    """Width of the hidden layer of each hypernetwork."""

    def validate(self) -> None:
        if self.kind not in MIXER_KINDS:
            raise ValueError(f"mixer kind must be one of {MIXER_KINDS}, got {self.kind!r}")
        if self.embed < 1 or self.hypernet_hidden < 1:
            raise ValueError(
                f"embed and hypernet_hidden must be >= 1, got {self.embed}, {self.hypernet_hidden}"
            )


@dataclass
class ExplorationConfig:
    """ε-greedy schedule."""

    start: float = 1.0
    """ε at the first episode."""
    finish: float = 0.05
    """ε after annealing."""
    anneal_fraction: float = 0.5
    """Fraction of the training episodes over which ε falls linearly from start to finish."""

    def validate(self) -> None:
        for name in ("start", "finish"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"epsilon {name} must be in [0, 1], got {v}")
        if not 0.0 < self.anneal_fraction <= 1.0:
            raise ValueError(f"anneal_fraction must be in (0, 1], got {self.anneal_fraction}")


PRECISIONS = ("fp32", "bf16")


@dataclass
class LearnerConfig:
    """Optimisation settings of the QMIX learner.

    The defaults are the textbook ones (PyMARL's QMIX: Adam at 5e-4, batches of 32
    episodes, a 5,000-episode buffer, one-step double-Q targets, a hard target copy every
    200 updates): the engine must solve any small cooperative game with them
    (:mod:`core.qmix.games`). Settings tuned for one environment are that environment's
    recipe (``core.team.recipes``), never these defaults.
    """

    lr: float = 5e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount across rounds."""
    batch_size: int = 32
    """Episodes per update."""
    buffer_size: int = 5_000
    """Episodes kept in the replay buffer."""
    double_q: bool = True
    """Pick target actions with the online network, evaluate them with the target one."""
    grad_clip: float = 10.0
    """Max global gradient norm."""
    target_update_interval: int = 200
    """Updates between hard target copies (ignored when ``tau > 0``)."""
    tau: float = 0.0
    """Soft (Polyak) target update rate per update; 0 = hard updates."""
    updates_per_episode: float = 1.0
    """Learner updates per collected episode (fractions accumulate)."""
    policy_ema: float = 0.0
    """Rate per update of an exponential moving average of the online weights that is the
    greedy policy (what a checkpoint, an evaluation and a benchmark's copy hold): after
    update ``n`` ``w_policy += max(policy_ema, 1/n) · (w_online - w_policy)``, the mean of
    all updates' weights until ``n = 1 / policy_ema``, then an exponential average of roughly
    the last ``1 / policy_ema``. 0 = the greedy policy is the online network itself.
    Exploration always acts with the online weights (what is being learned)."""
    lr_decay_to: float = 1.0
    """Learning rate at the end of its decay, as a share of ``lr``: it falls linearly from
    ``lr`` to ``lr · lr_decay_to`` over the first ``lr_decay_fraction`` of the run's
    updates, then stays there. 1 = a constant learning rate."""
    lr_decay_fraction: float = 1.0
    """Share of the run's planned updates over which the learning rate falls."""
    td_lambda: float = 0.0
    """λ of the TD(λ) targets (:func:`core.qmix.learner.lambda_targets`): 0 = one-step targets; towards 1 the
    episode's own return replaces the target network's bootstrapped estimate. The returns
    are those of the exploring policy (no off-policy correction), so λ > 0 trades the
    greedy values for the behaviour's: in the two-step game λ = 0.8 settles on 7 instead of
    8 (docs/games.md). A long episode with a reward only at its end learns faster with it."""
    precision: str = "fp32"
    """Arithmetic of the networks' forward passes: ``fp32``, or ``bf16`` (autocast: bfloat16
    matmuls with fp32 weights, optimiser and TD arithmetic). bf16 made an update ~1.75x
    faster at N=64 on this project's CPU (AVX512-BF16) and rounds Q-values to ~3 digits."""

    def validate(self) -> None:
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}")
        if self.batch_size < 1 or self.buffer_size < 1:
            raise ValueError(
                f"batch_size and buffer_size must be >= 1, got {self.batch_size}, {self.buffer_size}"
            )
        if not self.grad_clip > 0:
            raise ValueError(f"grad_clip must be > 0, got {self.grad_clip}")
        if self.target_update_interval < 1:
            raise ValueError(
                f"target_update_interval must be >= 1, got {self.target_update_interval}"
            )
        if not 0.0 <= self.tau <= 1.0:
            raise ValueError(f"tau must be in [0, 1], got {self.tau}")
        if self.updates_per_episode <= 0:
            raise ValueError(f"updates_per_episode must be > 0, got {self.updates_per_episode}")
        if not 0.0 <= self.policy_ema <= 1.0:
            raise ValueError(f"policy_ema must be in [0, 1], got {self.policy_ema}")
        if not 0.0 < self.lr_decay_to <= 1.0:
            raise ValueError(f"lr_decay_to must be in (0, 1], got {self.lr_decay_to}")
        if not 0.0 < self.lr_decay_fraction <= 1.0:
            raise ValueError(f"lr_decay_fraction must be in (0, 1], got {self.lr_decay_fraction}")
        if not 0.0 <= self.td_lambda <= 1.0:
            raise ValueError(f"td_lambda must be in [0, 1], got {self.td_lambda}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")


@dataclass
class TrainConfig:
    """Everything one training run needs besides the environment.

    Textbook defaults, as :class:`LearnerConfig`'s; an environment's tuned settings are its
    recipe (``core.team.recipes``: the agent team trains with ``society``).
    """

    episodes: int = 5_000
    """Episodes to collect in total."""
    seed: int = 0
    """Seeds networks, exploration and the environments' episode stream."""
    device: str = "auto"
    """``auto`` (CUDA when present), ``cpu`` or ``cuda``."""
    n_envs: int = 32
    """Episodes collected in lockstep per iteration (one batched policy forward per round)."""
    agent: AgentNetConfig = field(default_factory=AgentNetConfig)
    mixer: MixerConfig = field(default_factory=MixerConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    exploration: ExplorationConfig = field(default_factory=ExplorationConfig)
    explain: bool = False
    """Ask the mixer for Q_tot, weights and credit at every round (for logging)."""
    max_updates: int = 0
    """Learner updates in the whole run at most (0 = no cap). When ``episodes ×
    learner.updates_per_episode`` is larger, the updates are spread evenly over the run: where
    episodes are cheap and updates are not, a long run then collects more data per update
    instead of taking longer."""
    prefill_episodes: int = 0
    """Episodes of a stand-in for the environment put in the replay buffer before the run's
    first one, when the caller has a stand-in (fine-tuning on a real model: episodes of the
    simulator), so that updates start with the first real episode instead of after a
    buffer's worth of them. 0 = none."""
    cpu_threads: int = 1
    """Torch CPU threads while training (0 = leave torch's setting). The networks are small:
    a second thread gains little, and on a shared machine threads that wait for each other
    made updates ~10x slower (measured with a load average of 5 on 2 cores)."""
    collect_ahead: bool = True
    """Play the next episodes in a child process while this one trains on the last ones
    (:mod:`core.qmix.collect`): with two cores an iteration costs about the larger of
    collecting and learning, not their sum. The child acts with the weights of one
    iteration earlier (a fixed lag: a seed still fixes the run). Environments that wait on
    a server (``venv.synchronous`` False) are always played in this process."""

    def validate(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"episodes must be >= 1, got {self.episodes}")
        if self.n_envs < 1:
            raise ValueError(f"n_envs must be >= 1, got {self.n_envs}")
        if self.max_updates < 0:
            raise ValueError(f"max_updates must be >= 0, got {self.max_updates}")
        if self.prefill_episodes < 0:
            raise ValueError(f"prefill_episodes must be >= 0, got {self.prefill_episodes}")
        if self.cpu_threads < 0:
            raise ValueError(f"cpu_threads must be >= 0, got {self.cpu_threads}")
        for part in (self.agent, self.mixer, self.learner, self.exploration):
            part.validate()
