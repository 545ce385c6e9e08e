"""The synthetic society: an offline, mechanistic model of LLM agents (docs/simulator.md).

Every call is a small stochastic model, not a language model:

* **Solo skill.** An agent with role ``r`` solves a task of domain ``d`` and (hidden,
  jittered) difficulty ``k`` with ``p = sigmoid(logit(solo_accuracy[d] at k) + role_skill[r][d])``.
  A wrong answer is one of at most four distractors, drawn with Zipf weights so that wrong
  agents often agree (wrong majorities happen).
* **Reading peers.** Every distinct answer an agent holds or reads gets a support: its
  own confidence (times ``self_weight``) plus the confidences of the peers that sent it;
  a right answer is more convincing (``× (1 + recognise[d])``: a correct derivation can be
  checked). The agent then picks an answer by a softmax over supports: sharp for
  ``aggregate_refine``, softer for ``selective_query``. So right peers help and confident
  wrong peers (byzantine agents) hurt.
* **execute_verify** is blind, as the real back-ends' is (docs/openai.md, What
  verification sees): it runs what the agent may know (code: the docstring's examples;
  maths: a re-derivation), never the scorer's tests. It catches a wrong answer with
  ``verify_catch[d]`` and repairs it with ``verify_fix[d]``; a wrong answer it does not
  catch *passes* (a false pass) and gains the confidence a right answer's pass gains, so
  confidence after verification tells no more than the check did. It costs extra
  completion tokens.
* **debate_check** settles a disagreement toward the right answer with ``debate_settle[d]``.
* **Confidence** is informative but noisy: higher when right, lower on hard tasks.
* **Tokens.** prompt = task + role preamble + everything read + its own previous answer
  (+ the share ``conversation_carry`` of its previous request and reply, for a layout that
  re-sends the conversation, + ``verify_prompt_factor`` × the call for a check's follow-up
  request; both 0 in the presets); completion by domain, difficulty, role and action; later
  rounds write revisions (``refine_fraction``).

Each call draws from its own RNG seeded by a hash of (episode seed, task, agent, round,
kind), so results do not depend on the order in which concurrent calls run.
"""

from __future__ import annotations

import bisect
import math
import os
import random
import zlib
from dataclasses import dataclass, field, fields, replace

from core.actions import Action
from core.backends.base import AgentTurn, DecisionTurn, TurnResult
from core.backends.prompts import ROLE_PROMPTS
from core.errors import UserError
from core.records import LLMCall
from core.tasks.base import DOMAINS, Task

MAX_DISTRACTORS = 4
_KIND_AGENT, _KIND_DECIDE, _KIND_TASK = 1, 2, 3
_CODE_BUGS = ("bug:off-by-one", "bug:edge-case", "bug:wrong-return", "bug:syntax-error")


def _per_domain(math_: float, code: float, mcq: float) -> dict[str, float]:
    return {"math": math_, "code": code, "mcq": mcq}


