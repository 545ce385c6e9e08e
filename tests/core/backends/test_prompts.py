"""Prompts per role and action, and reading answers and confidence back."""

from __future__ import annotations

from core.actions import Action
from core.backends.base import AgentTurn, DecisionTurn, PastTurn
from core.backends.prompts import (
    ACTION_INSTRUCTIONS,
    agent_messages,
    conversation_start,
    decision_messages,
    opening,
    parse_answer,
    parse_confidence,
    role_prompt,
)
from core.records import AgentStep, Message
from core.tasks.base import Task

MATH = Task("m1", "math", "math", "What is 6 * 7?", "42")
MCQ = Task("q1", "mcq", "mcq", "Which is prime?", "B", choices=("4", "5", "6", "8"))
CODE = Task("c1", "code", "code", "def f(x):\n", "    return x", meta={"entry_point": "f"})


def turn(task: Task, action: Action, **kw) -> AgentTurn:
    return AgentTurn(
        task=task,
        agent=1,
        role=kw.pop("role", "solver"),
        round=1,
        n_rounds=3,
        action=action,
        previous=kw.pop("previous", None),
        **kw,
    )


def test_every_action_has_its_own_instruction_in_the_prompt():
    texts = {a: agent_messages(turn(MATH, a))[1]["content"] for a in Action}
    for a, text in texts.items():
        assert ACTION_INSTRUCTIONS[a] in text
        assert "What is 6 * 7?" in text and "Round 2 of 3" in text
    assert len(set(texts.values())) == len(Action)


def test_roles_have_distinct_personas_after_a_shared_prefix_and_unknown_roles_a_generic_one():
    chats = {
        r: agent_messages(turn(MATH, Action.SOLO_PROCESS, role=r))
        for r in ("solver", "coder", "analyst", "verifier", "planner")
    }
    users = {r: chat[1]["content"] for r, chat in chats.items()}
    assert len(set(users.values())) == 5
    assert "planner" in users["planner"]
    for r, chat in chats.items():
        assert role_prompt(r) in users[r]
        # Shared text first: one system prompt, then the problem, then the role.
        assert chat[0] == chats["solver"][0]
        assert users[r].index("What is 6 * 7?") < users[r].index(role_prompt(r))


def test_prompt_carries_previous_answer_and_inbox():
    prev = AgentStep(
        agent=1,
        role="solver",
        round=0,
        action=0,
        answer="41",
        confidence=0.4,
        text="I think 41.\nAnswer: 41",
    )
    inbox = [
        Message(
            src=0,
            dst=1,
            round=1,
            text="6*7 is 42.\nAnswer: 42",
            answer="42",
            confidence=0.9,
            tokens=9,
        )
    ]
    user = agent_messages(turn(MATH, Action.AGGREGATE_REFINE, previous=prev, inbox=inbox))[1][
        "content"
    ]
    assert "I think 41." in user and "answer: 41" in user
    assert "Agent 0 (answer: 42, confidence 0.90)" in user and "6*7 is 42." in user


def test_answer_formats_per_domain():
    assert "Answer: <final answer>" in agent_messages(turn(MATH, 0))[0]["content"]
    mcq_user = agent_messages(turn(MCQ, 0))[1]["content"]
    assert "Answer: <letter>" in mcq_user and "B. 5" in mcq_user
    assert "```python" in agent_messages(turn(CODE, 0))[0]["content"]
    assert "WRONG" in agent_messages(turn(MATH, 0, fault="byzantine"))[1]["content"]


def test_decision_prompt_lists_the_finals():
    finals = [
        AgentStep(
            agent=i, role="solver", round=2, action=0, answer=a, confidence=0.7, text=f"Answer: {a}"
        )
        for i, a in enumerate(["42", "41"])
    ]
    user = decision_messages(DecisionTurn(MATH, finals))[1]["content"]
    assert "Agent 0 (solver; answer: 42" in user and "Agent 1 (solver; answer: 41" in user


