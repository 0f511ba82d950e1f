"""ANNA's noun-phrase-preserving tokenizer (Sec. 3.3, Tables 1 and 5).

Words inside noun phrases that WordPiece cuts into pieces (``COVID-19`` -> ``co ##vid - 19``,
``U.S.`` -> ``u . s .``) are added to the vocabulary whole, so ``COVID-19`` becomes one token.

* :func:`collect_np_words` finds the candidates: whitespace-delimited words inside spaCy noun
  chunks (inner punctuation kept, outer punctuation and a possessive ``'s`` stripped) that the
  tokenizer splits into more than one piece, most frequent first.
* :func:`extend_tokenizer` adds them to a copy of a fast (``tokenizers``) tokenizer, twice
  over: as ordinary WordPiece vocabulary entries (so ``len(tokenizer) == vocab_size`` and the
  ids live in the model's vocabulary) and as non-special ``AddedToken(single_word=True,
  normalized=True)``. The added-token pass runs before BERT's pre-tokenizer, so the word is
  never cut at its punctuation; ``normalized=True`` matches it on the normalized text (case-
  and accent-insensitive for an uncased vocabulary, the word being stored normalized) with
  offsets mapped back to the original characters; ``single_word=True`` keeps ``u.s.`` from
  matching inside ``bu.s.y``. One side effect: as vocabulary entries the words also become
  WordPiece prefixes, so a word outside any noun phrase that begins with one splits
  differently (``Orwellian``: ``orwell ##ian`` once ``orwell`` is added); the paper does not
  say how its tokenizer avoids this, and these ablations measured it as it is.
* :func:`extend_embeddings` grows the word embeddings (and a tied MLM decoder's bias) and
  starts each new row at the mean of the old pieces' rows.
* :func:`save_extended` writes encoder (config ``vocab_size`` resized) and tokenizer together;
  :func:`load_extended` reads them back.
"""

from __future__ import annotations

import copy
import logging
import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from torch import nn

from structqa.encoders.bert import BertEncoder
from structqa.text.annotate import Annotation, Annotator

log = logging.getLogger(__name__)

# Outer characters that belong to the sentence, not the word ("(COVID-19)," -> "COVID-19").
_OUTER = "\"'“”‘’«»()[]{}<>,;:!?…"
_POSSESSIVE = re.compile(r"(?:['’]s|s['’])$", re.IGNORECASE)


def _core(word: str) -> tuple[int, int]:
    """The ``[start, end)`` of ``word`` without outer punctuation or a possessive."""
    start, end = 0, len(word)
    while True:
        before = (start, end)
        while start < end and word[start] in _OUTER:
            start += 1
        while end > start and word[end - 1] in _OUTER:
            end -= 1
        # a final period belongs to an abbreviation ("U.S.", "Ph.D.") but not to "company."
        if end > start and word[end - 1] == "." and "." not in word[start : end - 1]:
            end -= 1
        m = _POSSESSIVE.search(word, start, end)
        if m is not None and m.start() > start:
            end = m.start() + (1 if m.group(0)[0] in "sS" else 0)
        if (start, end) == before:
            return start, end


def np_words(text: str, annotation: Annotation) -> list[str]:
    """The whitespace-delimited words of ``text`` that lie inside a noun chunk."""
    return [text[s:e] for s, e in np_word_spans(text, annotation)]


def np_word_spans(text: str, annotation: Annotation) -> list[tuple[int, int]]:
    """The ``[start, end)`` char ranges of :func:`np_words`."""
    chunks = annotation.noun_chunks
    if not chunks:
        return []
    starts = [c[0] for c in chunks]
    out = []
    for m in re.finditer(r"\S+", text):
        a, b = _core(m.group(0))
        if a >= b:
            continue
        s, e = m.start() + a, m.start() + b
        i = bisect_right(starts, s) - 1
        if i >= 0 and e <= chunks[i][1] and any(ch.isalnum() for ch in text[s:e]):
            out.append((s, e))
    return out


