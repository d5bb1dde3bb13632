"""A run's episodes as rows trainers and evaluators read: ``dsh-actors export RUN_DIR``.

One row per finished episode of a run folder (its report and its session log), schema
:data:`SCHEMA` (a row's ``schema`` field; a change that breaks readers changes its
version); :data:`ROW_FIELDS` says what each field holds (``docs/episode-format.md`` lists
them, generated from it). Token fields are built from the ids the endpoint sent, never by
re-tokenizing: a turn's ids are exactly what the model generated, so a turn's loss mask
is all 1 and prompts and tool results (which are in the next turn's prompt ids) are
masked out by construction.

``jsonl`` writes the rows as they are. ``parquet`` (``pip install 'dsh-actors[export]'``,
through ``pyarrow``) keeps the scalar fields and the token lists as columns and the nested
ones (``messages``, ``tools``, ``tool_events``) as JSON text columns (``messages_json``…):
their shapes vary per row. Besides the episode rows, :func:`to_rl_rows` gives the
prompt-as-messages plus reward rows RL trainers read, and :func:`to_messages_rows` one
conversation per row (``messages``, ``tools``) as chat fine-tuning reads it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

from ..agent.model import content_text, to_chat_messages
from ..core.errors import HarnessError, outcome_of
from ..core.jsonvalue import thaw
from ..log import derive_messages, scan_log
from .reports import EpisodeReport
from .termination import is_infra_code

__all__ = ["ExportError", "ROW_FIELDS", "SCHEMA", "SHAPES", "episode_rows", "export_run", "stitch_turns",
           "to_messages_rows", "to_rl_rows"]

SCHEMA = "dsh-actors/episode@1"

ROW_FIELDS: dict[str, str] = {
    "schema": f"`{SCHEMA}`",
    "id": "the episode's id",
    "agent": "the agent that ran it",
    "status": "`ok` or `failed`",
    "message": "why it failed (empty when it did not)",
    "stop": "how the model's run ended (the report's `stop`); `null` for a scripted episode",
    "termination": "how the episode ended and whose doing it was: `{reason, infra}` (the reasons are listed "
                   "under Terminations); `infra` is true exactly when the end says nothing about the model",
    "weight": "1.0, or 0.0 when the episode ended on infrastructure (`termination.infra`): what a trainer "
              "multiplies the episode's reward or loss by, so a lost runner is never the model's zero",
    "success": "the scorer's verdict; `null` when unscored",
    "final": "the model's last answer",
    "messages": "the conversation in OpenAI Chat Completions format, as the model saw it (its system prompt, "
                "user, assistant with `tool_calls`, tool results), derived from the log",
    "tools": "the tools offered to the model (Chat Completions function schemas); `null` for a scripted episode",
    "tool_events": "each call in log order: `name`, `call_id`, `arguments`, `result` (its text), `is_error`, "
                   "`error_code`, `decision` (`ok`; `denied` for a policy's denial or block; `error` for a "
                   "failure with a code), `infra` (its failure was the infrastructure's: its code is one of "
                   "dsh_actors.eval.termination.INFRA_CODES) and `duration_ms`",
    "usage": "`prompt_tokens` and `completion_tokens`, as the endpoint counted them",
    "model_s": "seconds spent waiting for the model",
    "tool_s": "seconds spent in tool steps",
    "turns": "model turns",
    "token_turns": "per model turn whose ids were recorded (`--token-ids`): `prompt_ids`, `completion_ids`, "
                   "`logprobs` and `loss_mask` (one per completion token, all 1); a turn whose endpoint sent "
                   "no ids is absent (the log says why)",
    "episode_tokens": "the whole episode as one sequence, as multi-turn RL trainers take it: `prompt_ids` (the "
                      "first turn's prompt), `response_ids` (every later token: each turn's completion, and "
                      "between turns what the next prompt adds: tool results, the chat template's framing), "
                      "`loss_mask` (1 on the model's tokens, 0 on the others) and `logprobs` (`null` on masked "
                      "tokens); `null` when some turn has no ids or a turn's prompt does not begin with the "
                      "previous prompt and completion (the template re-rendered the history)",
    "episode_tokens_missing": "why `episode_tokens` is `null` (else `null`)",
}
"""Every field of an export row and what it holds."""


class ExportError(HarnessError):
    """The folder is not a run folder, the format is unknown, or its library is missing."""

    code = "EXPORT"


def _tool_events(events: list[dict[str, Any]], report: EpisodeReport) -> list[dict[str, Any]]:
    results = [e for e in events if e.get("type") == "tool/result"]
    durations = report.latencies_ms if len(report.latencies_ms) == len(results) else [None] * len(results)
    rows = []
    for event, duration in zip(results, durations):
        decision, code = outcome_of(event)
        rows.append({"name": event["name"], "call_id": event["call_id"], "arguments": thaw(event.get("arguments")),
                     "result": content_text(thaw(event["content"])), "is_error": event["is_error"],
                     "error_code": code or None, "decision": decision, "infra": is_infra_code(code),
                     "duration_ms": duration})
    return rows


def _token_turns(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    turns = []
    for event in events:
        tokens = event.get("tokens") if event.get("type") == "assistant/message" else None
        if isinstance(tokens, dict) and tokens.get("completion_ids") is not None:
            ids = list(tokens["completion_ids"])
            turns.append({"prompt_ids": list(tokens.get("prompt_ids") or []), "completion_ids": ids,
                          "logprobs": list(tokens["logprobs"]) if tokens.get("logprobs") is not None else None,
                          "loss_mask": [1] * len(ids)})
    return turns


def stitch_turns(events: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, str | None]:
    """The episode's turns as one token sequence with its loss mask (see the module), or
    ``None`` and why not."""
    turns = [e.get("tokens") for e in events if e.get("type") == "assistant/message"]
    if not turns:
        return None, "the episode has no model turns"
    prompt: list[int] = []
    response: list[int] = []
    mask: list[int] = []
    logprobs: list[float | None] = []
    for n, tokens in enumerate(turns, 1):
        if isinstance(tokens, dict) and tokens.get("missing"):
            return None, f"turn {n} has no token ids: {tokens['missing']}"
        if not isinstance(tokens, dict) or tokens.get("completion_ids") is None or tokens.get("prompt_ids") is None:
            return None, f"turn {n} has no recorded token ids (ask for them with --token-ids)"
        ids, completion = list(tokens["prompt_ids"]), list(tokens["completion_ids"])
        turn_logprobs = tokens.get("logprobs")
        if n == 1:
            prompt = ids
        else:
            so_far = prompt + response
            if ids[:len(so_far)] != so_far:
                return None, (f"turn {n}'s prompt does not begin with the previous prompt and completion (the chat "
                              "template re-rendered the history); use token_turns")
            added = ids[len(so_far):]
            response += added
            mask += [0] * len(added)
            logprobs += [None] * len(added)
        response += completion
        mask += [1] * len(completion)
        logprobs += list(turn_logprobs) if turn_logprobs is not None else [None] * len(completion)
    return {"prompt_ids": prompt, "response_ids": response, "loss_mask": mask, "logprobs": logprobs}, None


def episode_rows(run_dir: str | Path) -> Iterator[dict[str, Any]]:
    """Each finished episode of the run folder ``run_dir`` as one row (see the module)."""
    run = Path(run_dir)
    if not (run / "run.json").is_file() or not (run / "reports").is_dir():
        raise ExportError(f"{run} is not a dsh-actors run folder (no run.json and reports/)")
    for path in sorted((run / "reports").glob("*.json")):
        report = EpisodeReport.from_json(json.loads(path.read_text()))
        log = run / "logs" / f"{report.id}.log"
        events: list[dict[str, Any]] = []
        if log.is_file():
            scan = scan_log(log.read_bytes(), log, recover_after=False)
            events = [thaw(e) for e in scan.records]
        given = next((e for e in events if e.get("type") == "system/prompt"), {})  # a model's run: its prompt
        yield {
            "schema": SCHEMA, "id": report.id, "agent": report.agent, "status": report.status,
            "message": report.message, "stop": report.stop, "termination": report.termination,
            "weight": _weight(report), "success": report.success, "final": report.final,
            "messages": to_chat_messages(str(given.get("content") or ""), derive_messages(events)),
            "tools": given.get("tools"),
            "tool_events": _tool_events(events, report),
            "usage": {"prompt_tokens": report.prompt_tokens, "completion_tokens": report.completion_tokens},
            "model_s": report.model_s, "tool_s": report.tool_s, "turns": report.turns,
            "token_turns": _token_turns(events),
            **dict(zip(("episode_tokens", "episode_tokens_missing"), stitch_turns(events))),
        }


def _weight(report: EpisodeReport) -> float:
    """0.0 for an episode the infrastructure ended (mask it), else 1.0."""
    return 0.0 if report.termination is not None and report.termination.get("infra") else 1.0


def to_rl_rows(rows: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Rows as RL trainers read them: ``prompt`` (the messages before the first model turn:
    the system prompt and the task), ``messages`` (the whole conversation), ``reward`` (1.0
    for a success, 0.0 otherwise, ``None`` when unscored) and ``weight`` (0.0 when the
    infrastructure ended the episode: its reward says nothing about the model)."""
    for row in rows:
        first = next((i for i, m in enumerate(row["messages"]) if m["role"] == "assistant"), len(row["messages"]))
        yield {"id": row["id"], "prompt": row["messages"][:first], "messages": row["messages"],
               "reward": None if row["success"] is None else float(bool(row["success"])), "weight": row["weight"]}


