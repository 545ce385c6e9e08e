"""Fit the synthetic society to logged real episodes (docs/simulator.md, "Calibrated societies").

``agentqmix calibrate`` hands :func:`fit_society` the episodes of real runs; it returns a
:class:`SocietyConfig` whose parameters are fitted where the episodes inform them and the
base preset's elsewhere, with a :class:`ParamFit` (estimate, 95 % interval, observations)
per fitted parameter and the reason every other one kept its stock value.

Each parameter family has a likelihood that mirrors the society's own mechanics
(:mod:`core.backends.society`), and a Gaussian prior centred on the base preset (in logit
space for probabilities, log space for multipliers): the posterior mode shrinks toward
the preset when there are few episodes, and the Laplace approximation gives the interval.

1. **Unreadable replies** ``unreadable[d]``, ``decision_unreadable``: the share of calls
   whose reply had no readable answer (Beta posterior). Reading failures are data: a
   small model that rambles past its answer line is an agent that gives no answer.
2. **Solo accuracy** ``solo_accuracy[d]`` (levels 1..5) and ``role_skill[r][d]``: a
   logistic regression on *fresh* readable answers (no readable previous answer, nothing
   read, not verifying), with the society's own link: the task's hidden difficulty
   (reproduced exactly: it is a hash of the task) interpolates the level logits.
3. **Confidence** ``conf_right``, ``conf_wrong``, ``conf_difficulty``, ``conf_noise``:
   a linear regression of the stated confidence of fresh answers.
4. **How actions move correctness** ``reconsider``, ``verify_fix[d]``,
   ``verify_false_alarm``, ``debate_settle[d]``, ``recognise[d]``: the probability that a
   readable step is right given what the agent held and read, in closed form from the
   society's rules (keep or re-solve; verify repairs or breaks; debate settles; reading
   picks by a softmax over confidence-weighted supports), and ``decision_recognise`` from
   the decision agent's choices. Verification is blind (issue 32): a wrong answer the
   check misses passes with a right one's confidence gain; correctness moves by the same
   rule as before (false alarm, catch × fix), so this likelihood fits it unchanged.
5. **Tokens**: completion tokens per call (``completion_tokens[d]``,
   ``completion_difficulty``, ``role_verbosity``, ``action_verbosity``,
   ``refine_fraction``, ``keep_fraction``, ``verify_tokens[d]``, ``token_noise``) by
   least squares on log tokens; prompt tokens (``preamble_tokens``, ``chars_per_token``,
   ``memory_fraction``) by least squares; the decision agent's from its calls.

What stays stock, always: ``difficulty_jitter`` and ``distractor_zipf`` (a task's hidden
difficulty and wrong answers are not observed), the softmax temperatures and
``self_weight`` (only their ratio to ``recognise`` is identified), ``verify_catch`` and
``verifier_catch_bonus`` (only catch × fix, the repair rate, is: the fit moves
``verify_fix``), ``byzantine_confidence`` (a failure-injection setting) and anything of a
domain, role, action or level without observations.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np
from scipy import optimize

from core.actions import Action
from core.backends.society import ROLES, SimBackend, SocietyConfig, _clip
from core.records import DECISION_AGENT, AgentStep, EpisodeRecord, LLMCall
from core.tasks.base import DOMAINS, Task, task_of

Z95 = 1.959963984540054
LEVELS = 5


@dataclass
class CalibrationConfig:
    """How strongly the fit leans on the base preset."""

    prior_scale: float = 1.0
    """Multiplies every prior's standard deviation: larger = the episodes move the
    parameters further from the preset (weaker shrinkage); smaller = stay closer."""

    def validate(self) -> None:
        if not (math.isfinite(self.prior_scale) and self.prior_scale > 0):
            raise ValueError(f"prior_scale must be a finite number > 0, not {self.prior_scale}")


@dataclass
class ParamFit:
    """One fitted parameter: estimate, 95 % interval, and how much data informed it."""

    name: str
    """Parameter path, e.g. ``solo_accuracy.math[3]`` or ``role_skill.solver.math``."""
    stock: float
    value: float
    lo: float
    hi: float
    n: int
    """Observations (calls or steps) that inform it."""


@dataclass
class SocietyFit:
    """A fitted society and what the fit says about each parameter."""

    config: SocietyConfig
    params: list[ParamFit] = field(default_factory=list)
    stock: dict[str, str] = field(default_factory=dict)
    """Parameter (or family) -> why it kept the base preset's value."""
    counts: dict[str, int] = field(default_factory=dict)
    """How many episodes, calls and steps the fit used, by kind."""

    def to_dict(self) -> dict:
        return {
            "params": [asdict(p) for p in self.params],
            "stock": self.stock,
            "counts": self.counts,
        }


# ----------------------------------------------------------------------------- observations


@dataclass
class _Read:
    right: bool
    key: str
    confidence: float


@dataclass
class _Step:
    """One agent call of a real episode, with what the agent held and read."""

    task: Task
    domain: str
    difficulty: float
    """The task's hidden difficulty in the society (level plus its jitter)."""
    role: str
    action: int
    round: int
    answer: str | None
    right: bool
    confidence: float
    prev: AgentStep | None
    """Its previous step with a readable answer (``None``: it had none)."""
    prev_completion: int
    """Completion tokens of the turn it remembers (its previous call)."""
    prev_prompt: int
    read: list[_Read]
    inbox_tokens: int
    call: LLMCall
    p_solo: float = 0.0
    """The fitted society's solo accuracy for this task and role (set by the solo fit)."""