@dataclass
class SocietyConfig:
    """Parameters of one simulated model (a preset). Domains: math, code, mcq."""

    name: str = "flash-lite"
    """Preset name."""
    model: str = "sim/flash-lite"
    """Model label written to episode records."""
    solo_accuracy: dict[str, tuple[float, ...]] = field(
        default_factory=lambda: {
            "math": (0.98, 0.95, 0.78, 0.48, 0.30),
            "code": (0.995, 0.985, 0.965, 0.93, 0.88),
            "mcq": (0.975, 0.95, 0.76, 0.62, 0.48),
        }
    )
    """Solo accuracy of a role-neutral agent at difficulty 1..5, per domain (interpolated in logit)."""
    difficulty_jitter: float = 0.35
    """Std of the hidden per-task offset added to the nominal difficulty."""
    role_skill: dict[str, dict[str, float]] = field(
        default_factory=lambda: {
            "solver": _per_domain(0.15, 0.0, 0.0),
            "coder": _per_domain(-0.3, 0.5, -0.2),
            "analyst": _per_domain(-0.1, -0.2, 0.3),
            "verifier": _per_domain(-0.2, -0.1, 0.0),
        }
    )
    """Logit offset per role and domain (roles not listed get 0)."""
    reconsider: float = 0.2
    """Probability that an agent with an answer re-solves the task instead of keeping it."""
    self_weight: float = 1.0
    """Weight of an agent's own answer (times its confidence) against what it reads."""
    recognise: dict[str, float] = field(default_factory=lambda: _per_domain(1.6, 1.2, 0.9))
    """Extra persuasiveness of a right answer read from a peer, per domain."""
    aggregate_temperature: float = 0.3
    """Softmax temperature of aggregate_refine over answer supports (low = majority-like)."""
    query_temperature: float = 0.6
    """Softmax temperature of selective_query and unsettled debates."""
    verify_catch: dict[str, float] = field(default_factory=lambda: _per_domain(0.35, 0.5, 0.08))
    """Probability that execute_verify notices a wrong answer, per domain. Code: the share of
    wrong programs that fail one of the prompt's examples (the hidden tests are the
    scorer's): 138 of HumanEval's 164 prompts have runnable examples, times an assumed 0.6
    of wrong programs failing one (was 0.75 while verification ran the hidden tests).
    Maths: moderate (re-deriving catches arithmetic and setup slips, not a wrong method).
    Multiple choice: low (nothing to execute). The rest of the wrong answers pass."""
    verifier_catch_bonus: float = 0.15
    """Added to verify_catch for the verifier role."""
    verify_fix: dict[str, float] = field(default_factory=lambda: _per_domain(0.5, 0.8, 0.4))
    """Probability that a noticed error is repaired into the right answer."""
    verify_false_alarm: float = 0.03
    """Probability that execute_verify talks a right answer into a wrong one."""
    debate_settle: dict[str, float] = field(default_factory=lambda: _per_domain(0.55, 0.6, 0.35))
    """Probability that a debate over two different answers ends on the right one (if held)."""
    conf_right: float = 0.78
    """Mean confidence of a right answer at difficulty 3."""
    conf_wrong: float = 0.52
    """Mean confidence of a wrong answer at difficulty 3."""
    conf_difficulty: float = 0.08
    """Confidence lost per difficulty level above 3."""
    conf_noise: float = 0.12
    """Std of the confidence noise."""
    byzantine_confidence: float = 0.95
    """Confidence a byzantine agent claims for its wrong answer."""
    distractor_zipf: float = 1.3
    """Zipf exponent of the distractor weights (higher = wrong answers coincide more)."""
    chars_per_token: float = 4.0
    """Characters per token when sizing the task text."""
    preamble_tokens: int = 90
    """System/role preamble tokens of every agent prompt."""
    completion_tokens: dict[str, float] = field(default_factory=lambda: _per_domain(880, 330, 150))
    """Mean completion tokens of a first answer at difficulty 3, per domain."""
    completion_difficulty: float = 0.22
    """Relative growth of completion tokens per difficulty level above 3."""
    role_verbosity: dict[str, float] = field(
        default_factory=lambda: {"solver": 1.0, "coder": 0.9, "analyst": 1.1, "verifier": 0.8}
    )
    """Completion multiplier per role (roles not listed: 1)."""
    action_verbosity: tuple[float, ...] = (1.0, 1.0, 1.05, 1.15, 1.0, 1.15)
    """Completion multiplier per action id (solo, broadcast, query, aggregate, verify, debate)."""
    refine_fraction: float = 0.5
    """Completion multiplier of a revision: an agent with an answer that re-solves, reads or verifies."""
    keep_fraction: float = 0.12
    """Completion multiplier when an agent with an answer keeps it and reads nothing."""
    memory_fraction: float = 0.25
    """Share of its previous completion an agent re-reads as memory (its answer and key steps)."""
    verify_tokens: dict[str, float] = field(default_factory=lambda: _per_domain(350, 250, 60))
    """Extra completion tokens of execute_verify (tool call and its report)."""
    decision_preamble_tokens: int = 120
    """Preamble tokens of the decision agent."""
    decision_completion_tokens: float = 160
    """Mean completion tokens of the decision agent."""
    decision_recognise: float = 0.3
    """Extra persuasiveness of a right final answer for the decision agent."""
    decision_temperature: float = 0.35
    """Softmax temperature of the decision agent over final-answer supports."""
    token_noise: float = 0.2
    """Std of the log-normal noise on completion tokens."""
    token_budget: int = 14900
    """Default reward token budget: about the mean full-mesh tokens on ``mixed``."""
    unreadable: dict[str, float] = field(default_factory=lambda: _per_domain(0.0, 0.0, 0.0))
    """Probability that an agent's reply has no readable answer, per domain (0 in every preset;
    a society fitted to a small real model has it: ``agentqmix calibrate``)."""
    decision_unreadable: float = 0.0
    """Probability that the decision agent's reply has no readable answer."""
    conversation_carry: float = 0.0
    """Share of an agent's previous request and reply (prompt + completion tokens) that its
    next prompt carries again: 0 = a fresh chat each call (every preset; ``--prompt-layout
    fresh``), 1 = one growing conversation (the local recipe's ``conversation`` layout
    re-sends the whole chat each turn). Fitted by ``agentqmix calibrate``."""
    verify_prompt_factor: float = 0.0
    """On a real back-end execute_verify is two requests, the second a follow-up over the
    first request and its reply: extra prompt tokens = this × (the call's first prompt + its
    completion). 0 in every preset (they price a check as extra completion tokens only);
    fitted by ``agentqmix calibrate``."""

    def validate(self) -> None:
        for d, table in self.solo_accuracy.items():
            if len(table) != 5 or not all(0.0 < p < 1.0 for p in table):
                raise ValueError(f"solo_accuracy[{d}] = {table} needs 5 probabilities in (0, 1)")
        for name in (
            "solo_accuracy",
            "recognise",
            "verify_catch",
            "verify_fix",
            "debate_settle",
            "completion_tokens",
            "verify_tokens",
            "unreadable",
        ):
            table = getattr(self, name)
            missing = [d for d in DOMAINS if d not in table]
            if missing:
                raise ValueError(f"{name} lacks domains {missing}")
        for name in ("verify_catch", "verify_fix", "debate_settle", "unreadable"):
            for d, v in getattr(self, name).items():
                if not 0.0 <= v <= 1.0:
                    raise ValueError(f"{name}[{d}] = {v} is not a probability")
        for name in (
            "reconsider",
            "verify_false_alarm",
            "conf_right",
            "conf_wrong",
            "byzantine_confidence",
            "refine_fraction",
            "keep_fraction",
            "memory_fraction",
            "decision_unreadable",
            "conversation_carry",
        ):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} = {v} is not in [0, 1]")
        for name in (
            "aggregate_temperature",
            "query_temperature",
            "decision_temperature",
            "chars_per_token",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} = {getattr(self, name)} must be positive")
        if len(self.action_verbosity) != len(Action):
            raise ValueError(
                f"action_verbosity has {len(self.action_verbosity)} entries, not {len(Action)}"
            )
        if self.token_budget <= 0:
            raise ValueError(f"token_budget = {self.token_budget} must be positive")
        self._check_ranges()

    def _check_ranges(self) -> None:
        """Every number within :data:`RANGES`, every table keyed by known names (domains;
        roles of :data:`ROLES`) and the role tables not empty: a society file a hand edited
        (``preamble_tokens: -5``, ``1e30`` tokens, a role spelt ``sovler``) is refused, not
        played."""
        for f in fields(self):
            if f.name in ("name", "model"):
                continue
            value = getattr(self, f.name)
            if isinstance(value, dict) and f.name in ROLE_TABLES:
                if not value:
                    raise ValueError(f"{f.name} is empty; name at least one of {', '.join(ROLES)}")
                for role, entry in value.items():
                    if role not in ROLES:
                        raise ValueError(
                            f"{f.name} names role {role!r}; the roles are {', '.join(ROLES)}"
                        )
                    if f.name == "role_skill":
                        _check_domains(entry, f"{f.name}.{role}")
            elif isinstance(value, dict):
                _check_domains(value, f.name)
            for where, number in _numbers(value, f.name):
                lo, hi = RANGES[f.name]
                if not (math.isfinite(number) and lo <= number <= hi):
                    raise ValueError(f"{where} = {number} is not in [{lo:g}, {hi:g}]")


