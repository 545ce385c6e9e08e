"""Random but fully populated EpisodeRecords, for exercising the store (tests, benchmark).

Every field the store keeps is filled with a non-default value somewhere (Q-values,
mixer weights, failures with extra keys, calls with errors, the decision agent), so a
round trip that drops or mangles a field shows up as an inequality.
"""

from __future__ import annotations

import random

from core.records import (
    DECISION_AGENT,
    AgentStep,
    EpisodeRecord,
    LLMCall,
    Message,
    RoundRecord,
)

_ROLES = ("solver", "coder", "analyst", "verifier", "critic", "planner")
_FAULTS = (None, None, None, "crash", "timeout", "byzantine", "garbled")


def synthetic_episode(
    seed: int, n_agents: int = 4, n_rounds: int = 3, policy: str = "qmix", text_chars: int = 60
) -> EpisodeRecord:
    """One episode of ``n_agents`` agents over ``n_rounds`` rounds, deterministic in ``seed``."""
    rng = random.Random(seed)
    roles = [_ROLES[i % len(_ROLES)] for i in range(n_agents)]
    failures = []
    if rng.random() < 0.3:
        failures.append({"agent": rng.randrange(n_agents), "mode": "crash", "from_round": 1})
    if rng.random() < 0.1:
        failures.append({"agent": 0, "mode": "timeout", "from_round": 0, "seconds": 2.5})
    rounds = [_round(rng, r, n_agents, roles, text_chars) for r in range(n_rounds)]
    decision = AgentStep(
        agent=DECISION_AGENT,
        role="decision",
        round=n_rounds,
        action=0,
        answer=str(rng.randrange(10)),
        confidence=rng.random(),
        correct=rng.random() < 0.6,
        text="final " + "d" * rng.randrange(text_chars),
        prompt_tokens=rng.randrange(100, 400),
        completion_tokens=rng.randrange(5, 50),
        read_from=list(range(n_agents)),
        agreement=rng.random(),
    )
    calls = [
        LLMCall(
            agent=s.agent,
            round=r.round,
            prompt_hash=f"{rng.getrandbits(64):016x}",
            prompt_tokens=s.prompt_tokens,
            completion_tokens=s.completion_tokens,
            usage_reported=rng.random() < 0.95,
            latency_s=rng.random(),
            retries=rng.randrange(3),
            cache_hit=rng.random() < 0.2,
            error="timeout" if s.fault == "timeout" else None,
        )
        for r in rounds
        for s in r.steps
    ]
    score = float(decision.correct)
    return EpisodeRecord(
        task_id=f"task-{seed % 500}",
        benchmark=rng.choice(["gsm8k", "math", "humaneval", "mmlu_pro"]),
        domain=rng.choice(["math", "code", "mc"]),
        difficulty=rng.randrange(1, 6),
        question=f"What is {seed} + {seed % 7}? " + "q" * rng.randrange(text_chars),
        ground_truth=str(seed + seed % 7),
        roles=roles,
        policy=policy,
        seed=seed,
        rounds=rounds,
        decision=decision,
        team_answer=decision.answer,
        score=score,
        reward=score - 0.1 * rng.random(),
        failures=failures,
        calls=calls,
        backend="sim",
        model="sim-gpt",
    )


def _round(rng: random.Random, r: int, n: int, roles: list[str], text_chars: int) -> RoundRecord:
    steps = []
    for i in range(n):
        fault = rng.choice(_FAULTS)
        greedy = rng.random() < 0.8
        steps.append(
            AgentStep(
                agent=i,
                role=roles[i],
                round=r,
                action=rng.randrange(6),
                alive=fault not in ("crash", "timeout"),
                fault=fault,
                answer=None if fault == "crash" else str(rng.randrange(10)),
                confidence=rng.random(),
                correct=None if fault == "crash" else rng.random() < 0.5,
                text="t" * rng.randrange(text_chars),
                prompt_tokens=rng.randrange(50, 500),
                completion_tokens=rng.randrange(10, 200),
                read_from=sorted(rng.sample(range(n), rng.randrange(n))),
                agreement=rng.random(),
                verified=rng.random() < 0.2,
                q_values=[rng.gauss(0, 1) for _ in range(6)],
                greedy=greedy,
                epsilon=0.05,
            )
        )
    edges = [(s, d) for s in range(n) for d in range(n) if s < d and rng.random() < 0.4]
    messages = [
        Message(
            src=s,
            dst=d,
            round=r,
            text="m" * rng.randrange(text_chars),
            answer=str(rng.randrange(10)),
            confidence=rng.random(),
            tokens=rng.randrange(5, 80),
        )
        for s, d in edges
    ]
    return RoundRecord(
        round=r,
        edges=edges,
        dropped_edges=[(n - 1, 0)] if rng.random() < 0.3 else [],
        layers=[list(range(n))],
        steps=steps,
        messages=messages,
        q_tot=rng.gauss(0, 1),
        mixer_weights=[[rng.random() for _ in range(4)] for _ in range(n)],
        credit=[rng.random() for _ in range(n)],
    )
