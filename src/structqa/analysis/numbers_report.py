"""``structqa analyze numbers``: NC-BERT's Tables 1, 6 and 7 for one checkpoint, written as
``numbers.md`` (three markdown tables shaped like the paper's), ``numbers.json`` (the same
numbers, shares and recalls as fractions, with the checkpoint's resolved config) and
``attention_shares.png`` (Table 6 as a grouped bar chart).

The checkpoint is a drop-train checkpoint directory (GenBERT / NC-BERT: all three tables),
or ``default`` / an HF BERT directory (an encoder alone: Table 1 only). DROP questions are
read, annotated and featurized as drop-train reads them (``data.spacy_model``,
``data.annotation_cache``, ``data.max_seq_len`` ... of the checkpoint's config), except that
the spaCy annotation is always made: the analyses need entity tokens even when the model's
own mask does not.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from structqa.analysis.numbers import (
    PAPER_NUMBERS,
    SHARE_NAMES,
    AttentionShares,
    NeighborProbe,
    NumberRecall,
    attention_shares,
    number_neighbors,
    recall_at_k,
)
from structqa.features.drop_features import DropBatch
from structqa.io import write_json

log = logging.getLogger(__name__)

PAPER_KS = (1, 2, 5, 10, 20, 50)  # the K of the paper's Table 7
TEXT_HINT = "pip install -e '.[text]'"


class SpacyMissing(RuntimeError):
    """spaCy or its model is missing, and the annotation cache does not hold every text."""


@dataclass(frozen=True)
class NumberReport:
    checkpoint: str
    probe: NeighborProbe
    shares: AttentionShares | None = None
    recall: NumberRecall | None = None
    data: str | None = None
    questions: int = 0
    notes: tuple[str, ...] = ()
    config: dict[str, Any] | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint,
            "data": self.data,
            "questions": self.questions,
            "notes": list(self.notes),
            "table1": self.probe.to_dict(),
            "table6": self.shares.to_dict() if self.shares is not None else None,
            "table7": self.recall.to_dict() if self.recall is not None else None,
            "config": self.config,
        }


@dataclass(frozen=True)
class NumberFiles:
    markdown: Path
    json: Path
    png: Path | None


# ---- loading ---------------------------------------------------------------------------------


def _vocab(tokenizer: Any, size: int) -> list[str]:
    """Token of each embedding row; rows the tokenizer does not name get '' (never listed)."""
    vocab = [""] * size
    for token, i in tokenizer.get_vocab().items():
        if 0 <= i < size:
            vocab[i] = token
    return vocab


def _is_drop_checkpoint(path: Path) -> bool:
    return (path / "structqa_config.json").is_file() and (path / "encoder_config.json").is_file()


def drop_batches(
    cfg: Any,
    tokenizer: Any,
    drop_file: str | Path,
    max_questions: int | None = None,
    batch_size: int = 8,
) -> tuple[list[DropBatch], int]:
    """The questions of a DROP file (the first ``max_questions``) as drop-train features
    with entity tables, in padded batches (longest first); returns (batches, questions)."""
    from structqa.data.drop import read_drop
    from structqa.features.batching import sorted_batches
    from structqa.features.drop_features import collate_drop
    from structqa.ncbert.loop import featurize

    examples = read_drop(drop_file).examples
    if max_questions is not None:
        examples = examples[:max_questions]
    if not examples:
        raise ValueError(f"{drop_file}: no questions to analyse")
    try:  # always annotated: the tables need entity tokens even where the mask does not
        features, report = featurize(examples, tokenizer, cfg, annotate=True)
    except (ImportError, OSError) as err:
        raise SpacyMissing(
            f"entity tokens need spaCy and the model {cfg.data.spacy_model!r} ({TEXT_HINT}): {err}"
        ) from err
    log.info("%s: %s", drop_file, report.summary())
    pad_id = int(tokenizer.pad_token_id or 0)
    batches = [
        collate_drop(features, idx, pad_id)
        for idx in sorted_batches([len(f) for f in features], batch_size)
    ]
    return batches, len(examples)


def analyze_numbers(
    checkpoint: str | Path,
    drop_file: str | Path | None = None,
    max_questions: int | None = None,
    top_k: int = 5,
    ks: Sequence[int] = PAPER_KS,
    numbers: Sequence[str] | None = PAPER_NUMBERS,
    subwords: bool = False,
    batch_size: int = 8,
) -> NumberReport:
    """All three analyses a checkpoint allows (see the module docs)."""
    from structqa.models.build import load_tokenizer, resolve_encoder_path

    name = str(checkpoint)
    path = Path(checkpoint).expanduser()
    if name != "default" and _is_drop_checkpoint(path):
        from structqa.ncbert.loop import load_genbert, resolve_drop_file

        model, tokenizer, cfg = load_genbert(path)
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model.to(device)
        emb = model.encoder.embeddings.word_embeddings.weight
        probe = number_neighbors(emb, _vocab(tokenizer, emb.shape[0]), top_k, numbers, subwords)
        notes: list[str] = []
        if drop_file is None:
            drop_file = cfg.data.eval
            notes.append(f"no --data given: the checkpoint's eval file {drop_file}")
        data = resolve_drop_file(str(drop_file), cfg.data.dir)
        batches, questions = drop_batches(cfg, tokenizer, data, max_questions, batch_size)
        shares = attention_shares(model, batches)
        recall = recall_at_k(model, batches, ks)
        if model.nc_layer is None:
            notes.append("the model has no NC layer: Tables 6 and 7 show the last encoder layer")
        return NumberReport(
            name, probe, shares, recall, str(data), questions, tuple(notes), cfg.to_dict()
        )
    from structqa.encoders.bert import BertEncoder

    encoder_dir = resolve_encoder_path(name)
    encoder = BertEncoder.from_pretrained(encoder_dir)
    tokenizer = load_tokenizer(encoder_dir)
    emb = encoder.embeddings.word_embeddings.weight
    probe = number_neighbors(emb, _vocab(tokenizer, emb.shape[0]), top_k, numbers, subwords)
    notes = [
        f"{name} is an encoder, not a drop-train (GenBERT / NC-BERT) checkpoint: only Table 1; "
        "Tables 6 and 7 need a GenBERT checkpoint"
    ]
    if drop_file is not None:
        notes.append(f"--data {drop_file} is not used without a GenBERT checkpoint")
    return NumberReport(name, probe, notes=tuple(notes), config={"encoder": str(encoder_dir)})


# ---- writing ---------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return "n/a" if x != x else f"{100 * x:.2f}"


def _num(x: float) -> str:
    return "n/a" if x != x else f"{x:.4f}"


def table1_markdown(probe: NeighborProbe) -> list[str]:
    lines = [
        f"## Table 1: what is in number embeddings (top-{probe.k} by cosine similarity)",
        "",
        f"| Number | Top-{probe.k} similar tokens |",
        "|---|---|",
    ]
    for row in probe.rows:
        lines.append(f"| {row.number} | {', '.join(n.token for n in row.neighbors)} |")
    lines += [
        "",
        f"Input word embeddings; FAISS IndexFlatIP over L2-normalized rows; {probe.candidates} "
        "candidate tokens: numerals (digits, number words), non-alphabetic and special tokens"
        + ("" if probe.subwords else " and '##' pieces")
        + " excluded"
        + ("; alphabetic '##' pieces kept." if probe.subwords else "."),
    ]
    if probe.missing:
        lines.append(f"Not single vocabulary tokens, not probed: {', '.join(probe.missing)}.")
    return lines


def table6_markdown(shares: AttentionShares) -> list[str]:
    lines = [
        "## Table 6: attention from passage numbers (in %)",
        "",
        "| Layer | Entity | Type | Other | Number tokens |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in shares.rows:
        lines.append(
            f"| {r.name} | {_pct(r.entity)} | {_pct(r.type)} | {_pct(r.other)} | {r.tokens} |"
        )
    lines += [
        "",
        "Share of each passage number token's attention going to the entity tokens of its "
        f"sentence, its type words (m = {shares.type_words} nearest words within "
        f"k = {shares.type_window}; a key that is both counts as entity) and all other tokens, "
        "averaged over the heads, then over number tokens.",
    ]
    skipped = [f"{r.name}: {r.skipped}" for r in shares.rows if r.skipped]
    if skipped:
        lines.append(f"Number tokens with no allowed key, left out: {'; '.join(skipped)}.")
    return lines


def table7_markdown(recall: NumberRecall) -> list[str]:
    head = ["Recall@K"]
    for r in recall.rows:
        head += [f"{r.name}: entity", f"{r.name}: type", f"{r.name}: entity+type"]
    lines = [
        "## Table 7: Recall@K of entity and type tokens retrieved by number representations",
        "",
        "| " + " | ".join(head) + " |",
        "|---" + "|---:" * (len(head) - 1) + "|",
    ]
    for i, k in enumerate(recall.ks):
        cells = [str(k)]
        for r in recall.rows:
            cells += [_num(r.entity[i]), _num(r.type[i]), _num(r.both[i])]
        lines.append("| " + " | ".join(cells) + " |")
    counts = "; ".join(
        f"{r.name}: {r.numbers} numbers, " + ", ".join(f"{s} {n}" for s, n in r.queries.items())
        for r in recall.rows
    )
    lines += [
        "",
        "Query: a passage number's first token; candidates: the other tokens of its passage "
        "(its own digits left out), ranked by cosine similarity; recall averaged over numbers "
        f"with a non-empty ground truth ({counts}).",
    ]
    return lines


def report_markdown(report: NumberReport) -> str:
    lines = [f"# Number analyses (NC-BERT Tables 1, 6, 7): {report.checkpoint}", ""]
    if report.data is not None:
        lines += [f"Data: {report.data} ({report.questions} questions).", ""]
    lines += [f"Note: {n}." for n in report.notes]
    if report.notes:
        lines.append("")
    lines += table1_markdown(report.probe)
    if report.shares is not None:
        lines += [""] + table6_markdown(report.shares)
    if report.recall is not None:
        lines += [""] + table7_markdown(report.recall)
    return "\n".join(lines) + "\n"


def plot_shares(shares: AttentionShares, path: str | Path, title: str = "") -> Path:
    """Table 6 as grouped bars: one group per relation (entity, type, other), one bar per row."""
    # the Agg canvas directly, not pyplot: no global figure state (as analysis.render does)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    fig = Figure(figsize=(7.0, 4.0), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    n = max(len(shares.rows), 1)
    width = 0.8 / n
    colours = ("#1f4e99", "#e6550d", "#31a354", "#756bb1")
    for i, row in enumerate(shares.rows):
        values = [100 * v for v in (row.entity, row.type, row.other)]
        xs = [g - 0.4 + width * (i + 0.5) for g in range(len(SHARE_NAMES))]
        bars = ax.bar(xs, values, width, label=row.name, color=colours[i % len(colours)])
        ax.bar_label(bars, fmt="%.1f", fontsize=7, padding=1)
    ax.set_xticks(range(len(SHARE_NAMES)), [s.capitalize() for s in SHARE_NAMES])
    ax.set_ylabel("share of attention (%)")
    ax.set_ylim(0, 105)
    ax.set_title(title or "Attention from passage numbers (NC-BERT Table 6)", fontsize=10)
    ax.legend(fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path


def _json_ready(obj: Any) -> Any:
    """NaN (an average over nothing) -> null: strict JSON readers reject NaN."""
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, dict):
        return {k: _json_ready(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_ready(v) for v in obj]
    return obj


def write_report(report: NumberReport, out_dir: str | Path) -> NumberFiles:
    """numbers.md, numbers.json and (with Table 6) attention_shares.png under ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md = out / "numbers.md"
    md.write_text(report_markdown(report), encoding="utf-8")
    js = out / "numbers.json"
    write_json(js, _json_ready(report.to_dict()))
    png = None
    if report.shares is not None:
        png = plot_shares(report.shares, out / "attention_shares.png")
    return NumberFiles(md, js, png)


__all__ = [
    "PAPER_KS",
    "NumberFiles",
    "NumberReport",
    "SpacyMissing",
    "analyze_numbers",
    "drop_batches",
    "plot_shares",
    "report_markdown",
    "write_report",
]