ROLES = tuple(ROLE_PROMPTS)
"""The roles a society file's role tables may name (the roles with prompts of their own)."""
ROLE_TABLES = ("role_skill", "role_verbosity")
MAX_TOKENS = 10**6
"""Most tokens any one token parameter may stand for (the ``--max-tokens`` ceiling)."""
RANGES: dict[str, tuple[float, float]] = {
    "solo_accuracy": (0.0, 1.0),
    "difficulty_jitter": (0.0, 5.0),
    "role_skill": (-20.0, 20.0),
    "reconsider": (0.0, 1.0),
    "self_weight": (0.0, 100.0),
    "recognise": (0.0, 100.0),
    "aggregate_temperature": (1e-6, 100.0),
    "query_temperature": (1e-6, 100.0),
    "verify_catch": (0.0, 1.0),
    "verifier_catch_bonus": (0.0, 1.0),
    "verify_fix": (0.0, 1.0),
    "verify_false_alarm": (0.0, 1.0),
    "debate_settle": (0.0, 1.0),
    "conf_right": (0.0, 1.0),
    "conf_wrong": (0.0, 1.0),
    "conf_difficulty": (0.0, 1.0),
    "conf_noise": (0.0, 1.0),
    "byzantine_confidence": (0.0, 1.0),
    "distractor_zipf": (0.0, 20.0),
    "chars_per_token": (0.1, 100.0),
    "preamble_tokens": (0, MAX_TOKENS),
    "completion_tokens": (1.0, MAX_TOKENS),
    "completion_difficulty": (-10.0, 10.0),
    "role_verbosity": (0.01, 100.0),
    "action_verbosity": (0.01, 100.0),
    "refine_fraction": (0.0, 1.0),
    "keep_fraction": (0.0, 1.0),
    "memory_fraction": (0.0, 1.0),
    "verify_tokens": (0.0, MAX_TOKENS),
    "decision_preamble_tokens": (0, MAX_TOKENS),
    "decision_completion_tokens": (1.0, MAX_TOKENS),
    "decision_recognise": (0.0, 100.0),
    "decision_temperature": (1e-6, 100.0),
    "token_noise": (0.0, 5.0),
    "token_budget": (1, 10**9),
    "unreadable": (0.0, 1.0),
    "decision_unreadable": (0.0, 1.0),
    "conversation_carry": (0.0, 1.0),
    "verify_prompt_factor": (0.0, 100.0),
}
"""Every number parameter's allowed range [low, high] (a table's: each entry's). Wide: a fit
to any real model lands inside; a value outside is a typo or an attack (a 10^30-token
completion, a negative preamble, a negative Zipf exponent)."""