def test_parse_answers():
    assert parse_answer(MATH, "so\n**Answer:** $42$.\nConfidence: 90") == "42"
    assert parse_answer(MATH, "thus \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert parse_answer(MATH, "Answer: \\boxed{7}") == "7"
    assert parse_answer(MATH, "no idea") is None
    assert parse_answer(MCQ, "Answer: (b) five") == "B"
    assert parse_answer(MCQ, "Answer: \\boxed{C}") == "C"
    assert parse_answer(MCQ, "hmm") is None
    code = parse_answer(CODE, "```python\ndef f(x):\n    return x\n```\nConfidence: 70")
    assert code == "def f(x):\n    return x"
    assert parse_answer(CODE, "I cannot do this.") is None


def test_parse_confidence():
    assert parse_confidence("Answer: 3\nConfidence: 85") == 0.85
    assert parse_confidence("confidence = 0.3") == 0.3
    assert parse_confidence("Confidence: 85%") == 0.85
    assert parse_confidence("Confidence: 250") == 1.0
    assert parse_confidence("Answer: 3") == 0.5


def test_earlier_replies_are_cut_to_the_back_ends_length():
    """Every earlier reply a prompt shows — the agent's own, a peer's, a final the decision
    agent reads — is cut to ``peer_chars`` (the local model's recipe is shorter than the
    default), and the cut is marked."""
    long = "".join(f"step{i} " for i in range(300))  # ~2,400 characters, none repeated
    own = AgentStep(agent=1, role="solver", round=0, action=0, answer="42", text=long)
    peer = Message(src=0, dst=1, round=1, text=long, answer="41", confidence=0.5, tokens=500)
    t = turn(MATH, Action.AGGREGATE_REFINE, previous=own, inbox=[peer])
    for peer_chars, shown in ((3000, 2), (300, 0)):
        user = agent_messages(t, peer_chars)[1]["content"]
        assert user.count(long.strip()) == shown
        assert user.count("[...cut...]") == 2 - shown
        assert user.count(long.strip()[:300]) == 2  # the head of both replies is kept
    finals = [AgentStep(agent=k, role="solver", round=2, action=0, answer="42", text=long)
              for k in range(2)]  # fmt: skip
    decision = DecisionTurn(MATH, finals, episode_seed=0, n_rounds=3)
    assert decision_messages(decision, 300)[1]["content"].count("[...cut...]") == 2
    assert decision_messages(decision)[1]["content"].count(long.strip()) == 2


def test_a_code_answer_is_read_once_whole_and_without_its_prose():
    """A code reply's answer is its function: the turn that reads it (a peer, the agent
    itself a round later, the decision agent) sees the function once, whole even past
    ``peer_chars``, fenced, and not the prose around it; a reply with no code is quoted."""
    body = "".join(f"    y{i} = x + {i}\n" for i in range(40)) + "    return x"
    function = f"def f(x):\n{body}"  # ~700 characters
    reply = f"Here is my plan, at length.\n```python\n{function}\n```\nThat works.\nConfidence: 70"
    answer = parse_answer(CODE, reply)
    assert answer == function
    own = AgentStep(agent=1, role="coder", round=0, action=0, answer=answer, text=reply)
    peers = [
        Message(src=0, dst=1, round=1, text=reply, answer=answer, confidence=0.7, tokens=200),
        Message(src=2, dst=1, round=1, text="I am not sure.", answer=None, confidence=0.5,
                tokens=5),
    ]  # fmt: skip
    user = agent_messages(turn(CODE, Action.AGGREGATE_REFINE, previous=own, inbox=peers), 300)[1][
        "content"
    ]
    assert user.count(function) == 2 and user.count(f"```python\n{function}\n```") == 2
    assert "at length" not in user and "That works." not in user and "[...cut...]" not in user
    assert "(answer: the code below, confidence 0.70)" in user
    assert "Agent 2 (answer: None, confidence 0.50):\n<<<\nI am not sure.\n>>>" in user
    finals = [AgentStep(agent=k, role="coder", round=2, action=0, answer=answer, text=reply)
              for k in range(2)]  # fmt: skip
    decision = decision_messages(DecisionTurn(CODE, finals, n_rounds=3), 300)[1]["content"]
    assert decision.count(function) == 2 and "at length" not in decision


def test_a_conversation_starts_over_after_the_last_turn_that_outgrew_its_budget():
    past = [PastTurn(turn(MATH, Action.SOLO_PROCESS), "r", tokens=t) for t in (90, 130, 80, 95)]
    assert conversation_start(past, None) == 0  # no budget: one conversation
    assert conversation_start(past, 130) == 0  # none is over it
    assert conversation_start(past, 100) == 2  # the turn after the one of 130 tokens
    assert conversation_start(past, 85) == 4  # the last turn outgrew it: the next is new
    assert conversation_start([], 1) == 0


def test_every_conversation_of_a_task_starts_with_one_opening():
    """The first request of every role, a restarted conversation and the decision agent's
    share one opening: the system message and the problem, up to the role's own text; a
    request that continues a conversation has none; a question that says "You are the"
    keeps it."""
    finals = [AgentStep(agent=0, role="solver", round=2, action=0, answer="5", text="5")]
    firsts = [agent_messages(turn(MCQ, Action.BROADCAST_ALL, role=r))
              for r in ("solver", "coder", "analyst", "verifier", "oddball")]  # fmt: skip
    restarted = agent_messages(
        turn(MCQ, Action.SOLO_PROCESS, history=[PastTurn(turn(MCQ, Action.SOLO_PROCESS), "r", 9)]),
        layout="conversation", restart_after=5,
    )  # fmt: skip
    chats = [*firsts, restarted, decision_messages(DecisionTurn(MCQ, finals))]
    openings = [opening(c) for c in chats]
    assert openings[0] is not None and all(o == openings[0] for o in openings)
    system, user = openings[0]
    assert system == firsts[0][0] and user["content"].startswith("Problem:\nWhich is prime?")
    assert user["content"].endswith("D. 8")  # the options are the problem's
    assert all(c[1]["content"].startswith(user["content"] + "\n\nYou are the ") for c in chats)
    continued = agent_messages(
        turn(MCQ, Action.SOLO_PROCESS, history=[PastTurn(turn(MCQ, Action.SOLO_PROCESS), "r", 9)]),
        layout="conversation",
    )  # fmt: skip
    assert opening(continued) is None
    odd = Task("q2", "mcq", "mcq", "Say:\n\nYou are the best.", "A", choices=("x", "y"))
    cut = opening(agent_messages(turn(odd, Action.SOLO_PROCESS)))
    assert cut is not None and cut[1]["content"] == "Problem:\nSay:"  # cut early, still shared


def test_the_compact_style_asks_the_question_after_worked_examples_and_shows_reads_on_one_line():
    """``compact``: a one-line system prompt, worked examples as earlier turns (each reply
    readable as its own answer), then the question alone when the turn reads nothing; a turn
    that reads something adds the round, its last answer, each teammate's reply on one line
    and the action's line. No persona, no confidence line. Every agent's first request and
    the decision agent's share one opening; the examples' replies do not make a chat a
    conversation."""
    from core.backends.prompts import COMPACT_ACTIONS, COMPACT_SHOTS, continues

    solo = agent_messages(turn(MATH, Action.BROADCAST_ALL, role="analyst"), style="compact")
    shots = COMPACT_SHOTS["math"]
    assert [m["role"] for m in solo] == ["system"] + ["user", "assistant"] * len(shots) + ["user"]
    assert solo[-1]["content"] == "What is 6 * 7?" and "Answer: <number>" in solo[0]["content"]
    examples = [Task(f"s{i}", "math", "math", q, r.rsplit(" ", 1)[-1]) for i, (q, r) in
                enumerate(shots)]  # fmt: skip
    assert all(parse_answer(t, r) == t.answer for t, (_, r) in zip(examples, shots, strict=True))
    prev = AgentStep(agent=1, role="solver", round=0, action=0, answer="41", text="6 x 7 = 41")
    inbox = [Message(0, 1, 1, "6 x 7 = 42.\nAnswer: 42", "42", 0.9, 9)]
    read = agent_messages(
        turn(MATH, Action.AGGREGATE_REFINE, previous=prev, inbox=inbox), style="compact"
    )[-1]["content"]
    assert read.splitlines() == [
        "What is 6 * 7?", "", "Round 2 of 3.", "Your last answer: 41",
        "Agent 0: 6 x 7 = 42. Answer: 42", COMPACT_ACTIONS[Action.AGGREGATE_REFINE],
    ]  # fmt: skip
    assert "Confidence" not in str(solo + [read]) and "solver" not in read
    finals = [AgentStep(agent=0, role="solver", round=2, action=0, answer="42", text="Answer: 42")]
    decision = decision_messages(DecisionTurn(MATH, finals, n_rounds=3), style="compact")
    assert "Agent 0: Answer: 42" in decision[-1]["content"]
    firsts = [solo, agent_messages(turn(MATH, Action.DEBATE_CHECK, inbox=inbox), style="compact"),
              decision]  # fmt: skip
    assert all(opening(c) == solo for c in firsts)  # the question is the whole opening
    assert not any(continues(c) for c in firsts)
    history = [PastTurn(turn(MATH, Action.SOLO_PROCESS), "6 x 7 = 42. Answer: 42", 9)]
    grown = agent_messages(
        turn(MATH, Action.SOLO_PROCESS, history=history), layout="conversation", style="compact"
    )
    assert continues(grown) and opening(grown) is None and grown[: len(solo)] == solo
    assert grown[-1]["content"].startswith("Round 2 of 3.")
    mcq = agent_messages(turn(MCQ, Action.SOLO_PROCESS), style="compact")
    assert mcq[-1]["content"].endswith("D. 8") and "Answer: <letter>" in mcq[0]["content"]


def test_no_worked_example_of_the_compact_style_is_a_generated_task():
    """The examples are written with names and things the generators never use, so none is
    one of ``arith``'s or ``math``'s tasks (a held-out task shown solved would leak)."""
    from core.backends.prompts import COMPACT_SHOTS
    from core.tasks.math import ITEMS, NAMES

    words = {w for q, _ in COMPACT_SHOTS["math"] for w in q.replace(".", " ").split()}
    assert not words & {n for n, _ in NAMES}
    assert not words & {x for pair in ITEMS for x in pair}


def test_the_prompt_style_is_one_setting_stored_only_when_it_is_not_full():
    """``--prompt-style compact`` reaches any real back-end's config with the style's lower
    caps and is stored in the run's ``prompting``; a run in the full style stores what it
    stored before styles existed (no ``style`` key), so recorded configs are unchanged."""
    from core.backends.openai_backend import COMPACT_MAX_TOKENS, MAX_TOKENS
    from core.backends.registry import prompt_settings
    from core.team.options import TeamOptions

    remote = dict(backend="openai", model="m", base_url="http://127.0.0.1:9/v1")
    full = prompt_settings(TeamOptions(**remote))
    compact = prompt_settings(TeamOptions(**remote, prompt_style="compact"))
    assert "style" not in full and compact["style"] == "compact"
    assert full["max_tokens"]["math/agent"] == MAX_TOKENS[("math", "agent")]
    assert compact["max_tokens"]["math/agent"] == COMPACT_MAX_TOKENS[("math", "agent")]
    assert compact["max_tokens"]["code/agent"] == full["max_tokens"]["code/agent"]
    capped = prompt_settings(TeamOptions(**remote, prompt_style="compact", max_tokens=8))
    assert set(capped["max_tokens"].values()) == {8}  # --max-tokens still wins
    assert TeamOptions(**remote, prompt_style="compact").make_backend().config.prompt_style == (
        "compact"
    )