def _normalizer(tokenizer):
    return tokenizer.backend_tokenizer.normalizer


def normalize_word(tokenizer, word: str) -> str:
    """``word`` as the tokenizer's normalizer sees it (lowercased, accents stripped for an
    uncased BERT vocabulary)."""
    norm = _normalizer(tokenizer)
    return norm.normalize_str(word) if norm is not None else word


def collect_np_words(
    texts: Sequence[str],
    tokenizer,
    annotations: Sequence[Annotation] | None = None,
    min_count: int = 2,
    max_new: int | None = None,
    annotator: Annotator | None = None,
) -> list[str]:
    """Noun-phrase words that ``tokenizer`` splits into > 1 pieces, most frequent first.

    Words are counted in their normalized form (so ``COVID-19`` and ``Covid-19`` are one word
    for an uncased vocabulary), kept when seen at least ``min_count`` times, ties broken
    alphabetically; at most ``max_new`` are returned. ``annotations`` (one per text) are
    computed with ``annotator`` (a default :class:`Annotator`) when not given.
    """
    if annotations is None:
        annotations = (annotator if annotator is not None else Annotator()).annotate(texts)
    if len(annotations) != len(texts):
        raise ValueError(f"{len(annotations)} annotations for {len(texts)} texts")
    counts: Counter[str] = Counter()
    for text, annotation in zip(texts, annotations, strict=True):
        counts.update(normalize_word(tokenizer, w) for w in np_words(text, annotation))
    vocab = tokenizer.get_vocab()
    split: list[tuple[str, int]] = []
    for word, n in counts.items():
        if n < min_count or word in vocab or not word.strip():
            continue
        if len(tokenizer.tokenize(word)) > 1:
            split.append((word, n))
    split.sort(key=lambda wn: (-wn[1], wn[0]))
    words = [w for w, _ in split]
    return words if max_new is None else words[:max_new]


def extend_tokenizer(tokenizer, words: Iterable[str]):
    """A copy of ``tokenizer`` that keeps each of ``words`` whole (see the module docstring).

    Words are normalized first; those already in the vocabulary are skipped. New ids follow
    the old vocabulary in the order given.
    """
    from tokenizers import AddedToken
    from tokenizers.models import WordPiece

    if not getattr(tokenizer, "is_fast", False):
        raise ValueError("extend_tokenizer needs a fast (tokenizers-backed) tokenizer")
    new = copy.deepcopy(tokenizer)
    backend = new.backend_tokenizer
    model = backend.model
    if not isinstance(model, WordPiece):
        raise ValueError(f"expected a WordPiece tokenizer, got {type(model).__name__}")
    vocab = backend.get_vocab(with_added_tokens=True)
    fresh = list(dict.fromkeys(normalize_word(new, w) for w in words))
    fresh = [w for w in fresh if w and w not in vocab and not any(c.isspace() for c in w)]
    if not fresh:
        return new
    pieces = backend.get_vocab(with_added_tokens=False)
    if len(vocab) != len(pieces):
        raise ValueError("tokenizer already has added tokens; extend the original instead")
    base = len(pieces)
    if sorted(pieces.values()) != list(range(base)):
        raise ValueError("the WordPiece vocabulary ids are not contiguous")
    for i, word in enumerate(fresh):
        pieces[word] = base + i
    backend.model = WordPiece(
        pieces,
        unk_token=model.unk_token,
        continuing_subword_prefix=model.continuing_subword_prefix,
        max_input_chars_per_word=model.max_input_chars_per_word,
    )
    backend.add_tokens(
        [AddedToken(w, single_word=True, normalized=True, special=False) for w in fresh]
    )
    got = new.convert_tokens_to_ids(fresh)
    if got != list(range(base, base + len(fresh))):
        raise RuntimeError("added words did not get the expected ids")
    log.info("tokenizer: %d words added (vocabulary %d -> %d)", len(fresh), base, len(new))
    return new