def _check_domains(table: object, where: str) -> None:
    if not isinstance(table, dict):
        raise ValueError(f"{where} must be an object keyed by task kind ({', '.join(DOMAINS)})")
    unknown = [d for d in table if d not in DOMAINS]
    if unknown:
        raise ValueError(
            f"{where} names task kind {unknown[0]!r}; the kinds are {', '.join(DOMAINS)}"
        )


def _numbers(value: object, where: str) -> list[tuple[str, float]]:
    """``(path, number)`` for every number in ``value`` (a number, tuple or nested dict)."""
    if isinstance(value, dict):
        return [x for k, v in value.items() for x in _numbers(v, f"{where}.{k}")]
    if isinstance(value, tuple | list):
        return [x for k, v in enumerate(value) for x in _numbers(v, f"{where}[{k}]")]
    return [(where, value)]


def _flash_lite() -> SocietyConfig:
    return SocietyConfig()


def _oss_120b() -> SocietyConfig:
    return replace(
        SocietyConfig(),
        name="oss-120b",
        model="sim/oss-120b",
        solo_accuracy={
            "math": (0.99, 0.97, 0.88, 0.65, 0.45),
            "code": (0.995, 0.98, 0.96, 0.92, 0.86),
            "mcq": (0.985, 0.97, 0.88, 0.78, 0.62),
        },
        recognise=_per_domain(1.8, 1.2, 0.7),
        completion_tokens=_per_domain(2000, 560, 380),
        verify_tokens=_per_domain(600, 400, 120),
        decision_completion_tokens=300,
        token_budget=30600,
    )


def _balanced() -> SocietyConfig:
    return replace(
        SocietyConfig(),
        name="balanced",
        model="sim/balanced",
        solo_accuracy={
            "math": (0.985, 0.96, 0.83, 0.56, 0.38),
            "code": (0.995, 0.985, 0.965, 0.93, 0.87),
            "mcq": (0.98, 0.96, 0.82, 0.70, 0.55),
        },
        completion_tokens=_per_domain(1300, 420, 250),
        token_budget=20900,
    )


PRESETS = {"flash-lite": _flash_lite, "oss-120b": _oss_120b, "balanced": _balanced}
DEFAULT_PRESET = "flash-lite"


def get_preset(name: str) -> SocietyConfig:
    """The named preset's config; an unknown name is a user mistake."""
    if name not in PRESETS:
        raise UserError(f"Unknown simulator preset {name!r}; choose one of {', '.join(PRESETS)}.")
    config = PRESETS[name]()
    config.validate()
    return config


# ----------------------------------------------------------------------------- helpers


def _seed(*parts: int) -> int:
    # Tuples of ints hash the same in every process (only str hashing is salted).
    return hash(parts) & 0xFFFF_FFFF_FFFF


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _level_logit(table: tuple[float, ...], difficulty: float) -> float:
    """Logit of ``table`` (accuracy at levels 1..5) at a fractional difficulty, clamped to 1..5."""
    x = min(max(difficulty, 1.0), 5.0) - 1.0
    k = min(int(x), 3)
    lo, hi = (math.log(p / (1.0 - p)) for p in table[k : k + 2])
    return lo + (x - k) * (hi - lo)


def _clip(x: float, lo: float = 0.02, hi: float = 0.99) -> float:
    return lo if x < lo else hi if x > hi else x