@dataclass
class _Decision:
    domain: str
    finals: list[tuple[bool, str, float]]
    answer: str | None
    right: bool
    call: LLMCall
    finals_tokens: int
    question_chars: int


def _answer_key(answer: str, right: bool) -> str:
    # Every right answer is the same answer to the society ("0.5" and "1/2" both score).
    return "\x00right" if right else answer.strip()


def observations(
    records: Sequence[EpisodeRecord], sim: SimBackend
) -> tuple[list[_Step], list[_Decision]]:
    """The agent calls and decision calls of ``records`` that a fit can use: healthy agents
    (no injected fault, the call did not fail), each with its context."""
    steps: list[_Step] = []
    decisions: list[_Decision] = []
    for rec in records:
        if rec.domain not in DOMAINS:
            continue
        task = task_of(rec)
        difficulty = sim.task_model(task).difficulty
        calls = {(c.agent, c.round): c for c in rec.calls}
        memory: dict[int, AgentStep] = {}
        holding: dict[int, AgentStep] = {}
        for rnd in rec.rounds:
            by_agent = {s.agent: s for s in rnd.steps}
            for s in rnd.steps:
                call = calls.get((s.agent, rnd.round))
                if call is None:
                    continue  # inactive, crashed or idle (kept its answer without a call)
                read = [
                    _Read(
                        bool(src.correct),
                        _answer_key(src.answer, bool(src.correct)),
                        src.confidence,
                    )
                    for m in rnd.messages
                    if m.dst == s.agent
                    and (src := by_agent.get(m.src)) is not None
                    and src.answer is not None
                ]
                inbox_tokens = sum(m.tokens for m in rnd.messages if m.dst == s.agent)
                remembered = memory.get(s.agent)
                if s.fault is None and call.error is None:
                    steps.append(
                        _Step(
                            task=task,
                            domain=rec.domain,
                            difficulty=difficulty,
                            role=s.role,
                            action=s.action,
                            round=rnd.round,
                            answer=s.answer,
                            right=bool(s.correct),
                            confidence=s.confidence,
                            prev=holding.get(s.agent),
                            prev_completion=remembered.completion_tokens if remembered else 0,
                            prev_prompt=remembered.prompt_tokens if remembered else 0,
                            read=read,
                            inbox_tokens=inbox_tokens,
                            call=call,
                        )
                    )
                memory[s.agent] = s
            for s in rnd.steps:
                if s.answer is not None:
                    holding[s.agent] = s
                elif (s.agent, rnd.round) in calls:
                    holding.pop(s.agent, None)
        call = calls.get((DECISION_AGENT, len(rec.rounds)))
        if call is not None and call.error is None and rec.decision is not None:
            finals = [
                (bool(s.correct), _answer_key(s.answer, bool(s.correct)), s.confidence)
                for s in holding.values()
                if s.answer is not None
            ]
            decisions.append(
                _Decision(
                    domain=rec.domain,
                    finals=finals,
                    answer=rec.team_answer,
                    right=rec.score >= 1.0,
                    call=call,
                    finals_tokens=sum(s.completion_tokens for s in holding.values()),
                    question_chars=len(rec.question),
                )
            )
    return steps, decisions


def _is_fresh(s: _Step) -> bool:
    return s.prev is None and not s.read and s.action != Action.EXECUTE_VERIFY


def _counted(call: LLMCall) -> bool:
    """A call whose tokens are the server's (not a cache hit, usage reported)."""
    return call.usage_reported and not call.cache_hit


# ----------------------------------------------------------------------------- small tools


def _logit(p: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return math.log(p / (1 - p))


def _sigmoid(x: np.ndarray | float) -> np.ndarray | float:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=float)))


def _beta_fit(name: str, stock: float, k: int, n: int, weight: float) -> ParamFit:
    """Share ``k / n`` with a Beta prior of ``weight`` pseudo-observations at ``stock``."""
    from scipy.stats import beta

    m0 = min(max(stock, 0.005), 0.995)
    a, b = weight * m0 + k, weight * (1 - m0) + n - k
    mean = a / (a + b)
    lo, hi = beta.ppf([0.025, 0.975], a, b)
    return ParamFit(name, stock, float(mean), float(lo), float(hi), n)