def _piece_ids(old_tokenizer, word: str) -> list[int]:
    return old_tokenizer(word, add_special_tokens=False)["input_ids"]


def extend_embeddings(model: nn.Module, tokenizer, new_words: Iterable[str], old_tokenizer) -> None:
    """Resize the word embeddings of ``model`` (a :class:`BertEncoder`, or anything with an
    ``encoder`` attribute, e.g. a ``MaskedLM``) to ``len(tokenizer)``, in place.

    Each new word's row is the mean of the rows of the pieces ``old_tokenizer`` cuts it into;
    rows of other new ids (none, normally) keep a small random init. With an MLM head (a
    ``head`` whose decoder is tied to the embeddings) the decoder follows the new matrix and
    its bias for a new word is the mean of the pieces' biases.
    """
    encoder: BertEncoder = model if isinstance(model, BertEncoder) else model.encoder
    old_emb = encoder.embeddings.word_embeddings
    old_n, dim = old_emb.weight.shape
    n = len(tokenizer)
    if n < old_n:
        raise ValueError(f"tokenizer has {n} ids, fewer than the {old_n} embedding rows")
    weight = old_emb.weight.detach()
    new_emb = nn.Embedding(n, dim, padding_idx=old_emb.padding_idx)
    new_emb.to(device=weight.device, dtype=weight.dtype)
    head = getattr(model, "head", None)
    bias = getattr(head, "bias", None) if head is not None else None
    new_bias = None
    with torch.no_grad():
        nn.init.normal_(new_emb.weight, std=0.02)
        new_emb.weight[:old_n] = weight
        if bias is not None:
            new_bias = torch.zeros(n, dtype=bias.dtype, device=bias.device)
            new_bias[:old_n] = bias.detach()
        for word in dict.fromkeys(normalize_word(tokenizer, w) for w in new_words):
            wid = tokenizer.convert_tokens_to_ids(word)
            if wid is None or wid < old_n:
                continue
            ids = torch.tensor(_piece_ids(old_tokenizer, word), device=weight.device)
            if not len(ids):
                continue
            new_emb.weight[wid] = weight[ids].mean(0)
            if new_bias is not None:
                new_bias[wid] = bias.detach()[ids].mean(0)
    encoder.embeddings.word_embeddings = new_emb
    encoder.config.vocab_size = n  # in place: every holder of the config sees it
    if head is not None and hasattr(head, "decoder"):
        decoder = nn.Linear(dim, n, bias=False)
        decoder.weight = new_emb.weight  # stays tied: one Parameter
        head.decoder = decoder
        if new_bias is not None:
            head.bias = nn.Parameter(new_bias)


def save_extended(model: nn.Module, tokenizer, path: str | Path) -> Path:
    """Write the model (``save_pretrained``: a ``MaskedLM``, or a bare encoder) and the
    extended tokenizer to one checkpoint directory, with its manifest."""
    from structqa.encoders import save_encoder
    from structqa.manifest import write_manifest

    path = Path(path)
    if isinstance(model, BertEncoder):
        save_encoder(model, path)
    else:
        model.save_pretrained(path)
    tokenizer.save_pretrained(str(path))
    write_manifest(path)  # last: it records the files above
    return path


def load_extended(path: str | Path, mlm: bool = True):
    """``(model, tokenizer)`` from :func:`save_extended`'s directory; ``model`` is a
    ``MaskedLM`` when ``mlm`` else a ``BertEncoder``."""
    from structqa.encoders import load_encoder
    from structqa.models.build import load_tokenizer

    tokenizer = load_tokenizer(path)
    if mlm:
        from structqa.pretrain.mlm_head import MaskedLM

        model = MaskedLM.from_pretrained(path)
    else:
        model = load_encoder(path)
    encoder = model if isinstance(model, BertEncoder) else model.encoder
    n = encoder.config.vocab_size
    if n != len(tokenizer):
        raise ValueError(f"{path}: {n} embedding rows but {len(tokenizer)} tokenizer ids")
    return model, tokenizer