def derive_distractors(task: Task) -> tuple[str, ...]:
    """Plausible wrong answers: the task's own, else derived from the domain and answer."""
    own = [d for d in task.distractors if d and d != task.answer]
    if own:
        return tuple(dict.fromkeys(own))[:MAX_DISTRACTORS]
    if task.domain == "mcq":
        n = len(task.choices) or 4
        letters = [chr(ord("A") + i) for i in range(n)]
        truth = task.answer.strip().upper()
        return tuple(x for x in letters if x != truth)[:MAX_DISTRACTORS] or ("none of these",)
    if task.domain == "code":
        return _CODE_BUGS
    try:
        value = int(task.answer.strip())
    except ValueError:
        try:
            value = float(task.answer.strip())
        except ValueError:
            return tuple(f"{task.answer} (variant {k})" for k in range(1, 4))
    candidates = [value + 1, value - 1, 2 * value, value + 10, value * 10]
    return tuple(dict.fromkeys(str(c) for c in candidates if str(c) != task.answer.strip()))[
        :MAX_DISTRACTORS
    ]


@dataclass
class _TaskModel:
    """What the society precomputes about one task."""

    key: int
    right: str
    wrong: tuple[str, ...]
    wrong_cum: tuple[float, ...]
    difficulty: float
    prompt_tokens: int
    length_factor: float
    level_logit: float
    """Logit of role-neutral solo accuracy at the task's hidden difficulty."""


