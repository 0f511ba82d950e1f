"""Sentence-similarity features for the answerability verifier (its ``similarity`` kind).

An unanswerable question often shares its words with the passage but not its meaning ("What
did the Broncos lose?" over a passage where they won). A sentence-embedding encoder scores
how close the question is to each sentence of the passage. The default encoder as shipped
(all-MiniLM-L6-v2) is such an encoder: mean-pooled, normalized token states, compared by
cosine similarity. The features are the question's largest similarity to a sentence, its
similarity to the sentence of the span the model would answer with, and their difference.

The encoder is the shipped one, not the fine-tuned reader's: fine-tuning for spans changes
what its pooled states mean. It is loaded once per process (:func:`sentence_encoder`) and
every text it embeds is kept, so passages shared by several questions are embedded once.
It runs in bf16 where bf16 pays on the CPU (as ``bf16: auto`` decides for the reader; three
times faster on a CPU with fast bf16), else in fp32; the similarities differ by about 0.01
between the two, far less than what separates answerable from unanswerable questions.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np

from structqa.data.records import Example
from structqa.decoding import Prediction

SIMILARITY_FEATURES = (
    "sentence_similarity",  # the question's largest cosine similarity to a passage sentence
    "answer_sentence_similarity",  # ... to the sentence of the best span
    "similarity_gap",  # sentence_similarity - answer_sentence_similarity
)
DEFAULT = "default"  # the encoder named in a saved verifier: the default encoder as shipped
MAX_TOKENS = 128  # a sentence (or question) longer than this is embedded by its start
CACHE_TEXTS = 50_000  # embeddings kept per process (a served model sees unbounded text)


@contextmanager
def _no_progress_bar() -> Iterator[None]:
    """Without transformers' "Loading weights" bar: a local encoder loads in a blink, and the
    bar cluttered every `ask` and `index` answer printed below it."""
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            hf_logging.enable_progress_bar()


class SentenceEncoder:
    """Normalized, mean-pooled embeddings of a BERT-style encoder directory."""

    def __init__(
        self,
        path: str,
        batch_size: int = 64,
        bf16: str = "auto",
        max_tokens: int = MAX_TOKENS,
        cache: bool = True,
    ) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        from structqa.runtime import use_bf16

        self.path = path
        self.bf16 = use_bf16(bf16, torch.device("cpu"))
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        with _no_progress_bar():
            model = AutoModel.from_pretrained(path).eval()
        # whole-bf16 weights, as the reader's inference (structqa.inference.bf16_weights)
        self.model = model.to(torch.bfloat16) if self.bf16 else model
        self.batch_size = batch_size
        self.max_tokens = max_tokens  # longer texts are embedded by their start
        self.keep = cache  # keep every embedding (texts seen again), or none (an index's chunks)
        self.cache: dict[str, np.ndarray] = {}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), hidden) unit vectors."""
        import torch

        wanted = dict.fromkeys(texts)
        todo = sorted((t for t in wanted if t not in self.cache), key=len)
        if len(self.cache) + len(todo) > CACHE_TEXTS:
            # make room, keeping what this call reads from the cache (clearing it all raised a
            # KeyError for a text counted as cached a moment before)
            kept = {t: self.cache[t] for t in wanted if t in self.cache}
            self.cache.clear()
            self.cache.update(kept)
        made: dict[str, np.ndarray] = {}
        for i in range(0, len(todo), self.batch_size):
            chunk = todo[i : i + self.batch_size]
            batch = self.tokenizer(
                chunk,
                padding=True,
                truncation=True,
                max_length=self.max_tokens,
                return_tensors="pt",
            )
            with torch.inference_mode():
                hidden = self.model(**batch).last_hidden_state.float()
            mask = batch["attention_mask"][..., None]
            pooled = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)
            made.update(zip(chunk, pooled.float().numpy(), strict=True))
        if self.keep:
            self.cache.update(made)
        return np.stack([made[t] if t in made else self.cache[t] for t in texts])


@functools.lru_cache(maxsize=2)
def sentence_encoder(name: str = DEFAULT) -> SentenceEncoder:
    """The process's encoder for ``name`` (:data:`DEFAULT`, or a local encoder directory)."""
    from structqa.paths import default_encoder_path

    return SentenceEncoder(str(default_encoder_path()) if name == DEFAULT else name)


def similarity_features(
    examples: Sequence[Example],
    predictions: Mapping[str, Prediction],
    encode: SentenceEncoder,
    spans_of: Mapping[str, list[tuple[int, int]]],
) -> np.ndarray:
    """(Q, len(SIMILARITY_FEATURES)) for the examples in order; ``spans_of`` maps each
    context to its sentences' character spans."""
    texts = [ex.question for ex in examples]
    for ex in examples:
        texts += [ex.context[a:b] for a, b in spans_of[ex.context]]
    encode(texts)  # one batched pass over everything not yet embedded
    rows = []
    for ex in examples:
        spans = spans_of[ex.context]
        sims = encode([ex.context[a:b] for a, b in spans]) @ encode([ex.question])[0]
        p = predictions[ex.id]
        at = p.start_char if p.text else -1
        k = next((i for i, (a, b) in enumerate(spans) if a <= at < b), None)
        own = float(sims[k]) if k is not None else float(sims.min())
        rows.append([float(sims.max()), own, float(sims.max()) - own])
    return np.array(rows, dtype=float).reshape(len(examples), len(SIMILARITY_FEATURES))
