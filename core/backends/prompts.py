"""The prompts real LLM agents get, and how their replies are read back (docs/openai.md).

One system prompt per role (a persona plus the task's answer format), one
instruction per communication action, the agent's own previous answer (temporal
edge) and the peers' answers it read this round, the decision agent's prompt, and
the follow-up prompts of ``execute_verify`` (test feedback for code, an independent
re-derivation for maths and multiple choice). Every reply ends with an answer line
and ``Confidence: <0-100>``; :func:`parse_reply` reads both. That is the ``full`` style; the
``compact`` style (:data:`STYLES`) words the same turns for small models.

The builders take plain record data (:func:`agent_chat`, :func:`decision_chat`): the
back-end calls them with a live turn, the lab's Replay with what a logged episode holds,
so the synthetic society's agents are shown the prompt the same turn would have sent.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from core.actions import Action
from core.backends.base import AgentTurn, DecisionTurn, PastTurn
from core.records import AgentStep, Chat, Message
from core.tasks.base import Task
from core.tasks.checkers import read_answer
from core.tasks.code_checker import extract_code

PEER_TEXT_CHARS = 3000
"""An earlier reply (a peer's, the agent's own, a final the decision agent reads) is cut to
this many characters in a prompt (keeps prompts bounded); a back-end may set its own
(``OpenAIBackendConfig.peer_chars``; the local model's recipe is shorter). A code answer
is shown whole instead (:func:`_quoted`)."""
DEFAULT_CONFIDENCE = 0.5
"""Confidence assumed when a reply states none."""

ROLE_PROMPTS: dict[str, str] = {
    "solver": (
        "You are the solver of a small team of AI agents. You work problems out step by "
        "step, carefully and concisely, and commit to one final answer."
    ),
    "coder": (
        "You are the coder of a small team of AI agents. You write correct, simple, "
        "self-contained Python and think about edge cases before you answer."
    ),
    "analyst": (
        "You are the analyst of a small team of AI agents. You break problems into parts, "
        "check assumptions, and weigh the arguments of your teammates on their merits."
    ),
    "verifier": (
        "You are the verifier of a small team of AI agents. You check solutions critically, "
        "look for the exact step where a mistake happens, and fix it."
    ),
}
TEAM_SYSTEM = (
    "You are a member of a small team of AI agents who solve a problem together over a few "
    "rounds. Each message tells you your role and what to do this round."
)
"""The system prompt every agent of a task shares (with the answer format after it): the
agents' requests then begin with the same tokens — system prompt, then the problem — and
a server that keeps the last request's prompt state (llama.cpp) reuses that prefix."""
GENERIC_ROLE = (
    "You are the {role} of a small team of AI agents solving a problem together. "
    "Reason carefully and commit to one final answer."
)

ACTION_INSTRUCTIONS: dict[Action, str] = {
    Action.SOLO_PROCESS: (
        "This round you work alone: solve the problem independently, without input from "
        "your teammates."
    ),
    Action.BROADCAST_ALL: (
        "This round your answer will be sent to every teammate: solve the problem and "
        "explain your reasoning clearly enough that others can check it."
    ),
    Action.SELECTIVE_QUERY: (
        "This round you asked the teammate you trust most for their answer (shown below). "
        "Use it if it holds up, but verify it rather than copying it."
    ),
    Action.AGGREGATE_REFINE: (
        "This round you read every teammate's answer (shown below). Compare them, work out "
        "which reasoning is right (the majority can be wrong), and give a refined answer."
    ),
    Action.EXECUTE_VERIFY: (
        "This round you verify: produce your best answer and check it with care; it will be "
        "checked again by a tool or an independent derivation afterwards."
    ),
    Action.DEBATE_CHECK: (
        "This round you debate with a partner whose answer is shown below. Critique their "
        "reasoning and your own point by point, then give the answer you believe is right."
    ),
}

BYZANTINE_INSTRUCTION = (
    "(Fault injection for a robustness experiment: you are a faulty agent this round. "
    "Give a plausible but WRONG final answer and state high confidence.)"
)


STYLES = ("full", "compact")
"""How the team's messages are worded (``prompt_style``). ``full``: the team's system prompt,
the problem, a role, the round's instruction and the answer format with a confidence line
(~250 prompt tokens before a 135M model writes a word; more than half its replies to
``arith`` then committed to no answer, benchmarks/RESULTS.md, issue 35). ``compact``: a
one-line system prompt, a few worked examples as earlier turns of the chat (the form an
instruction-tuned model was trained on: it copies their one-line answers), then the
question alone; what the agent reads (its last answer, its teammates' replies, each on one
line) and a one-line instruction follow the question only when there is something to read.
No role persona and no confidence line (a reply's confidence is then
:data:`DEFAULT_CONFIDENCE`)."""

COMPACT_FORMAT: dict[str, str] = {
    "math": "Reply in one line: the calculation, then Answer: <number>.",
    "mcq": "Reply in one line: Answer: <letter>.",
    "code": "Reply with one ```python block holding the complete function.",
}
"""The compact style's answer format by task domain (every line of it readable by
:func:`parse_answer`)."""
COMPACT_TASK = {"math": "Solve the problem.", "mcq": "Pick the right option.", "code": ""}
COMPACT_SHOTS: dict[str, tuple[tuple[str, str], ...]] = {
    "math": (
        ("Tom has 5 toys. He finds 4 more toys. How many toys does Tom have now?",
         "5 + 4 = 9. Answer: 9"),
        ("Ana has 12 pens. She gives 7 pens away. How many pens does Ana have now?",
         "12 - 7 = 5. Answer: 5"),
        ("Leo has 3 boxes with 6 cars in each. How many cars does Leo have in all?",
         "3 x 6 = 18. Answer: 18"),
    ),
    "mcq": (
        ("Which of these is a fruit?\n\nA. a chair\nB. an apple\nC. a shoe\nD. a cloud",
         "Answer: B"),
    ),
    "code": (),
}  # fmt: skip
"""The compact style's worked examples (question, reply) by task domain, sent as earlier
user and assistant turns. Written by hand with names and things no generated task uses
(``arith`` and ``math`` draw theirs from :data:`core.tasks.math.NAMES` and ``ITEMS``), so
no example is a task."""
COMPACT_ACTIONS: dict[Action, str] = {
    Action.SOLO_PROCESS: "Solve it again yourself.",
    Action.BROADCAST_ALL: "Solve it; your teammates will read your reply.",
    Action.SELECTIVE_QUERY: "Check your teammate's answer before you use it.",
    Action.AGGREGATE_REFINE: "Check your teammates' answers and give the right one.",
    Action.EXECUTE_VERIFY: "Solve it and check your answer.",
    Action.DEBATE_CHECK: "Check your partner's answer and give the right one.",
}
"""The compact style's one-line instruction per action (shown when the turn reads something)."""
COMPACT_BYZANTINE = "(Fault injection: give a wrong answer.)"
COMPACT_PEER_CHARS = 200
"""The compact style cuts an earlier reply to at most this many characters (a one-line answer
is ~20 tokens)."""
COMPACT_OPENING_END = "\n\nRound "
"""Where a compact chat's first user message leaves the question: what follows it is the
turn's own (:func:`opening`)."""


def check_style(style: str) -> None:
    """Raise ``ValueError`` unless ``style`` is one of :data:`STYLES`."""
    if style not in STYLES:
        raise ValueError(f"prompt style must be one of {STYLES}, got {style!r}")


def _compact_system(domain: str) -> str:
    """The compact style's system line for a task domain: the task, then the format."""
    return f"{COMPACT_TASK[domain]} {COMPACT_FORMAT[domain]}".strip()


def _domain(task: Task) -> str:
    return task.domain if task.domain in COMPACT_FORMAT else "math"


def _compact_head(task: Task) -> Chat:
    """The compact chat's start: the system line, then the worked examples as turns."""
    chat: Chat = [{"role": "system", "content": _compact_system(_domain(task))}]
    for question, reply in COMPACT_SHOTS[_domain(task)]:
        chat += [{"role": "user", "content": question}, {"role": "assistant", "content": reply}]
    return chat


def _compact_domain(chat: Chat) -> str | None:
    """The task domain whose compact system line opens ``chat``; None: not a compact chat."""
    if not chat or chat[0].get("role") != "system":
        return None
    systems = {_compact_system(d): d for d in COMPACT_FORMAT}
    return systems.get(chat[0]["content"])


def _head_length(chat: Chat) -> int:
    """How many messages open ``chat`` before its turns: the system message, and the compact
    style's worked examples when it is a compact chat (0: no system message)."""
    if not chat or chat[0].get("role") != "system":
        return 0
    domain = _compact_domain(chat)
    return 1 + 2 * len(COMPACT_SHOTS[domain]) if domain is not None else 1


def continues(chat: Chat) -> bool:
    """Whether ``chat`` continues a conversation: it holds a reply of the agent's own (an
    assistant message after the style's worked examples)."""
    return any(m.get("role") == "assistant" for m in chat[_head_length(chat) :])


def _line(text: str, limit: int) -> str:
    """A reply on one line, cut to ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + " [...]"


def _compact_read(
    task: Task, previous: AgentStep | None, messages: Sequence[Message], peer_chars: int
) -> list[str]:
    """What a compact turn reads, a line each: its own last answer, then each message's reply
    on one line (a code answer: the function, fenced, as the full style shows it)."""
    limit = min(peer_chars, COMPACT_PEER_CHARS)
    lines = []
    if previous is not None and previous.answer is not None:
        answer, quoted = _quoted(task, previous.answer, previous.text, limit)
        lines.append(f"Your last answer: {quoted if task.domain == 'code' else answer}")
    for m in messages:
        answer, quoted = _quoted(task, m.answer, m.text, limit)
        shown = quoted if task.domain == "code" and m.answer is not None else _line(m.text, limit)
        lines.append(f"Agent {m.src}: {shown or 'no answer'}")
    return lines


def _compact_round_text(
    task: Task,
    action: int,
    round_: int,
    n_rounds: int,
    messages: Sequence[Message],
    byzantine: bool,
    peer_chars: int,
    previous: AgentStep | None,
    opening: bool,
) -> str:
    """One compact turn's user message: the question (``opening``: it starts the chat), then,
    when the turn reads something, the round, what it reads and the action's line; a turn
    that continues a conversation ends with the answer format again."""
    parts = [question_text(task)] if opening else []
    read = _compact_read(task, previous, messages, peer_chars)
    if read or not opening:
        instruction = COMPACT_ACTIONS[Action(action)]
        parts.append("\n".join([f"Round {round_ + 1} of {n_rounds}.", *read, instruction]))
    if byzantine:
        parts.append(COMPACT_BYZANTINE)
    if not opening:
        parts.append(COMPACT_FORMAT[_domain(task)])
    return "\n\n".join(parts)


def role_prompt(role: str) -> str:
    return ROLE_PROMPTS.get(role, GENERIC_ROLE.format(role=role or "member"))


def answer_format(task: Task) -> str:
    """How the reply must end, for the task's domain."""
    tail = "Then, on the last line, write `Confidence: <0-100>` (how sure you are)."
    if task.domain == "code":
        entry = task.meta.get("entry_point", "the function")
        return (
            f"Reply with exactly one fenced ```python code block containing the complete "
            f"function `{entry}` (with its signature and any imports it needs). {tail}"
        )
    if task.domain == "mcq":
        return f"End with a line `Answer: <letter>` giving the letter of one option. {tail}"
    return (
        "End with a line `Answer: <final answer>` (a number or expression only, no units); "
        f"you may also put it in \\boxed{{}}. {tail}"
    )


def question_text(task: Task) -> str:
    """The task as the agents read it (options listed for multiple choice)."""
    text = task.question.strip()
    if task.domain == "mcq" and task.choices and not re.search(r"(?m)^\s*\(?A[).:]", text):
        letters = "ABCDEFGHIJKLMNOP"
        text += "\n\n" + "\n".join(f"{letters[i]}. {c}" for i, c in enumerate(task.choices))
    return text


def _cut(text: str, limit: int = PEER_TEXT_CHARS) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "\n[...cut...]"


def _quoted(task: Task, answer: str | None, text: str, peer_chars: int) -> tuple[str, str]:
    """How a reply is shown to the turn that reads it: ``(answer, quoted text)``.

    A reply is quoted as written, cut to ``peer_chars``, under the answer read from it. A
    code answer is the function itself, so it is shown once, whole and fenced, in place of
    the reply (which held it once more, amid prose): a function cut short would be read, and
    copied, broken, and the reply's completion cap already bounds it."""
    if task.domain == "code" and answer is not None:
        return "the code below", f"```python\n{answer.strip()}\n```"
    return str(answer), _cut(text, peer_chars)


def _previous_block(task: Task, previous: AgentStep | None, peer_chars: int) -> str:
    if previous is None or not (previous.text or previous.answer):
        return ""
    answer, quoted = _quoted(task, previous.answer, previous.text, peer_chars)
    return (
        f"Your own reply from round {previous.round + 1} "
        f"(answer: {answer}, confidence {previous.confidence:.2f}):\n"
        f"<<<\n{quoted}\n>>>\n\n"
    )


def _inbox_block(task: Task, inbox: Sequence[Message], heading: str, peer_chars: int) -> str:
    if not inbox:
        return ""
    parts = []
    for m in inbox:
        answer, quoted = _quoted(task, m.answer, m.text, peer_chars)
        parts.append(
            f"Agent {m.src} (answer: {answer}, confidence {m.confidence:.2f}):\n<<<\n{quoted}\n>>>"
        )
    return f"{heading}:\n\n" + "\n\n".join(parts) + "\n\n"


VERIFY_TESTS = ("examples", "examples+written")
"""What execute_verify runs an agent's code on (docs/openai.md, What verification sees):
the docstring's examples, or those plus test cases the agent writes in one more call
(:func:`write_tests_messages`). Never the task's hidden tests: those are the scorer's alone."""

LAYOUTS = ("fresh", "conversation")
"""How an agent's requests are written. ``fresh``: every turn one new two-message chat (the
team's system prompt, then the problem, role, action, the agent's own last reply quoted and
what it read). ``conversation``: each agent keeps one growing chat — its earlier turns' user
messages and its own replies as assistant messages, then this round's user message — so a
turn's request begins with the agent's previous request and reply, token for token, and a
server that keeps earlier prompt states (llama.cpp's prompt cache, vLLM's prefix cache)
processes only the new message. The prompt's usage counts grow (the earlier messages are
sent again), the computed tokens fall (docs/openai.md, "Prompt layout"). A conversation
that has grown past a budget (``restart_after``) starts over: see :func:`conversation_start`."""


OPENING_END = "\n\nYou are the "
"""Where the text an agent's (or the decision agent's) first message shares with its
teammates' ends: after ``Problem:`` and the problem, each role's prompt and the decision
agent's persona begin with these words (:data:`ROLE_PROMPTS`, :data:`GENERIC_ROLE`)."""


def opening(chat: Chat) -> Chat | None:
    """The opening every conversation of a task starts with, when ``chat`` starts one: its
    system message (:data:`TEAM_SYSTEM` and the answer format) and its user message up to
    the end of the problem (:data:`OPENING_END`) — the same text for every agent's first
    request and the decision agent's, so a server can compute it once for them all
    (:mod:`core.backends.local_backend`). A compact chat (:data:`STYLES`) opens with its
    system line, its worked examples and the question (up to :data:`COMPACT_OPENING_END`).
    ``None``: ``chat`` continues a conversation, or is not laid out as an opening.

    Shapes: ``chat`` = ``[system, user]`` -> ``[system, user cut at the problem's end]``;
    compact ``[system, (user, assistant) * k, user]`` -> the same, the last user cut."""
    head = _head_length(chat)
    if head == 0 or [m.get("role") for m in chat[head:]] != ["user"]:
        return None
    user = chat[head]["content"]
    if _compact_domain(chat) is not None:
        end = user.find(COMPACT_OPENING_END)
        return [*chat[:head], {"role": "user", "content": user if end < 0 else user[:end]}]
    end = user.find(OPENING_END, len("Problem:\n"))
    if not user.startswith("Problem:\n") or end < 0:
        return None
    return [chat[0], {"role": "user", "content": user[:end]}]


def conversation_start(history: Sequence[PastTurn], restart_after: int | None) -> int:
    """Where the agent's current conversation begins in ``history``: just after the last
    turn that left it longer than ``restart_after`` tokens (:attr:`PastTurn.tokens`), so
    that the next request starts a new conversation, written as ``fresh`` writes it (the
    problem, the agent's last reply quoted, what it read), and later requests grow from
    that one. ``None``: the conversation never starts over.

    A request's cost grows with its length — every token attends to all the earlier ones,
    and a server's context window is finite — while what a conversation saves is only the
    text the agent has already sent."""
    if restart_after is None:
        return 0
    over = [k for k, past in enumerate(history) if past.tokens > restart_after]
    return over[-1] + 1 if over else 0


def _round_text(
    task: Task,
    role: str,
    action: int,
    round_: int,
    n_rounds: int,
    inbox: Sequence[Message],
    byzantine: bool,
    earlier: Sequence[Message],
    peer_chars: int,
    previous: AgentStep | None = None,
    opening: bool = True,
    style: str = "full",
) -> str:
    """One turn's user message; ``opening``: it starts the chat (problem and role first)."""
    if style == "compact":
        return _compact_round_text(
            task, action, round_, n_rounds, [*earlier, *inbox], byzantine, peer_chars,
            previous, opening,
        )  # fmt: skip
    head = f"Problem:\n{question_text(task)}\n\n{role_prompt(role)}\n\n" if opening else ""
    text = (
        f"{head}Round {round_ + 1} of {n_rounds}. "
        f"{ACTION_INSTRUCTIONS[Action(action)]}\n\n"
        f"{_previous_block(task, previous, peer_chars)}"
        f"{_inbox_block(task, earlier, f'Answers your teammates gave in round {round_}', peer_chars)}"
        f"{_inbox_block(task, inbox, 'Answers you read from your teammates this round', peer_chars)}"
    )
    if byzantine:
        text += BYZANTINE_INSTRUCTION + "\n\n"
    return text + answer_format(task)


def agent_chat(
    task: Task,
    role: str,
    action: int,
    round_: int,
    n_rounds: int,
    previous: AgentStep | None,
    inbox: Sequence[Message],
    byzantine: bool = False,
    earlier: Sequence[Message] = (),
    peer_chars: int = PEER_TEXT_CHARS,
    history: Sequence[PastTurn] = (),
    layout: str = "fresh",
    restart_after: int | None = None,
    style: str = "full",
) -> Chat:
    """The chat for one agent's turn: the team's shared system prompt + format, then the
    task, the agent's role, action, memory and inbox — shared text first, so that the
    agents' requests share their longest prefix (:data:`TEAM_SYSTEM`).

    ``previous``: the agent's own step of the round before (None in round 0); ``inbox``:
    the answers it read this round, in source order; ``byzantine``: injected to answer
    confidently wrong; ``earlier``: peers' answers of the round before, read along
    temporal edges (``RoundPlan.temporal``); ``peer_chars``: each earlier reply (its own and
    its peers') is cut to this many characters. ``layout`` (:data:`LAYOUTS`):
    ``conversation`` replays ``history`` (the agent's earlier turns that answered, oldest
    first) as user and assistant messages instead of quoting ``previous``, from where the
    conversation last started over (:func:`conversation_start` with ``restart_after``
    tokens); with no history both layouts write the same chat. ``style`` (:data:`STYLES`):
    ``compact`` starts with its system line and worked examples instead, and words each
    turn as :func:`_compact_round_text` does.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    check_style(style)
    chat: Chat = (
        _compact_head(task)
        if style == "compact"
        else [{"role": "system", "content": f"{TEAM_SYSTEM}\n\n{answer_format(task)}"}]
    )
    start = len(chat)
    replayed = history[conversation_start(history, restart_after) :]
    if layout == "conversation" and replayed:
        for k, past in enumerate(replayed):
            t = past.turn
            # The opening turn is replayed as it was sent: with the reply before it quoted.
            asked = _round_text(
                task, role, t.action, t.round, t.n_rounds, t.inbox, t.fault == "byzantine",
                t.earlier, peer_chars, previous=t.previous if k == 0 else None,
                opening=k == 0, style=style,
            )  # fmt: skip
            chat += [
                {"role": "user", "content": asked},
                {"role": "assistant", "content": past.reply},
            ]
        previous = None
    user = _round_text(
        task, role, action, round_, n_rounds, inbox, byzantine, earlier, peer_chars,
        previous=previous, opening=len(chat) == start, style=style,
    )  # fmt: skip
    return [*chat, {"role": "user", "content": user}]


def agent_messages(
    turn: AgentTurn,
    peer_chars: int = PEER_TEXT_CHARS,
    layout: str = "fresh",
    restart_after: int | None = None,
    style: str = "full",
) -> Chat:
    """:func:`agent_chat` of a live turn."""
    return agent_chat(
        turn.task,
        turn.role,
        turn.action,
        turn.round,
        turn.n_rounds,
        turn.previous,
        turn.inbox,
        byzantine=turn.fault == "byzantine",
        earlier=turn.earlier,
        peer_chars=peer_chars,
        history=turn.history,
        layout=layout,
        restart_after=restart_after,
        style=style,
    )


def _format(task: Task, style: str) -> str:
    """The answer format a follow-up ends with, in ``style``."""
    return COMPACT_FORMAT[_domain(task)] if style == "compact" else answer_format(task)


def code_feedback_messages(
    turn: AgentTurn,
    first: str,
    report: str,
    peer_chars: int = PEER_TEXT_CHARS,
    layout: str = "fresh",
    restart_after: int | None = None,
    style: str = "full",
) -> Chat:
    """execute_verify on code: the examples' outcome goes back to the agent for a revision
    (``report``: what the checker's examples mode says, never anything of the hidden tests)."""
    return agent_messages(turn, peer_chars, layout, restart_after, style) + [
        {"role": "assistant", "content": first},
        {
            "role": "user",
            "content": (
                "Your code was run in a sandbox on the task's examples and did not pass. "
                "Here is what it does on them:\n"
                f"<<<\n{_cut(report, 2000)}\n>>>\n\n"
                "Find the bug and give the corrected complete function. "
                + _format(turn.task, style)
            ),
        },
    ]


def write_tests_messages(
    turn: AgentTurn,
    first: str,
    peer_chars: int = PEER_TEXT_CHARS,
    layout: str = "fresh",
    restart_after: int | None = None,
    style: str = "full",
) -> Chat:
    """execute_verify on code, recipe ``examples+written``: the agent writes test cases of
    its own from the task statement (read by :func:`core.tasks.code_checker.written_examples`)."""
    entry = turn.task.meta.get("entry_point", "f")
    return agent_messages(turn, peer_chars, layout, restart_after, style) + [
        {"role": "assistant", "content": first},
        {
            "role": "user",
            "content": (
                f"Before your code is run, write up to 5 test cases for {entry} from the task "
                "statement (not from your code), one per line, as\n"
                f"assert {entry}(ARGUMENTS) == EXPECTED\n"
                "with literal arguments and expected values. Write only the assert lines."
            ),
        },
    ]


def rederive_messages(
    turn: AgentTurn,
    first: str,
    answer: str | None,
    peer_chars: int = PEER_TEXT_CHARS,
    layout: str = "fresh",
    restart_after: int | None = None,
    style: str = "full",
) -> Chat:
    """execute_verify on maths / multiple choice: an independent re-derivation of the answer."""
    if style == "compact":
        return agent_messages(turn, peer_chars, layout, restart_after, style) + [
            {"role": "assistant", "content": first},
            {"role": "user", "content": f"Check your answer ({answer!s}) once more. "
             + _format(turn.task, style)},
        ]  # fmt: skip
    check = (
        "Check each option against the question again, independently of your first pass."
        if turn.task.domain == "mcq"
        else "Re-derive the result independently, by a different method where possible "
        "(substitute back, estimate magnitudes, recount cases)."
    )
    return agent_messages(turn, peer_chars, layout, restart_after, style) + [
        {"role": "assistant", "content": first},
        {
            "role": "user",
            "content": (
                f"Verify your answer ({answer!s}). {check} If the check disagrees, find the "
                "error and correct it; otherwise confirm. " + answer_format(turn.task)
            ),
        },
    ]


def readable_finals(finals: Sequence[AgentStep]) -> list[AgentStep]:
    """The final steps the decision agent is shown: live agents with an answer or a text."""
    return [s for s in finals if s.alive and (s.answer is not None or s.text)]


def decision_chat(
    task: Task,
    finals: Sequence[AgentStep],
    n_rounds: int,
    peer_chars: int = PEER_TEXT_CHARS,
    style: str = "full",
) -> Chat:
    """The decision agent reads the agents' final answers (``finals``, already
    :func:`readable_finals`, each reply cut to ``peer_chars``) and gives the team's answer;
    ``compact`` (:data:`STYLES`): after the style's examples, the question, then each final
    reply on one line."""
    check_style(style)
    if style == "compact":
        lines = [f"Agent {s.agent}: {_line(s.text, min(peer_chars, COMPACT_PEER_CHARS))}"
                 if task.domain != "code" else
                 f"Agent {s.agent}:\n{_quoted(task, s.answer, s.text, peer_chars)[1]}"
                 for s in finals]  # fmt: skip
        body = "\n".join([f"Round {n_rounds} of {n_rounds}. Your team's answers:", *lines])
        user = f"{question_text(task)}\n\n{body}\nGive the team's final answer."
        return [*_compact_head(task), {"role": "user", "content": user}]
    system = f"{TEAM_SYSTEM}\n\n{answer_format(task)}"
    persona = (
        "You are the decision agent of the team. After several rounds of discussion you "
        "read the team members' final answers and decide the team's single final answer. "
        "Weigh the reasoning, not only the vote or the stated confidence."
    )
    parts = []
    for s in finals:
        answer, quoted = _quoted(task, s.answer, s.text, peer_chars)
        parts.append(
            f"Agent {s.agent} ({s.role}; answer: {answer}, confidence {s.confidence:.2f}):\n"
            f"<<<\n{quoted}\n>>>"
        )
    shown = "\n\n".join(parts)
    user = (
        f"Problem:\n{question_text(task)}\n\n{persona}\n\n"
        f"Final answers of the team after {n_rounds} rounds:\n\n{shown}\n\n"
        "Decide the team's answer. " + answer_format(task)
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def decision_messages(
    turn: DecisionTurn, peer_chars: int = PEER_TEXT_CHARS, style: str = "full"
) -> Chat:
    """:func:`decision_chat` of a live decision turn."""
    return decision_chat(turn.task, turn.finals, turn.n_rounds, peer_chars, style)


_CONFIDENCE = re.compile(r"(?i)confidence\s*[:：=]?\s*\**\s*(\d+(?:\.\d+)?)\s*(%?)")


def parse_answer(task: Task, text: str) -> str | None:
    """The final answer in a reply: the code (code), else what the checker reads
    (:func:`core.tasks.checkers.read_answer`: an option letter or a maths answer);
    ``None`` when there is none."""
    if task.domain == "code":
        code = extract_code(text, task.meta.get("entry_point"))
        has_code = "```" in text or re.search(r"(?m)^\s*(def|return)\b", code)
        return code if has_code and code.strip() else None
    return read_answer(task, text)


def parse_confidence(text: str) -> float:
    """The stated confidence in [0, 1] (``Confidence: 85`` -> 0.85); 0.5 when absent."""
    matches = _CONFIDENCE.findall(text)
    if not matches:
        return DEFAULT_CONFIDENCE
    value, percent = matches[-1]
    x = float(value)
    if percent or x > 1.0:
        x /= 100.0
    return min(max(x, 0.0), 1.0)


def parse_reply(task: Task, text: str) -> tuple[str | None, float]:
    """``(answer, confidence)`` read from a reply."""
    return parse_answer(task, text), parse_confidence(text)