def to_messages_rows(rows: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """One conversation per row as chat fine-tuning reads it: ``messages``, for a model
    episode the ``tools`` it was offered, and ``weight`` (0.0 when the infrastructure ended it)."""
    for row in rows:
        yield {"messages": row["messages"], **({"tools": row["tools"]} if row["tools"] else {}),
               "weight": row["weight"]}


SHAPES = {"episodes": lambda rows: rows, "rl": to_rl_rows, "messages": to_messages_rows}
"""What ``export_run`` can write: the episode rows, RL rows, or conversations."""

_JSON_COLUMNS = ("messages", "tools", "tool_events")  # shapes vary per row: JSON text in Parquet


_BATCH = 1000  # rows per Parquet row group: a run of any size is written in bounded memory


def _flat(row: dict[str, Any], shape: str) -> dict[str, Any]:
    cells = {k: v for k, v in row.items() if k not in (*_JSON_COLUMNS, "usage")}
    if "usage" in row:
        cells.update(row["usage"])
    cells.update({f"{k}_json": json.dumps(row.get(k), ensure_ascii=False) for k in _JSON_COLUMNS if k in row
                  or (shape == "messages" and k == "tools")})
    return cells


def _schema(shape: str) -> Any:
    import pyarrow as pa

    ids, floats = pa.list_(pa.int64()), pa.list_(pa.float64())
    if shape == "episodes":
        turn = pa.struct([("prompt_ids", ids), ("completion_ids", ids), ("logprobs", floats),
                          ("loss_mask", pa.list_(pa.int8()))])
        whole = pa.struct([("prompt_ids", ids), ("response_ids", ids), ("loss_mask", pa.list_(pa.int8())),
                           ("logprobs", floats)])
        termination = pa.struct([("reason", pa.string()), ("infra", pa.bool_())])
        return pa.schema([("schema", pa.string()), ("id", pa.string()), ("agent", pa.string()),
                          ("status", pa.string()), ("message", pa.string()), ("stop", pa.string()),
                          ("termination", termination), ("weight", pa.float64()),
                          ("success", pa.bool_()), ("final", pa.string()), ("model_s", pa.float64()),
                          ("tool_s", pa.float64()), ("turns", pa.int64()), ("token_turns", pa.list_(turn)),
                          ("episode_tokens", whole), ("episode_tokens_missing", pa.string()),
                          ("prompt_tokens", pa.int64()), ("completion_tokens", pa.int64()),
                          ("messages_json", pa.string()), ("tools_json", pa.string()),
                          ("tool_events_json", pa.string())], metadata={"schema": SCHEMA})
    if shape == "rl":  # the prompt as a list of {role, content}: what RL trainers' datasets read
        prompt = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
        return pa.schema([("id", pa.string()), ("prompt", prompt), ("messages_json", pa.string()),
                          ("reward", pa.float64()), ("weight", pa.float64())])
    return pa.schema([("messages_json", pa.string()), ("tools_json", pa.string()), ("weight", pa.float64())])


def _write_parquet(rows: Iterator[dict[str, Any]], shape: str, out: Path) -> int:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ExportError("parquet export needs pyarrow: pip install 'dsh-actors[export]'") from None
    schema, count, batch = _schema(shape), 0, []
    with pq.ParquetWriter(str(out), schema) as writer:
        for row in rows:
            batch.append(_flat(row, shape))
            if len(batch) == _BATCH:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                count, batch = count + len(batch), []
        if batch or not count:  # an empty run is still a file with the schema
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            count += len(batch)
    return count


def _write_jsonl(rows: Iterator[dict[str, Any]], out: Path) -> int:
    count = 0
    with open(out, "w", encoding="utf-8") as sink:
        for row in rows:
            sink.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    return count


def export_run(run_dir: str | Path, out: str | Path, fmt: str = "jsonl", shape: str = "episodes") -> int:
    """Write ``run_dir``'s episodes to ``out`` as ``jsonl`` or ``parquet`` rows of ``shape``
    (see :data:`SHAPES`); the row count. Rows are streamed (a run of any size is exported in
    bounded memory) into a temporary file that replaces ``out`` only once it is whole."""
    if fmt not in ("jsonl", "parquet"):
        raise ExportError(f"export format must be jsonl or parquet; got {fmt!r}")
    if shape not in SHAPES:
        raise ExportError(f"export shape must be one of {', '.join(SHAPES)}; got {shape!r}")
    target = Path(out)
    partial = target.with_name(f".{target.name}.partial")
    rows = SHAPES[shape](episode_rows(run_dir))
    try:
        count = _write_parquet(rows, shape, partial) if fmt == "parquet" else _write_jsonl(rows, partial)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return count
