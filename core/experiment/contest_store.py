"""The methods contest in the episode store: what ``agentqmix bench methods`` logs, and what
the lab's Methods view (views/methods.py) reads back.

Each evaluation the contest plays — a contestant's final run on one training seed, a fixed
reference, an ablation — is logged as one ``eval`` run, like every other evaluation, so its
episodes replay, diff and query like any other. Its ``config["contest"]`` says what it is
in the contest:

* ``id`` — the contest (its folder and settings, :func:`contest_id`), ``folder``,
  ``settings`` (the whole :class:`~core.experiment.contest.ContestConfig`);
* ``protocol``, ``label`` (the contest's name for the policy: ``qmix``, ``fixed:single``,
  ``agentprune[rank_weight=0.02]``), ``method``, ``phase``, ``seed`` (training seed; -1
  for a fixed topology), ``values`` (the configuration trained), ``trial`` (its key);
* ``tuning`` — its contestant's tuning record in this protocol: the grid, each
  configuration's figures on the tuning stream and the one chosen (None for a fixed
  topology). The tuning runs themselves are not logged: they are judged on another stream.

A run counts once it is ``finished``; a resumed contest logs what is missing (replaying a
stored trial's checkpoint, which plays the same episodes again) and nothing twice.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from core.store.db import read_session

if TYPE_CHECKING:
    from core.experiment.contest import Played, Trial

_CONTEST = "json_extract_string(r.config, '$.contest.id')"
_OF = f"FROM runs r WHERE r.kind = 'eval' AND r.status = 'finished' AND {_CONTEST} IS NOT NULL"


def contest_id(folder: Path, settings: dict[str, Any]) -> str:
    """``FOLDER-xxxxxxxx``: the same for a resumed contest (same folder, same settings; the
    ablations switch aside), another for a contest elsewhere or with other settings."""
    plan = {k: v for k, v in settings.items() if k != "ablations"}
    text = json.dumps({"folder": str(folder.resolve()), **plan}, sort_keys=True)
    return f"{folder.resolve().name}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"


class ContestLog:
    """Logs a contest's evaluations into ``db`` (each once)."""

    def __init__(self, db: str | Path, folder: Path, settings: dict[str, Any]):
        self.db, self.folder, self.settings = str(db), folder, settings
        self.id = contest_id(folder, settings)
        self._logged: set[str] | None = None

    def logged(self) -> set[str]:
        """Keys of the trials the store holds a finished run of."""
        if self._logged is None:
            with read_session(self.db) as cur:
                rows = cur.execute(
                    f"SELECT json_extract_string(r.config, '$.contest.trial') {_OF} "
                    f"AND {_CONTEST} = ?",
                    [self.id],
                ).fetchall()
            self._logged = {r[0] for r in rows}
        return self._logged

    def log(self, trial: Trial, label: str, played: Played, tuning: dict | None) -> str:
        """Log ``played`` as one ``eval`` run of this contest; returns its id."""
        from core.experiment.evaluate import log_run
        from core.experiment.policies import describe

        contest = {
            "id": self.id,
            "folder": str(self.folder.resolve()),
            "settings": self.settings,
            "protocol": trial.protocol,
            "label": label,
            "method": trial.method,
            "phase": trial.phase,
            "seed": trial.seed,
            "values": trial.config,
            "trial": trial.key,
            "tuning": tuning,
        }
        info = describe(played.policy)
        extra = {"policies": {info.label: info.as_dict()}, "contest": contest}
        run_id = log_run(
            self.db, "eval", played.opts, info.label, trial.stream, played.records, extra
        )
        self.logged().add(trial.key)
        return run_id


# --------------------------------------------------------------------------- reading


def list_contests(db: str) -> pd.DataFrame:
    """Contests in the store, newest first: ``contest``, ``folder``, ``benchmark``,
    ``protocols`` (sorted list), ``runs``, ``started_at`` (its first logged run)."""
    with read_session(db) as cur:
        return cur.execute(
            f"SELECT {_CONTEST} AS contest, "
            "any_value(json_extract_string(r.config, '$.contest.folder')) AS folder, "
            "any_value(r.benchmark) AS benchmark, "
            "list_sort(list_distinct(list(json_extract_string(r.config, '$.contest.protocol')))) "
            "AS protocols, count(*) AS runs, min(r.started_at) AS started_at "
            f"{_OF} GROUP BY contest ORDER BY started_at DESC"
        ).df()


def contest_runs(db: str, contest: str) -> pd.DataFrame:
    """Every finished run of one contest: ``run_id``, ``protocol``, ``label``, ``method``,
    ``phase``, ``seed``, ``policy`` (its episodes' policy name), ``started_at``,
    ``contest`` (the parsed ``config["contest"]``). A trial logged twice (two stores
    merged) keeps its newest run."""
    with read_session(db) as cur:
        df = cur.execute(
            "SELECT r.id AS run_id, r.policy, r.started_at, "
            "json_extract(r.config, '$.contest')::VARCHAR AS contest "
            f"{_OF} AND {_CONTEST} = ? ORDER BY r.started_at",
            [contest],
        ).df()
    parsed = [json.loads(c) for c in df["contest"]]
    df = df.assign(contest=parsed)
    for key in ("protocol", "label", "method", "phase", "seed", "trial"):
        df[key] = [c[key] for c in parsed]
    return df.drop_duplicates("trial", keep="last").reset_index(drop=True)


def contest_episodes(db: str, run_ids: tuple[str, ...]) -> pd.DataFrame:
    """Per episode of these runs: ``run_id``, ``episode``, ``task_id``, ``domain``,
    ``difficulty``, ``reward``, ``score``, ``tokens``, ``prompt``, ``completion``."""
    if not run_ids:
        return pd.DataFrame()
    with read_session(db) as cur:
        return cur.execute(
            "SELECT run_id, episode, task_id, domain, difficulty, reward, score, tokens, "
            "prompt_tokens AS prompt, completion_tokens AS completion FROM episodes "
            "WHERE run_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY run_id, episode",
            [list(run_ids)],
        ).df()


def first_round_plans(db: str, run_ids: tuple[str, ...]) -> pd.DataFrame:
    """Per episode of these runs, the plan of round 0 as text: ``run_id``, ``episode``,
    ``plan`` (its edges and each agent's action): equal text, equal designed graph."""
    if not run_ids:
        return pd.DataFrame(columns=["run_id", "episode", "plan"])
    with read_session(db) as cur:
        return cur.execute(
            "WITH a AS (SELECT run_id, episode, string_agg(action::VARCHAR, ',' ORDER BY agent) "
            "AS actions FROM agent_steps WHERE round = 0 AND run_id IN "
            "(SELECT unnest(?::VARCHAR[])) GROUP BY run_id, episode) "
            "SELECT r.run_id, r.episode, list_sort(r.edges)::VARCHAR || ' | ' || "
            "coalesce(a.actions, '') AS plan FROM rounds r LEFT JOIN a USING (run_id, episode) "
            "WHERE r.round = 0 AND r.run_id IN (SELECT unnest(?::VARCHAR[])) "
            "ORDER BY r.run_id, r.episode",
            [list(run_ids), list(run_ids)],
        ).df()