class SimBackend:
    """The synthetic society as a :class:`core.backends.base.Backend` (deterministic per seed)."""

    name = "sim"
    answers_are_programs = False
    sandbox = "auto"  # never used: its code answers are labels
    synchronous = True

    def __init__(self, config: SocietyConfig | str = DEFAULT_PRESET):
        self.config = get_preset(config) if isinstance(config, str) else config
        self.config.validate()
        self.model = self.config.model
        self._tasks: dict[tuple[str, str], _TaskModel] = {}

    # -- task model ------------------------------------------------------------------

    def task_model(self, task: Task) -> _TaskModel:
        ident = (task.benchmark, task.task_id)
        model = self._tasks.get(ident)
        if model is None:
            model = self._build_task_model(task)
            self._tasks[ident] = model
        return model

    def _build_task_model(self, task: Task) -> _TaskModel:
        c = self.config
        if task.domain not in DOMAINS:
            raise ValueError(f"task {task.task_id} has unknown domain {task.domain!r}")
        key = zlib.crc32(f"{task.benchmark}/{task.task_id}".encode())
        rng = random.Random(_seed(key, _KIND_TASK))
        difficulty = task.difficulty + rng.gauss(0.0, c.difficulty_jitter)
        wrong = derive_distractors(task)
        weights = [1.0 / (k + 1) ** c.distractor_zipf for k in range(len(wrong))]
        total, acc, cum = sum(weights), 0.0, []
        for w in weights:
            acc += w / total
            cum.append(acc)
        return _TaskModel(
            key=key,
            right=task.answer,
            wrong=wrong,
            wrong_cum=tuple(cum),
            difficulty=difficulty,
            prompt_tokens=max(16, int(len(task.question) / c.chars_per_token)),
            length_factor=max(0.3, 1.0 + c.completion_difficulty * (difficulty - 3.0)),
            level_logit=_level_logit(c.solo_accuracy[task.domain], difficulty),
        )

    def solo_accuracy(self, task: Task, role: str) -> float:
        """Probability that ``role`` solves ``task`` alone (its hidden difficulty included)."""
        c, tm = self.config, self.task_model(task)
        d = task.domain
        return _sigmoid(tm.level_logit + c.role_skill.get(role, {}).get(d, 0.0))

    # -- one agent's turn -------------------------------------------------------------

    async def agent_turn(self, turn: AgentTurn) -> TurnResult:
        return self.agent_turn_sync(turn)

    def agent_turn_sync(self, turn: AgentTurn) -> TurnResult:
        """The synchronous body of :meth:`agent_turn` (the society never waits)."""
        c, task = self.config, turn.task
        tm = self.task_model(task)
        d = task.domain
        rng = random.Random(_seed(turn.episode_seed, tm.key, turn.agent, turn.round, _KIND_AGENT))
        action = Action(turn.action)
        prev = turn.previous
        has_prev = prev is not None and prev.answer is not None
        verified = False
        reworked = True

        if turn.fault == "byzantine":
            answer = tm.wrong[0]
            conf = _clip(c.byzantine_confidence + rng.gauss(0.0, 0.02))
        else:
            reworked = not has_prev or rng.random() < c.reconsider
            if reworked:
                answer, conf = self._solve(task, tm, turn.role, rng)
            else:
                answer, conf = prev.answer, prev.confidence
            read = [m for m in (*turn.inbox, *turn.earlier) if m.answer is not None]
            if action is Action.EXECUTE_VERIFY:
                answer, conf = self._verify(task, tm, turn.role, answer, conf, rng)
                verified = True
            elif action is Action.DEBATE_CHECK and read:
                answer, conf = self._debate(task, tm, answer, conf, read, rng)
            elif action is Action.AGGREGATE_REFINE and read:
                answer, conf = self._choose(tm, d, answer, conf, read, c.aggregate_temperature, rng)
            elif action is Action.SELECTIVE_QUERY and read:
                answer, conf = self._choose(tm, d, answer, conf, read, c.query_temperature, rng)

        if not has_prev:
            effort = 1.0
        elif reworked or verified or turn.inbox or turn.earlier:
            effort = c.refine_fraction
        else:
            effort = c.keep_fraction
        completion = (
            c.completion_tokens[d]
            * tm.length_factor
            * c.role_verbosity.get(turn.role, 1.0)
            * c.action_verbosity[action]
            * effort
        )
        if verified:
            completion += c.verify_tokens[d] * tm.length_factor
        completion_tokens = max(1, int(completion * math.exp(rng.gauss(0.0, c.token_noise))))
        # Drawn last and only when possible: a preset without it plays exactly as before.
        if c.unreadable[d] > 0.0 and turn.fault is None and rng.random() < c.unreadable[d]:
            answer, conf = None, 0.0
        prompt_tokens = (
            tm.prompt_tokens
            + c.preamble_tokens
            + sum(m.tokens for m in (*turn.inbox, *turn.earlier))
            + int(c.memory_fraction * prev.completion_tokens if prev is not None else 0)
        )
        # Both 0 in every preset: the presets' prompts are exactly as before.
        if c.conversation_carry > 0.0 and prev is not None:
            carried = prev.prompt_tokens + prev.completion_tokens
            prompt_tokens += int(c.conversation_carry * carried)
        if verified and c.verify_prompt_factor > 0.0:
            prompt_tokens += int(c.verify_prompt_factor * (prompt_tokens + completion_tokens))
        call = LLMCall(
            agent=turn.agent,
            round=turn.round,
            prompt_hash=f"{_seed(turn.episode_seed, tm.key, turn.agent, turn.round):012x}",
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )
        if answer is None:
            text = f"[{turn.role} · {action.label}] (no readable answer)"
        else:
            text = f"[{turn.role} · {action.label}] Answer: {_display(task, answer)} (confidence {conf:.2f})"
        return TurnResult(
            text=text, answer=answer, confidence=round(conf, 4), call=call, verified=verified
        )

    def _solve(
        self, task: Task, tm: _TaskModel, role: str, rng: random.Random
    ) -> tuple[str, float]:
        right = rng.random() < self.solo_accuracy(task, role)
        answer = tm.right if right else self._distractor(tm, rng)
        return answer, self._confidence(tm, right, rng)

    def _distractor(self, tm: _TaskModel, rng: random.Random, avoid: str | None = None) -> str:
        last = len(tm.wrong) - 1
        answer = tm.wrong[0]
        for _ in range(4):
            answer = tm.wrong[min(bisect.bisect_left(tm.wrong_cum, rng.random()), last)]
            if answer != avoid:
                break
        return answer

    def _confidence(self, tm: _TaskModel, right: bool, rng: random.Random) -> float:
        c = self.config
        mean = (c.conf_right if right else c.conf_wrong) - c.conf_difficulty * (tm.difficulty - 3.0)
        return _clip(mean + rng.gauss(0.0, c.conf_noise))

    def _verify(
        self, task: Task, tm: _TaskModel, role: str, answer: str, conf: float, rng: random.Random
    ) -> tuple[str, float]:
        """A blind check: a right answer passes (or a false alarm breaks it); a wrong one is
        caught (then repaired or not) or passes as a right one would — its confidence then
        drawn as a pass's, whatever the truth, because the check cannot tell them apart."""
        c, d = self.config, task.domain
        if answer == tm.right:
            if rng.random() < c.verify_false_alarm:
                return self._distractor(tm, rng), self._confidence(tm, False, rng)
            return answer, self._passed(tm, conf, rng)
        catch = c.verify_catch[d] + (c.verifier_catch_bonus if role == "verifier" else 0.0)
        if rng.random() < catch:
            if rng.random() < c.verify_fix[d]:
                return tm.right, _clip(self._confidence(tm, True, rng) + 0.08)
            return self._distractor(tm, rng, avoid=answer), self._confidence(tm, False, rng)
        return answer, self._passed(tm, conf, rng)  # a false pass

    def _passed(self, tm: _TaskModel, conf: float, rng: random.Random) -> float:
        """Confidence after a passed check: at least a right answer's, plus a little."""
        return _clip(max(conf, self._confidence(tm, True, rng)) + 0.08)

    def _debate(
        self, task: Task, tm: _TaskModel, answer: str, conf: float, read: list, rng: random.Random
    ) -> tuple[str, float]:
        others = {m.answer for m in read}
        if others == {answer}:
            # Agreement reassures, whether the shared answer is right or not (echo chamber).
            return answer, _clip(conf + 0.08)
        if (answer == tm.right or tm.right in others) and rng.random() < self.config.debate_settle[
            task.domain
        ]:
            return tm.right, _clip(self._confidence(tm, True, rng) + 0.05)
        return self._choose(tm, task.domain, answer, conf, read, self.config.query_temperature, rng)

    def _choose(
        self,
        tm: _TaskModel,
        domain: str,
        answer: str,
        conf: float,
        read: list,
        temperature: float,
        rng: random.Random,
    ) -> tuple[str, float]:
        c = self.config
        boost = 1.0 + c.recognise[domain]
        support = {answer: c.self_weight * conf}
        backers: dict[str, list[float]] = {answer: [conf]}
        for m in read:
            weight = m.confidence * (boost if m.answer == tm.right else 1.0)
            support[m.answer] = support.get(m.answer, 0.0) + weight
            backers.setdefault(m.answer, []).append(m.confidence)
        chosen = _softmax_pick(support, temperature, rng)
        mean_backing = sum(backers[chosen]) / len(backers[chosen])
        agreeing = len(backers[chosen]) - 1
        fresh = self._confidence(tm, chosen == tm.right, rng)
        return chosen, _clip(0.5 * fresh + 0.5 * mean_backing + 0.03 * agreeing)

    # -- the decision agent ----------------------------------------------------------

    async def decide(self, turn: DecisionTurn) -> TurnResult:
        return self.decide_sync(turn)

    def decide_sync(self, turn: DecisionTurn) -> TurnResult:
        c, task = self.config, turn.task
        tm = self.task_model(task)
        rng = random.Random(_seed(turn.episode_seed, tm.key, _KIND_DECIDE))
        support: dict[str, float] = {}
        for step in turn.finals:
            if step.answer is None:
                continue
            boost = 1.0 + c.decision_recognise if step.answer == tm.right else 1.0
            support[step.answer] = support.get(step.answer, 0.0) + step.confidence * boost
        answer = _softmax_pick(support, c.decision_temperature, rng) if support else None
        conf = self._confidence(tm, answer == tm.right, rng) if answer is not None else 0.0
        completion = c.decision_completion_tokens * math.exp(rng.gauss(0.0, c.token_noise))
        if answer is not None and c.decision_unreadable > 0.0:
            if rng.random() < c.decision_unreadable:
                answer, conf = None, 0.0
        call = LLMCall(
            agent=-1,
            round=turn.n_rounds,
            prompt_hash=f"{_seed(turn.episode_seed, tm.key, -1):012x}",
            prompt_tokens=tm.prompt_tokens
            + c.decision_preamble_tokens
            + sum(s.completion_tokens for s in turn.finals),
            completion_tokens=max(1, int(completion)),
        )
        shown = _display(task, answer) if answer is not None else "none"
        n = len(support)
        text = f"[decision] Team answer: {shown} (from {n} distinct answer{'' if n == 1 else 's'})"
        return TurnResult(text=text, answer=answer, confidence=round(conf, 4), call=call)

    async def aclose(self) -> None:
        return None