def _map_fit(
    neg_log_lik: Callable[[np.ndarray], float], theta0: np.ndarray, sd: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Posterior mode of ``neg_log_lik`` + Gaussian prior N(theta0, sd²), and the Laplace
    standard deviations (numerical Hessian at the mode)."""

    def objective(t: np.ndarray) -> float:
        return neg_log_lik(t) + 0.5 * float(np.sum(((t - theta0) / sd) ** 2))

    res = optimize.minimize(objective, theta0, method="L-BFGS-B")
    theta = res.x
    k = len(theta)
    h = 1e-3 * np.maximum(1.0, np.abs(theta))
    hess = np.zeros((k, k))
    f0 = objective(theta)
    for i in range(k):
        for j in range(i, k):
            ei, ej = np.eye(k)[i] * h[i], np.eye(k)[j] * h[j]
            if i == j:
                v = (objective(theta + ei) - 2 * f0 + objective(theta - ei)) / h[i] ** 2
            else:
                v = (
                    objective(theta + ei + ej)
                    - objective(theta + ei - ej)
                    - objective(theta - ei + ej)
                    + objective(theta - ei - ej)
                ) / (4 * h[i] * h[j])
            hess[i, j] = hess[j, i] = v
    try:
        cov = np.linalg.inv(hess)
        sds = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    except np.linalg.LinAlgError:
        sds = sd.copy()
    # A flat or non-convex spot gives nonsense; the prior's width is the honest fallback.
    sds = np.where(np.isfinite(sds) & (sds > 0), np.minimum(sds, sd), sd)
    return theta, sds


# ----------------------------------------------------------------------------- the fit


def fit_society(
    records: Sequence[EpisodeRecord],
    base: SocietyConfig,
    config: CalibrationConfig | None = None,
    name: str = "calibrated",
    model: str = "calibrated",
) -> SocietyFit:
    """The society ``base`` with every parameter ``records`` inform fitted to them."""
    config = config or CalibrationConfig()
    config.validate()
    sim = SimBackend(base)
    steps, decisions = observations(records, sim)
    fit = SocietyFit(config=replace(base, name=name, model=model))
    fit.counts = {
        "episodes": len(records),
        "agent_calls": len(steps),
        "decision_calls": len(decisions),
        "fresh_answers": sum(_is_fresh(s) for s in steps),
    }
    scale = config.prior_scale
    _fit_unreadable(fit, steps, decisions, scale)
    _fit_solo(fit, steps, sim, scale)
    _fit_confidence(fit, steps, scale)
    _fit_transitions(fit, steps, scale)
    _fit_decision(fit, decisions, scale)
    _fit_completion_tokens(fit, steps, decisions, scale)
    _fit_prompt_tokens(fit, steps, decisions, scale)
    fit.stock.update(
        {
            "difficulty_jitter, distractor_zipf": "a task's hidden difficulty and the identity "
            "of wrong answers are not observed",
            "aggregate_temperature, query_temperature, decision_temperature, self_weight": (
                "only their ratio to recognise is identified; recognise is fitted"
            ),
            "verify_catch, verifier_catch_bonus": "only catch x fix (the repair rate) is "
            "identified; verify_fix carries it",
            "byzantine_confidence": "a failure-injection setting, not a model property",
            "token_budget": "set from the fitted society's full-mesh tokens by calibrate",
        }
    )
    fit.config.validate()
    return fit


def _fit_unreadable(
    fit: SocietyFit, steps: list[_Step], decisions: list[_Decision], scale: float
) -> None:
    c = fit.config
    weight = 4.0 / scale
    table = dict(c.unreadable)
    for d in DOMAINS:
        mine = [s for s in steps if s.domain == d]
        if not mine:
            fit.stock[f"unreadable.{d}"] = f"no {d} calls"
            continue
        k = sum(s.answer is None for s in mine)
        p = _beta_fit(f"unreadable.{d}", c.unreadable[d], k, len(mine), weight)
        fit.params.append(p)
        table[d] = p.value
    c.unreadable = table
    with_finals = [x for x in decisions if x.finals]
    if with_finals:
        k = sum(x.answer is None for x in with_finals)
        p = _beta_fit("decision_unreadable", c.decision_unreadable, k, len(with_finals), weight)
        fit.params.append(p)
        c.decision_unreadable = p.value
    else:
        fit.stock["decision_unreadable"] = "no decision calls"


def _fit_solo(fit: SocietyFit, steps: list[_Step], sim: SimBackend, scale: float) -> None:
    """Logistic MAP (Newton) of fresh readable answers on the level logits and role offsets."""
    c = fit.config
    fresh = [s for s in steps if _is_fresh(s) and s.answer is not None]
    # A society names the project's roles only (ROLES); others keep offset 0, as unlisted.
    roles = sorted({s.role for s in fresh} & set(ROLES))
    cols: list[tuple[str, ...]] = [("level", d, str(k)) for d in DOMAINS for k in range(LEVELS)]
    cols += [("role", r, d) for r in roles for d in DOMAINS]
    index = {col: i for i, col in enumerate(cols)}
    theta0 = np.array(
        [_logit(c.solo_accuracy[d][int(k)]) for _, d, k in cols[: LEVELS * len(DOMAINS)]]
        + [c.role_skill.get(r, {}).get(d, 0.0) for _, r, d in cols[LEVELS * len(DOMAINS) :]]
    )
    sd = np.array([1.0 if col[0] == "level" else 0.5 for col in cols]) * scale
    x = np.zeros((len(fresh), len(cols)))
    y = np.array([s.right for s in fresh], dtype=float)
    for i, s in enumerate(fresh):
        t = min(max(s.difficulty, 1.0), 5.0) - 1.0
        k = min(int(t), LEVELS - 2)
        w = t - k
        x[i, index[("level", s.domain, str(k))]] += 1 - w
        x[i, index[("level", s.domain, str(k + 1))]] += w
        if (role_col := index.get(("role", s.role, s.domain))) is not None:
            x[i, role_col] = 1.0
    theta = theta0.copy()
    precision = 1.0 / sd**2
    for _ in range(50):
        p = _sigmoid(x @ theta)
        grad = x.T @ (y - p) - precision * (theta - theta0)
        hess = (x * (p * (1 - p))[:, None]).T @ x + np.diag(precision)
        step = np.linalg.solve(hess, grad)
        theta += step
        if np.max(np.abs(step)) < 1e-8:
            break
    p = _sigmoid(x @ theta)
    cov = np.linalg.inv((x * (p * (1 - p))[:, None]).T @ x + np.diag(precision))
    sds = np.sqrt(np.diag(cov))
    informed = (x != 0).sum(axis=0)
    table = {d: list(c.solo_accuracy[d]) for d in c.solo_accuracy}
    skill = {r: dict(v) for r, v in c.role_skill.items()}
    for i, col in enumerate(cols):
        if col[0] == "level":
            _, d, k = col
            name = f"solo_accuracy.{d}[{int(k) + 1}]"
            if not informed[i]:
                continue
            est = float(_sigmoid(theta[i]))
            lo, hi = (float(_sigmoid(theta[i] + z * sds[i])) for z in (-Z95, Z95))
            fit.params.append(
                ParamFit(name, c.solo_accuracy[d][int(k)], est, lo, hi, int(informed[i]))
            )
            table[d][int(k)] = min(max(est, 1e-3), 1 - 1e-3)
        else:
            _, r, d = col
            if not informed[i]:
                continue
            stock = c.role_skill.get(r, {}).get(d, 0.0)
            fit.params.append(
                ParamFit(
                    f"role_skill.{r}.{d}", stock, float(theta[i]),
                    float(theta[i] - Z95 * sds[i]), float(theta[i] + Z95 * sds[i]), int(informed[i]),
                )
            )  # fmt: skip
            skill.setdefault(r, {})[d] = float(theta[i])
    for d in DOMAINS:
        if not any(s.domain == d for s in fresh):
            fit.stock[f"solo_accuracy.{d}, role_skill.*.{d}"] = f"no fresh readable {d} answers"
    c.solo_accuracy = {d: tuple(v) for d, v in table.items()}
    c.role_skill = skill
    # The solo probabilities the later families plug in are the fitted ones.
    sim.config = c
    sim._tasks.clear()
    for s in steps:
        s.p_solo = sim.solo_accuracy(s.task, s.role)


def _fit_confidence(fit: SocietyFit, steps: list[_Step], scale: float) -> None:
    """Stated confidence of fresh readable answers: right/wrong means, slope, noise."""
    c = fit.config
    fresh = [s for s in steps if _is_fresh(s) and s.answer is not None]
    if len(fresh) < 2:
        fit.stock["conf_right, conf_wrong, conf_difficulty, conf_noise"] = (
            "fewer than 2 fresh answers"
        )
        return
    x = np.array([[s.right, not s.right, -(s.difficulty - 3.0)] for s in fresh], dtype=float)
    y = np.array([s.confidence for s in fresh])
    theta0 = np.array([c.conf_right, c.conf_wrong, c.conf_difficulty])
    prior_sd = np.array([0.2, 0.2, 0.05]) * scale
    noise = c.conf_noise
    for _ in range(3):
        a = x.T @ x / noise**2 + np.diag(1 / prior_sd**2)
        theta = np.linalg.solve(a, x.T @ y / noise**2 + theta0 / prior_sd**2)
        noise = max(0.01, float(np.sqrt(np.mean((y - x @ theta) ** 2))))
    sds = np.sqrt(np.diag(np.linalg.inv(a)))
    counts = [int(x[:, 0].sum()), int(x[:, 1].sum()), len(fresh)]
    for i, name in enumerate(("conf_right", "conf_wrong", "conf_difficulty")):
        if not counts[i]:
            fit.stock[name] = "no such answers"
            continue
        value = float(np.clip(theta[i], 0.0, 1.0))
        fit.params.append(
            ParamFit(name, getattr(c, name), value, float(theta[i] - Z95 * sds[i]),
                     float(theta[i] + Z95 * sds[i]), counts[i])
        )  # fmt: skip
        setattr(c, name, value)
    fit.params.append(ParamFit("conf_noise", c.conf_noise, noise, noise, noise, len(fresh)))
    c.conf_noise = noise


# -- how actions move correctness ---------------------------------------------------------

_VERIFY, _DEBATE, _CHOOSE_AGG, _CHOOSE_QUERY, _PASS = range(5)
_D = {d: i for i, d in enumerate(DOMAINS)}


@dataclass
class _Rows:
    """One row per (step, hypothesis about the answer the agent held before acting)."""

    step: list[int] = field(default_factory=list)
    kind: list[int] = field(default_factory=list)
    domain: list[int] = field(default_factory=list)
    verifier: list[bool] = field(default_factory=list)
    case: list[int] = field(default_factory=list)
    """0: kept its previous answer, 1: re-solved right, 2: re-solved wrong."""
    has_prev: list[bool] = field(default_factory=list)
    p_solo: list[float] = field(default_factory=list)
    own_right: list[bool] = field(default_factory=list)
    agree: list[bool] = field(default_factory=list)
    present: list[bool] = field(default_factory=list)
    self_right: list[float] = field(default_factory=list)
    peer_right: list[float] = field(default_factory=list)
    wrong: list[list[float]] = field(default_factory=list)


def _kind(s: _Step) -> int:
    a = Action(s.action)
    if a is Action.EXECUTE_VERIFY:
        return _VERIFY
    if s.read and a is Action.DEBATE_CHECK:
        return _DEBATE
    if s.read and a is Action.AGGREGATE_REFINE:
        return _CHOOSE_AGG
    if s.read and a is Action.SELECTIVE_QUERY:
        return _CHOOSE_QUERY
    return _PASS


def _transition_rows(steps: list[_Step], c: SocietyConfig) -> tuple[_Rows, np.ndarray]:
    rows, outcomes = _Rows(), []
    for s in steps:
        if s.answer is None or (_is_fresh(s)):
            continue
        k = len(outcomes)
        outcomes.append(s.right)
        shift = c.conf_difficulty * (s.difficulty - 3.0)
        fresh_right = ("\x00right", True, _clip(c.conf_right - shift))
        fresh_wrong = ("\x00new-wrong", False, _clip(c.conf_wrong - shift))
        cases = [(1, *fresh_right), (2, *fresh_wrong)]
        if s.prev is not None:
            prev_key = _answer_key(s.prev.answer, bool(s.prev.correct))
            cases.insert(0, (0, prev_key, bool(s.prev.correct), s.prev.confidence))
        for case, key, right, conf in cases:
            support: dict[str, float] = {key: c.self_weight * conf}
            peer_right = 0.0
            for m in s.read:
                if m.right:
                    peer_right += m.confidence
                else:
                    support[m.key] = support.get(m.key, 0.0) + m.confidence
            self_right = support.pop("\x00right", 0.0)
            rows.step.append(k)
            rows.kind.append(_kind(s))
            rows.domain.append(_D[s.domain])
            rows.verifier.append(s.role == "verifier")
            rows.case.append(case)
            rows.has_prev.append(s.prev is not None)
            rows.p_solo.append(s.p_solo)
            rows.own_right.append(right)
            rows.agree.append(all(m.key == key for m in s.read))
            rows.present.append(right or any(m.right for m in s.read))
            rows.self_right.append(self_right)
            rows.peer_right.append(peer_right)
            rows.wrong.append(list(support.values()))
    return rows, np.array(outcomes, dtype=float)


_TRANSITION_PARAMS = (
    ("reconsider", None),
    ("verify_false_alarm", None),
    *((f"verify_fix.{d}", d) for d in DOMAINS),
    *((f"debate_settle.{d}", d) for d in DOMAINS),
    *((f"recognise.{d}", d) for d in DOMAINS),
)


def _get(c: SocietyConfig, name: str) -> float:
    head, _, d = name.partition(".")
    value = getattr(c, head)
    return value[d] if d else value


def _set(c: SocietyConfig, name: str, value: float) -> None:
    head, _, d = name.partition(".")
    if d:
        setattr(c, head, {**getattr(c, head), d: value})
    else:
        setattr(c, head, value)


def _fit_transitions(fit: SocietyFit, steps: list[_Step], scale: float) -> None:
    c = fit.config
    rows, y = _transition_rows(steps, c)
    if not len(y):
        fit.stock["reconsider, verify_*, debate_settle, recognise"] = "no step after a first answer"
        return
    step = np.array(rows.step)
    kind = np.array(rows.kind)
    dom = np.array(rows.domain)
    case = np.array(rows.case)
    has_prev = np.array(rows.has_prev)
    p_solo = np.array(rows.p_solo)
    own = np.array(rows.own_right, dtype=float)
    agree = np.array(rows.agree)
    present = np.array(rows.present, dtype=float)
    self_r = np.array(rows.self_right)
    peer_r = np.array(rows.peer_right)
    width = max(1, max(len(w) for w in rows.wrong))
    wrong = np.full((len(step), width), -np.inf)
    for i, w in enumerate(rows.wrong):
        wrong[i, : len(w)] = w
    catch = np.array([c.verify_catch[d] for d in DOMAINS])[dom] + np.where(
        np.array(rows.verifier), c.verifier_catch_bonus, 0.0
    )
    catch = np.minimum(catch, 1.0)
    temp = np.where(kind == _CHOOSE_AGG, c.aggregate_temperature, c.query_temperature)

    # Which rows inform which parameter (its observation count; none = it stays stock).
    n_steps = len(y)

    def steps_where(mask: np.ndarray) -> int:
        return len(np.unique(step[mask]))

    informs = {
        "reconsider": steps_where(has_prev),
        "verify_false_alarm": steps_where(kind == _VERIFY),
    }
    for d, i in _D.items():
        informs[f"verify_fix.{d}"] = steps_where((kind == _VERIFY) & (dom == i))
        informs[f"debate_settle.{d}"] = steps_where((kind == _DEBATE) & (dom == i) & ~agree)
        informs[f"recognise.{d}"] = steps_where(
            np.isin(kind, (_DEBATE, _CHOOSE_AGG, _CHOOSE_QUERY)) & (dom == i) & (peer_r > 0)
        )
    free = [name for name, _ in _TRANSITION_PARAMS if informs[name] > 0]
    for name, _ in _TRANSITION_PARAMS:
        if not informs[name]:
            fit.stock[name] = "no step that it acts on"
    if not free:
        return

    def unpack(t: np.ndarray) -> dict[str, float]:
        values = {name: _get(c, name) for name, _ in _TRANSITION_PARAMS}
        for name, v in zip(free, t, strict=True):
            values[name] = float(np.exp(v)) if name.startswith("recognise") else float(_sigmoid(v))
        return values

    def p_right(t: np.ndarray) -> np.ndarray:
        v = unpack(t)
        r = v["reconsider"]
        fix = np.array([v[f"verify_fix.{d}"] for d in DOMAINS])[dom]
        settle = np.array([v[f"debate_settle.{d}"] for d in DOMAINS])[dom]
        rec = np.array([v[f"recognise.{d}"] for d in DOMAINS])[dom]
        weight = np.where(
            has_prev,
            np.choose(case, [1 - r, r * p_solo, r * (1 - p_solo)]),
            np.choose(case, [0.0, p_solo, 1 - p_solo]),
        )
        s_right = self_r + peer_r * (1 + rec)
        rest = np.exp((wrong - s_right[:, None]) / temp[:, None]).sum(axis=1)
        chose = present / (1 + rest)
        verify = own * (1 - v["verify_false_alarm"]) + (1 - own) * catch * fix
        debate = np.where(agree, own, present * (settle + (1 - settle) * chose))
        by_kind = np.choose(kind, [verify, debate, chose, chose, own])
        prob = np.bincount(step, weights=weight * by_kind, minlength=n_steps)
        return np.clip(prob, 1e-6, 1 - 1e-6)

    def nll(t: np.ndarray) -> float:
        p = p_right(t)
        return -float(np.sum(y * np.log(p) + (1 - y) * np.log(1 - p)))

    theta0 = np.array(
        [math.log(_get(c, n)) if n.startswith("recognise") else _logit(_get(c, n)) for n in free]
    )
    sd = np.array([0.5 if n.startswith("recognise") else 1.0 for n in free]) * scale
    theta, sds = _map_fit(nll, theta0, sd)
    for name, t, s in zip(free, theta, sds, strict=True):
        link = np.exp if name.startswith("recognise") else _sigmoid
        value = float(link(t))
        fit.params.append(
            ParamFit(
                name,
                _get(c, name),
                value,
                float(link(t - Z95 * s)),
                float(link(t + Z95 * s)),
                informs[name],
            )
        )
        _set(c, name, value)


def _fit_decision(fit: SocietyFit, decisions: list[_Decision], scale: float) -> None:
    """decision_recognise from which final answer the decision agent took."""
    c = fit.config
    usable = [x for x in decisions if x.answer is not None and any(r for r, _, _ in x.finals)]
    usable = [x for x in usable if len({k for _, k, _ in x.finals}) > 1]
    if not usable:
        fit.stock["decision_recognise"] = "no decision between a right and a wrong final answer"
        return
    y = np.array([x.right for x in usable], dtype=float)

    def nll(t: np.ndarray) -> float:
        boost = 1 + float(np.exp(t[0]))
        total = 0.0
        for x, yi in zip(usable, y, strict=True):
            support: dict[str, float] = {}
            for right, key, conf in x.finals:
                support[key] = support.get(key, 0.0) + conf * (boost if right else 1.0)
            top = max(support.values())
            w = {k: math.exp((v - top) / c.decision_temperature) for k, v in support.items()}
            p = min(max(w.get("\x00right", 0.0) / sum(w.values()), 1e-6), 1 - 1e-6)
            total -= yi * math.log(p) + (1 - yi) * math.log(1 - p)
        return total

    theta, sds = _map_fit(nll, np.array([math.log(c.decision_recognise)]), np.array([0.5 * scale]))
    value = float(np.exp(theta[0]))
    fit.params.append(
        ParamFit("decision_recognise", c.decision_recognise, value,
                 float(np.exp(theta[0] - Z95 * sds[0])), float(np.exp(theta[0] + Z95 * sds[0])), len(usable))
    )  # fmt: skip
    c.decision_recognise = value


# -- tokens --------------------------------------------------------------------------------

_ACTION_NAMES = [a.name.lower() for a in Action]


def _fit_completion_tokens(
    fit: SocietyFit, steps: list[_Step], decisions: list[_Decision], scale: float
) -> None:
    """Least squares on log completion tokens, with the society's formula as the model."""
    c = fit.config
    rows = [s for s in steps if _counted(s.call) and s.call.completion_tokens > 0]
    roles = sorted({s.role for s in rows} & set(ROLES))
    names: list[str] = []
    names += [f"completion_tokens.{d}" for d in DOMAINS if any(s.domain == d for s in rows)]
    if any(s.difficulty != 3.0 for s in rows):
        names.append("completion_difficulty")
    names += [f"role_verbosity.{r}" for r in roles]
    names += [
        f"action_verbosity.{_ACTION_NAMES[a]}"
        for a in range(len(Action))
        if any(s.action == a for s in rows)
    ]
    revision = [
        s.prev is not None and bool(s.read or s.action == Action.EXECUTE_VERIFY) for s in rows
    ]
    kept = [s.prev is not None and not (s.read or s.action == Action.EXECUTE_VERIFY) for s in rows]
    if any(revision):
        names.append("refine_fraction")
    if any(kept):
        names.append("keep_fraction")
    names += [
        f"verify_tokens.{d}"
        for d in DOMAINS
        if any(s.domain == d and s.action == Action.EXECUTE_VERIFY for s in rows)
    ]

    def value_of(name: str) -> float:
        head, _, key = name.partition(".")
        if head == "role_verbosity":
            return c.role_verbosity.get(key, 1.0)
        if head == "action_verbosity":
            return c.action_verbosity[_ACTION_NAMES.index(key)]
        return _get(c, name)

    if rows:
        theta0 = np.array(
            [value_of(n) if n == "completion_difficulty" else math.log(value_of(n)) for n in names]
        )
        prior = np.array(
            [0.1 if n == "completion_difficulty" else 1.0 if n.split(".")[0] in ("completion_tokens", "verify_tokens") else 0.5
             for n in names]
        ) * scale  # fmt: skip
        pos = {n: i for i, n in enumerate(names)}
        y = np.log([s.call.completion_tokens for s in rows])
        diff = np.array([s.difficulty for s in rows])
        verify = np.array([s.action == Action.EXECUTE_VERIFY for s in rows])

        def predict(t: np.ndarray) -> np.ndarray:
            def get(name: str, default: float) -> float:
                if name in pos:
                    v = t[pos[name]]
                    return v if name == "completion_difficulty" else math.exp(v)
                return default

            cd = get("completion_difficulty", c.completion_difficulty)
            refine = get("refine_fraction", c.refine_fraction)
            keep = get("keep_fraction", c.keep_fraction)
            out = np.empty(len(rows))
            for i, s in enumerate(rows):
                lf = max(0.3, 1.0 + cd * (diff[i] - 3.0))
                base = get(f"completion_tokens.{s.domain}", c.completion_tokens[s.domain])
                rv = get(f"role_verbosity.{s.role}", c.role_verbosity.get(s.role, 1.0))
                av = get(
                    f"action_verbosity.{_ACTION_NAMES[s.action]}", c.action_verbosity[s.action]
                )
                effort = (
                    1.0
                    if s.prev is None
                    else refine
                    if revision[i]
                    else c.reconsider * refine + (1 - c.reconsider) * keep
                )
                extra = (
                    get(f"verify_tokens.{s.domain}", c.verify_tokens[s.domain]) * lf
                    if verify[i]
                    else 0.0
                )
                out[i] = base * lf * rv * av * effort + extra
            return np.log(np.maximum(out, 1e-3))

        noise = c.token_noise
        theta = theta0
        for _ in range(2):
            res = optimize.least_squares(
                lambda t, noise=noise: np.concatenate(
                    [(predict(t) - y) / noise, (t - theta0) / prior]
                ),
                theta,
            )
            theta = res.x
            noise = max(0.02, float(np.sqrt(np.mean((predict(theta) - y) ** 2))))
        try:
            sds = np.sqrt(np.diag(np.linalg.inv(res.jac.T @ res.jac)))
        except np.linalg.LinAlgError:
            sds = prior
        counts = _token_counts(names, rows, revision, kept)
        for name, t, s in zip(names, theta, sds, strict=True):
            stock = value_of(name)
            if name == "completion_difficulty":
                value, lo, hi = float(t), float(t - Z95 * s), float(t + Z95 * s)
            else:
                value, lo, hi = (float(math.exp(t + z * s)) for z in (0.0, -Z95, Z95))
            if name in ("refine_fraction", "keep_fraction"):
                value = min(value, 1.0)
            fit.params.append(ParamFit(name, stock, value, lo, hi, counts[name]))
            _assign_token_param(c, name, value)
        fit.params.append(ParamFit("token_noise", c.token_noise, noise, noise, noise, len(rows)))
        c.token_noise = noise
    else:
        fit.stock["completion tokens"] = (
            "no call with server-reported usage (cache hits carry none)"
        )
    counted = [x for x in decisions if _counted(x.call) and x.call.completion_tokens > 0]
    if counted:
        logs = np.log([x.call.completion_tokens for x in counted])
        value, lo, hi = _shrunk_log_mean(logs, c.decision_completion_tokens, 1.0 * scale)
        fit.params.append(
            ParamFit(
                "decision_completion_tokens",
                c.decision_completion_tokens,
                value,
                lo,
                hi,
                len(counted),
            )
        )
        c.decision_completion_tokens = value
    else:
        fit.stock["decision_completion_tokens"] = "no decision call with reported usage"


def _token_counts(
    names: list[str], rows: list[_Step], revision: list[bool], kept: list[bool]
) -> dict[str, int]:
    out = {}
    for name in names:
        head, _, key = name.partition(".")
        if head in ("completion_tokens", "verify_tokens"):
            n = sum(
                s.domain == key
                and (head == "completion_tokens" or s.action == Action.EXECUTE_VERIFY)
                for s in rows
            )
        elif head == "role_verbosity":
            n = sum(s.role == key for s in rows)
        elif head == "action_verbosity":
            n = sum(_ACTION_NAMES[s.action] == key for s in rows)
        elif head == "refine_fraction":
            n = sum(revision)
        elif head == "keep_fraction":
            n = sum(kept)
        else:
            n = len(rows)
        out[name] = n
    return out


def _assign_token_param(c: SocietyConfig, name: str, value: float) -> None:
    head, _, key = name.partition(".")
    if head == "role_verbosity":
        c.role_verbosity = {**c.role_verbosity, key: value}
    elif head == "action_verbosity":
        values = list(c.action_verbosity)
        values[_ACTION_NAMES.index(key)] = value
        c.action_verbosity = tuple(values)
    else:
        _set(c, name, value)


def _carried(s: _Step) -> float:
    """The previous request and reply a conversation layout sends again (0 in round 0)."""
    return float(s.prev_prompt + s.prev_completion)


def _fit_verify_prompt(fit: SocietyFit, steps: list[_Step], scale: float) -> None:
    """``verify_prompt_factor``: how much more prompt an execute_verify call sends than the
    same call's first request would (its follow-up re-sends the request and the reply), as
    a share of that request and reply; a shrunk mean with a N(stock, scale²) prior."""
    c = fit.config
    rows = [
        s
        for s in steps
        if _counted(s.call) and s.action == Action.EXECUTE_VERIFY and s.call.prompt_tokens > 0
    ]
    if not rows:
        fit.stock["verify_prompt_factor"] = "no execute_verify call with usage"
        return
    first = np.array(
        [
            c.preamble_tokens
            + len(s.task.question) / c.chars_per_token
            + s.inbox_tokens
            + c.memory_fraction * s.prev_completion
            + c.conversation_carry * _carried(s)
            for s in rows
        ]  # fmt: skip
    )
    prompt = np.array([s.call.prompt_tokens for s in rows], dtype=float)
    completion = np.array([s.call.completion_tokens for s in rows], dtype=float)
    ratio = (prompt - first) / np.maximum(first + completion, 1.0)
    n = len(ratio)
    sigma = max(float(np.std(ratio)), 0.05) if n > 1 else 0.5
    precision = 1 / scale**2 + n / sigma**2
    mean = (c.verify_prompt_factor / scale**2 + ratio.sum() / sigma**2) / precision
    sd = 1 / math.sqrt(precision)
    value = max(0.0, float(mean))
    fit.params.append(
        ParamFit("verify_prompt_factor", c.verify_prompt_factor, value, mean - Z95 * sd,
                 mean + Z95 * sd, n)
    )  # fmt: skip
    c.verify_prompt_factor = value


def _shrunk_log_mean(logs: np.ndarray, stock: float, prior_sd: float) -> tuple[float, float, float]:
    """Posterior of a log-mean with a N(log stock, prior_sd²) prior: (value, lo, hi)."""
    n = len(logs)
    sigma = max(float(np.std(logs)), 0.05) if n > 1 else 0.5
    precision = 1 / prior_sd**2 + n / sigma**2
    mean = (math.log(stock) / prior_sd**2 + logs.sum() / sigma**2) / precision
    sd = 1 / math.sqrt(precision)
    return math.exp(mean), math.exp(mean - Z95 * sd), math.exp(mean + Z95 * sd)


def _fit_prompt_tokens(
    fit: SocietyFit, steps: list[_Step], decisions: list[_Decision], scale: float
) -> None:
    """Prompt tokens = preamble + question chars / chars_per_token + what was read + memory
    + the carried conversation (``conversation_carry`` × the previous request and reply);
    then execute_verify's follow-up (:func:`_fit_verify_prompt`)."""
    c = fit.config
    rows = [
        s
        for s in steps
        if _counted(s.call) and s.action != Action.EXECUTE_VERIFY and s.call.prompt_tokens > 0
    ]
    if len(rows) < 3:
        fit.stock["preamble_tokens, chars_per_token, memory_fraction, conversation_carry"] = (
            "fewer than 3 calls with usage"
        )
    else:
        x = np.array([[1.0, len(s.task.question), s.prev_completion, _carried(s)] for s in rows])
        y = np.array([s.call.prompt_tokens - s.inbox_tokens for s in rows], dtype=float)
        theta0 = np.array(
            [c.preamble_tokens, 1 / c.chars_per_token, c.memory_fraction, c.conversation_carry]
        )
        prior_sd = np.array([300.0, 0.15, 0.3, 0.5]) * scale
        noise = max(float(np.std(y)), 1.0)
        for _ in range(3):
            a = x.T @ x / noise**2 + np.diag(1 / prior_sd**2)
            theta = np.linalg.solve(a, x.T @ y / noise**2 + theta0 / prior_sd**2)
            noise = max(1.0, float(np.sqrt(np.mean((y - x @ theta) ** 2))))
        sds = np.sqrt(np.diag(np.linalg.inv(a)))
        has_memory = sum(s.prev_completion > 0 for s in rows)
        preamble = max(0, round(theta[0]))
        per_char = min(max(theta[1], 1 / 20), 1.0)
        memory = float(np.clip(theta[2], 0.0, 1.0))
        fit.params.append(
            ParamFit(
                "preamble_tokens",
                c.preamble_tokens,
                preamble,
                theta[0] - Z95 * sds[0],
                theta[0] + Z95 * sds[0],
                len(rows),
            )
        )
        lo_c, hi_c = (1 / max(theta[1] + z * sds[1], 1e-3) for z in (Z95, -Z95))
        fit.params.append(
            ParamFit("chars_per_token", c.chars_per_token, 1 / per_char, lo_c, hi_c, len(rows))
        )
        c.preamble_tokens, c.chars_per_token = preamble, 1 / per_char
        if has_memory:
            for k, name, value in ((2, "memory_fraction", memory),
                                   (3, "conversation_carry", float(np.clip(theta[3], 0.0, 1.0)))):  # fmt: skip
                fit.params.append(
                    ParamFit(
                        name,
                        getattr(c, name),
                        value,
                        theta[k] - Z95 * sds[k],
                        theta[k] + Z95 * sds[k],
                        has_memory,
                    )  # fmt: skip
                )
                setattr(c, name, value)
        else:
            fit.stock["memory_fraction, conversation_carry"] = (
                "no call after an earlier call of the same agent"
            )
    _fit_verify_prompt(fit, steps, scale)
    counted = [x for x in decisions if _counted(x.call) and x.call.prompt_tokens > 0]
    if counted:
        pre = np.array(
            [
                x.call.prompt_tokens - x.question_chars / c.chars_per_token - x.finals_tokens
                for x in counted
            ]
        )
        n = len(pre)
        sigma = max(float(np.std(pre)), 1.0)
        prior_sd = 300.0 * scale
        precision = 1 / prior_sd**2 + n / sigma**2
        mean = (c.decision_preamble_tokens / prior_sd**2 + pre.sum() / sigma**2) / precision
        sd = 1 / math.sqrt(precision)
        fit.params.append(
            ParamFit(
                "decision_preamble_tokens",
                c.decision_preamble_tokens,
                max(0, round(mean)),
                mean - Z95 * sd,
                mean + Z95 * sd,
                n,
            )
        )
        c.decision_preamble_tokens = max(0, round(mean))
    else:
        fit.stock["decision_preamble_tokens"] = "no decision call with reported usage"
