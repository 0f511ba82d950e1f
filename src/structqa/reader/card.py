"""The built reader's card: ``card.json`` (what ``find_reader`` looks for) and
``MODEL_CARD.md``, from the stage records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from structqa.config import Config
from structqa.io import write_json, write_text
from structqa.paths import READER_CARD
from structqa.provenance import git_info, machine_info
from structqa.reader.data import data_summary
from structqa.runtime import cpu_kind

#: held-out metrics shown on the card, per file
SHOWN = {
    "squad1": ("exact_match", "f1"),
    "squad2": ("exact", "f1", "HasAns_f1", "NoAns_f1", "NoAns_auc", "ece"),
}


def _row(scores: dict[str, Any], key: str, names: tuple[str, ...]) -> str:
    metrics = scores.get(key) or {}
    cells = [f"{metrics[n]:.2f}" if isinstance(metrics.get(n), int | float) else "-" for n in names]
    return " | ".join(cells)


def _table(heldout: dict[str, Any], baseline: dict[str, Any] | None) -> list[str]:
    lines = []
    for name, metrics in SHOWN.items():
        lines += [
            "",
            f"| {name} held-out | " + " | ".join(metrics) + " |",
            "|---" * (len(metrics) + 1) + "|",
        ]
        for runtime in ("torch", "onnx-int8"):
            lines.append(f"| reader, {runtime} | {_row(heldout, f'{name}/{runtime}', metrics)} |")
        if baseline is not None:
            # the baseline has no validation slice: its SQuAD 2.0 threshold was tuned on the
            # held-out file itself, so its figures there are a ceiling, not a comparison
            label = "plain baseline, torch" + (
                " (threshold tuned on this file)" if name == "squad2" else ""
            )
            lines.append(f"| {label} | {_row(baseline, f'{name}/torch', metrics)} |")
    return lines


def _soup_lines(soup: dict[str, Any] | None) -> list[str]:
    if not soup:
        return []
    scores = ", ".join(f"{v:.2f}" for v in soup["member_scores"])
    return [
        f"- weights: the greedy soup of {len(soup['kept'])} of {len(soup['members'])} runs "
        f"from one start (validation F1 of the runs {scores}; of the soup {soup['score']:.2f})"
    ]


def _calibrated_on(record: dict[str, Any] | None) -> str:
    if not record:
        return ""
    if record.get("skipped") or record.get("fallback"):
        return f" ({record.get('skipped') or record['fallback']})"
    source = record.get("share_from", "SQuAD 2.0's training split")
    left_out = record.get("rewrites_left_out") or 0
    rewrites = f"; its {left_out} rewrites left out" if left_out else ""
    return (
        f"'s {record['questions']} human-written questions ({record['unanswerable']} "
        f"unanswerable{rewrites}), weighted to "
        f"an unanswerable share of {100 * record['unanswerable_share']:.1f} % "
        f"({source})" + _offset(record.get("threshold_offset"), record.get("offset_note"))
    )


def _offset(offset: float | None, note: str | None) -> str:
    if note:
        return f"; {note}"
    if not offset:
        return ""
    return (
        f", then moved by {offset:+.2f}: the offset measured for articles the reader never "
        "trained on (docs/results/reader/README.md)"
    )


def _short(info: dict[str, Any] | None) -> str:
    commit = (info or {}).get("commit") or "unknown"
    return commit[:12] + ("+edits" if (info or {}).get("dirty") else "")


def _commits(records: dict[str, dict[str, Any] | None], card: dict[str, Any]) -> str:
    """The commit line: one commit where every stage (and each run of the train stage)
    finished at the card's, else each one's (a record written before stages kept theirs
    shows as "not recorded")."""
    stages: dict[str, dict[str, Any] | None] = {}
    for stage, record in records.items():
        if not record:
            continue
        if stage == "train":
            for i, member in enumerate(record.get("members") or []):
                stages[f"run {i}"] = member.get("commit")
        stages[stage] = record.get("commit")
    shown = {s: _short(c) if c else "not recorded" for s, c in stages.items()}
    if all(v == _short(card) for v in shown.values()):
        return f"commit: `{_short(card)}`"
    each = ", ".join(f"{s} `{v}`" for s, v in shown.items())
    return f"commits: {each}, card `{_short(card)}`"


def _sized(size: int | None) -> str:
    return f"; **the first {size} questions of each file only** (--heldout-size)" if size else ""


def build_seconds(records: dict[str, dict[str, Any] | None]) -> tuple[float, float | None]:
    """The whole build's seconds and its training's: every stage's time over every start
    (the stages count their stopped starts), the train stage's at least its runs' training
    time over every start of each run (a run trained by an earlier command, or recorded
    before stages counted their starts) where the runs recorded it (training None where
    not)."""
    train = records.get("train") or {}
    other = sum(r["seconds"] for s, r in records.items() if r and s != "train" and "seconds" in r)
    stage = float(train.get("seconds", 0.0))
    trained = [r.get("training_seconds") for r in train.get("members") or [train]]
    if not train or not all(isinstance(s, int | float) for s in trained):
        return other + stage, None
    training = float(sum(trained))
    return other + max(stage, training + float(train.get("soup_seconds", 0.0))), training


def write_card(
    out: Path,
    command: str,
    recipe: list[str],
    records: dict[str, dict[str, Any] | None],
    cfg: Config,
    base_cfg: Config | None,
) -> dict[str, Any]:
    """Write both files into ``out`` from the stage records; return the card."""
    card: dict[str, Any] = {
        "checkpoint": str(out / "run" / "best"),
        "int8": str(out / "run" / "best" / "onnx"),
        "command": command,
        "recipe": recipe,
        "config": cfg.to_dict(),
        "baseline_config": None if base_cfg is None else base_cfg.to_dict(),
        "data": records["data"],
        "validation": (records["train"] or {}).get("validation"),
        "calibration": (records.get("calibrate") or {}).get("calibration")
        or (records["train"] or {}).get("calibration"),
        "soup": (records["train"] or {}).get("soup"),
        "heldout": records["heldout"],
        "baseline": records["baseline"],
        "seconds": {s: r["seconds"] for s, r in records.items() if r and "seconds" in r},
        "commit": git_info(),
        "machine": machine_info(),
        "cpu_kind": cpu_kind(),
    }
    seconds, training = build_seconds(records)
    card["build_seconds"], card["training_seconds"] = seconds, training
    write_json(out / READER_CARD, card)
    runs = len((records.get("train") or {}).get("members") or [None])
    timed = (
        ""
        if training is None
        else f" (training {training / 60:.0f} min over {runs} run{'s' * (runs > 1)}, "
        "every start counted)"
    )
    commit = _commits(records, card["commit"])
    lines = [
        "# General reader",
        "",
        f"Built by `{command}`.",
        "",
        f"- data: {data_summary(records['data'])}",
        f"- recipe: `{' '.join(card['recipe'])}`",
        *_soup_lines(card["soup"]),
        f"- checkpoint: `{card['checkpoint']}`; int8 graph: `{card['int8']}`",
        f"- {commit}; CPU: {card['cpu_kind']}; build time {seconds / 60:.0f} min{timed}",
        "- held-out scores: SQuAD 1.1 with every question answered (no abstention), SQuAD "
        "2.0 at the no-answer threshold fitted on the validation slice"
        + _calibrated_on(records.get("calibrate"))
        + _sized((records["heldout"] or {}).get("heldout_size")),
        *_table(card["heldout"] or {}, card["baseline"]),
        "",
    ]
    write_text(out / "MODEL_CARD.md", "\n".join(lines))
    return card