def _softmax_pick(support: dict[str, float], temperature: float, rng: random.Random) -> str:
    if len(support) == 1:
        return next(iter(support))
    top = max(support.values())
    weights = [(a, math.exp((s - top) / temperature)) for a, s in support.items()]
    u = rng.random() * sum(w for _, w in weights)
    for answer, w in weights:
        u -= w
        if u <= 0.0:
            return answer
    return weights[-1][0]


def _display(task: Task, answer: str) -> str:
    if task.domain == "code" and answer == task.answer:
        return "<canonical solution>"
    return answer


def describe_presets() -> dict[str, dict]:
    """Every preset's parameters as plain data (for docs and the lab)."""
    out = {}
    for name in PRESETS:
        config = get_preset(name)
        out[name] = {f.name: getattr(config, f.name) for f in fields(config)}
    return out


# ----------------------------------------------------------------------------- society files

SOCIETY_FORMAT = "agentqmix-society"
"""The ``format`` marker of a society file (``agentqmix calibrate --out``, ``--society``)."""
SOCIETY_VERSION = 1


def society_to_dict(config: SocietyConfig) -> dict:
    """The config as JSON-ready data (tuples become lists)."""
    return {f.name: getattr(config, f.name) for f in fields(config)}


def society_from_dict(data: object, where: str = "society") -> SocietyConfig:
    """A config from :func:`society_to_dict`'s data; fields left out take the stock
    preset's values. Raises ``ValueError`` naming the first bad key or value."""
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be a JSON object")
    stock = SocietyConfig()
    known = {f.name for f in fields(stock)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{where} has unknown parameter {unknown[0]!r}")
    # A field typed float may hold a whole-number default (880): a fitted 58.1 is still right.
    real = {f.name for f in fields(stock) if "float" in str(f.type)}
    values = {}
    for name, value in data.items():
        values[name] = _typed_like(getattr(stock, name), value, f"{where}.{name}", name in real)
    config = replace(stock, **values)
    config.validate()
    return config


def _typed_like(stock: object, value: object, where: str, real: bool = False) -> object:
    """``value`` coerced to the shape of the stock value ``stock`` (or ValueError); ``real``:
    the numbers are floats whatever the stock value looks like."""
    if isinstance(stock, str):
        if not isinstance(value, str) or not value or not value.isprintable():
            raise ValueError(f"{where} must be a non-empty line of text")
        return value
    if isinstance(stock, bool) or value is None or isinstance(value, bool):
        raise ValueError(f"{where} must be a number, not {value!r}")
    if isinstance(stock, int | float):
        if not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"{where} must be a finite number, not {value!r}")
        if real:
            return float(value)
        if isinstance(stock, int) and value != int(value):
            raise ValueError(f"{where} must be a whole number, not {value!r}")
        return type(stock)(value)
    if isinstance(stock, tuple):
        if not isinstance(value, list | tuple) or len(value) != len(stock):
            raise ValueError(f"{where} must be a list of {len(stock)} numbers")
        return tuple(
            _typed_like(s, v, f"{where}[{k}]", real)
            for k, (s, v) in enumerate(zip(stock, value, strict=True))
        )
    if isinstance(stock, dict):
        if not isinstance(value, dict):
            raise ValueError(f"{where} must be an object")
        template = next(iter(stock.values()))
        out = {}
        for key, v in value.items():
            out[key] = _typed_like(stock.get(key, template), v, f"{where}.{key}", real)
        return out
    raise TypeError(f"no coercion for {type(stock).__name__}")


MAX_SOCIETY_BYTES = 1 << 20
"""Largest society file read (a calibrated one is about 4 kB)."""


def load_society(path: str | os.PathLike[str]) -> SocietyConfig:
    """The society a file written by ``agentqmix calibrate`` describes; a missing, unreadable
    or invalid file is a :class:`UserError` of one sentence. Only a regular file of at most
    :data:`MAX_SOCIETY_BYTES` is read (a named pipe would block the run forever; a device
    never ends), and JSON nested too deeply or holding an integer too long to convert is a
    bad file, not a crash."""
    import json

    where = str(path)
    if not where:
        raise UserError("--society is empty; give the path of a society file.")
    text = _read_society_text(path, where)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(
            f"society file {where} is not valid JSON ({err.msg} at line {err.lineno})."
        ) from None
    except RecursionError:
        raise UserError(f"society file {where} is nested too deeply to read.") from None
    except ValueError as err:  # an integer longer than Python converts (4300 digits)
        reason = str(err).split(":")[0]
        raise UserError(
            f"society file {where} holds a value that cannot be read ({reason})."
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != SOCIETY_FORMAT:
        raise UserError(
            f'{where} is not a society file (no "format": "{SOCIETY_FORMAT}"); '
            "write one with agentqmix calibrate."
        )
    if doc.get("version") != SOCIETY_VERSION:
        raise UserError(
            f"society file {where} has version {doc.get('version')!r}; this program reads "
            f"version {SOCIETY_VERSION}."
        )
    try:
        return society_from_dict(doc.get("society"), "society")
    except ValueError as err:
        raise UserError(f"society file {where} is invalid: {err}.") from None


def _read_society_text(path: str | os.PathLike[str], where: str) -> str:
    """The file's text, read only if it is a regular file of bounded size. Opened without
    blocking, then checked on the open descriptor: a pipe swapped in after a check cannot
    stall the read."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise UserError(f"society file {where} does not exist.") from None
    except IsADirectoryError:
        raise UserError(f"society file {where} is a folder, not a file.") from None
    except OSError as err:
        raise UserError(f"cannot read society file {where} ({err.strerror or err}).") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise UserError(f"society file {where} is a folder, not a file.")
        raise UserError(f"society file {where} is not a regular file (a pipe or a device).")
    with os.fdopen(fd, "rb") as fh:
        try:
            data = fh.read(MAX_SOCIETY_BYTES + 1)
        except OSError as err:
            raise UserError(f"cannot read society file {where} ({err.strerror or err}).") from None
    if len(data) > MAX_SOCIETY_BYTES:
        raise UserError(
            f"society file {where} is larger than {MAX_SOCIETY_BYTES // 1024} kB; a society "
            "file is a few kB of JSON."
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"society file {where} is not UTF-8 text.") from None
