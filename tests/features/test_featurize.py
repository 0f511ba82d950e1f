"""Featurization: doc-stride windows, char offsets and answer targets."""

from __future__ import annotations

import dataclasses
import random
import unicodedata
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from structqa.data import read_examples
from structqa.data.records import Answer, Example
from structqa.features.coverage import WindowsLoseText, check_covered
from structqa.features.squad import Feature, FeatureConfig, answer_text, featurize
from structqa.models.build import load_tokenizer
from structqa.text.annotate import POS_IDS, Annotation


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint: Path):
    return load_tokenizer(tiny_checkpoint)


@pytest.fixture(scope="module")
def mini(shared_data: Path) -> tuple[Example, ...]:
    return read_examples(shared_data / "fixtures" / "squad-v1.1-mini.json").examples


def fold(text: str) -> str:
    """What an uncased BERT tokenizer does to a context span: lowercase, accents stripped."""
    decomposed = unicodedata.normalize("NFD", text.lower())
    return "".join(c for c in decomposed if unicodedata.category(c) != "Mn")


def context_tokens(f: Feature) -> np.ndarray:
    return np.nonzero(f.offsets[:, 0] >= 0)[0]


def windows_by_example(features: Sequence[Feature]) -> dict[int, list[Feature]]:
    out: dict[int, list[Feature]] = defaultdict(list)
    for f in features:
        out[f.example_index].append(f)
    return out


def check_layout(f: Feature, ex: Example, tokenizer, cfg: FeatureConfig) -> None:
    """[CLS] question [SEP] context [SEP]; offsets -1 except on context tokens, which cover
    exactly the characters their WordPiece came from."""
    ids, types, offs = f.input_ids, f.token_type_ids, f.offsets
    assert len(ids) <= cfg.max_seq_len
    assert ids.dtype == np.int64 and offs.shape == (len(ids), 2)
    seps = np.nonzero(ids == tokenizer.sep_token_id)[0]
    assert ids[0] == tokenizer.cls_token_id
    assert len(seps) == 2 and seps[1] == len(ids) - 1
    assert (types[: seps[0] + 1] == 0).all() and (types[seps[0] + 1 :] == 1).all()
    assert (offs[: seps[0] + 1] == -1).all()  # [CLS], question, first [SEP]
    assert (offs[-1] == -1).all()  # final [SEP]
    ctx = np.arange(seps[0] + 1, len(ids) - 1)
    assert np.array_equal(context_tokens(f), ctx)
    pieces = tokenizer.convert_ids_to_tokens(ids[ctx].tolist())
    for (start, end), piece in zip(offs[ctx], pieces, strict=True):
        assert 0 <= start < end <= len(ex.context)
        if piece != tokenizer.unk_token:
            assert fold(ex.context[start:end]) == piece.removeprefix("##")
    assert (np.diff(offs[ctx, 0]) > 0).all()  # context tokens in order


def test_mini_fixture_layout_and_answers(mini: tuple[Example, ...], tokenizer) -> None:
    cfg = FeatureConfig()
    features, report = featurize(mini, tokenizer, cfg)
    assert [f.example_index for f in features] == [0, 1, 2, 3, 4]
    for f in features:
        check_layout(f, mini[f.example_index], tokenizer, cfg)
    recovered = [
        answer_text(mini[f.example_index].context, f.offsets, f.start_position, f.end_position)
        for f in features
    ]
    assert recovered == [
        "Saint Bernadette Soubirous",
        "a golden statue of the Virgin Mary",
        "1882",
        # the gold text 'Father Julius Nieuwl' ends inside the WordPiece 'nieuwland'
        "Father Julius Nieuwland",
        "an early wind tunnel",
    ]
    assert report.examples == 5 and report.features == 5
    assert report.windows_without_answer == 0 and report.truncated_questions == 0


# ---- synthetic long contexts ----------------------------------------------------------------


def long_examples(mini: Sequence[Example]) -> list[Example]:
    """Contexts of ~120 words shuffled from the fixture, answers at the start, middle and end
    (on word boundaries), plus an unanswerable and an unlocated question."""
    words = " ".join(e.context for e in mini).split()
    rng = random.Random(0)
    out: list[Example] = []
    for i, (first, span) in enumerate([(0, 3), (55, 4), (117, 3), (30, 1), (88, 6)]):
        ctx_words = rng.sample(words, 120)
        context = " ".join(ctx_words)
        start = len(" ".join(ctx_words[:first])) + (1 if first else 0)
        text = " ".join(ctx_words[first : first + span])
        assert context[start : start + len(text)] == text
        out.append(
            Example(
                id=f"long-{i}",
                question=mini[i % len(mini)].question,
                context=context,
                answers=(Answer(text, start),),
                gold_texts=(text,),
            )
        )
    base = out[0].context
    out.append(Example("long-impossible", mini[0].question, base, is_impossible=True))
    out.append(Example("long-unlocated", mini[1].question, base, gold_texts=("statue",)))
    return out


@pytest.fixture(scope="module")
def long_cfg() -> FeatureConfig:
    return FeatureConfig(max_seq_len=48, doc_stride=12, max_query_len=16)


@pytest.fixture(scope="module")
def long_features(mini, tokenizer, long_cfg):
    examples = long_examples(mini)
    features, report = featurize(examples, tokenizer, long_cfg)
    return examples, features, report


def test_long_contexts_split_into_full_windows(long_features, tokenizer, long_cfg) -> None:
    examples, features, _ = long_features
    by_ex = windows_by_example(features)
    assert sorted(by_ex) == list(range(len(examples)))
    for e, windows in by_ex.items():
        assert len(windows) >= 4  # ~120 words do not fit in 48 tokens
        for f in windows:
            check_layout(f, examples[e], tokenizer, long_cfg)
        assert all(len(f) == long_cfg.max_seq_len for f in windows[:-1])
        assert len(windows[-1]) <= long_cfg.max_seq_len


def test_consecutive_windows_overlap_by_doc_stride(long_features, tokenizer, long_cfg) -> None:
    examples, features, _ = long_features
    stride = long_cfg.doc_stride
    for e, windows in windows_by_example(features).items():
        spans = [f.offsets[context_tokens(f)] for f in windows]
        for prev, nxt in zip(spans, spans[1:], strict=False):
            assert np.array_equal(prev[-stride:], nxt[:stride])
            assert nxt[stride, 0] > prev[-1, 0]  # and then move on
        # together the windows cover the whole tokenized context, in order
        merged = np.concatenate([spans[0]] + [s[stride:] for s in spans[1:]])
        full = tokenizer(examples[e].context, add_special_tokens=False, return_offsets_mapping=True)
        assert merged.tolist() == [list(o) for o in full["offset_mapping"]]


def test_answer_targets_in_and_outside_windows(long_features) -> None:
    examples, features, report = long_features
    missing = 0
    located_examples = set()
    for f in features:
        ex = examples[f.example_index]
        span = f.offsets[context_tokens(f)]
        if not ex.answers:
            assert (f.start_position, f.end_position) == (0, 0)
            continue
        gold = ex.answers[0]
        inside = span[0, 0] <= gold.start and gold.end <= span[-1, 1]
        if inside:
            assert 0 < f.start_position <= f.end_position < len(f) - 1
            assert answer_text(ex.context, f.offsets, f.start_position, f.end_position) == gold.text
            located_examples.add(f.example_index)
        else:
            assert (f.start_position, f.end_position) == (0, 0)
            missing += 1
    assert located_examples == {0, 1, 2, 3, 4}
    assert report.windows_without_answer == missing > 0


def test_training_skips_answerable_examples_without_a_target(long_features, tokenizer) -> None:
    examples, _, _ = long_features
    cfg = FeatureConfig(max_seq_len=48, doc_stride=12, max_query_len=16)
    features, report = featurize(examples, tokenizer, cfg, training=True)
    kept = {f.example_index for f in features}
    unlocated = next(i for i, e in enumerate(examples) if e.id == "long-unlocated")
    impossible = next(i for i, e in enumerate(examples) if e.id == "long-impossible")
    assert unlocated not in kept and impossible in kept
    assert report.skipped_no_target == 1
    assert all(
        (f.start_position, f.end_position) == (0, 0)
        for f in features
        if f.example_index == impossible
    )


def test_long_questions_are_truncated_to_max_query_len(mini, tokenizer) -> None:
    question = " ".join(e.question for e in mini)  # ~60 tokens
    full = tokenizer(question, add_special_tokens=False)["input_ids"]
    assert len(full) > 20
    ex = Example("long-q", question, mini[2].context)
    short = Example("short-q", "Who?", mini[2].context)
    who = tokenizer("Who?", add_special_tokens=False)["input_ids"]
    cfg = FeatureConfig(max_seq_len=128, doc_stride=32, max_query_len=20)
    features, report = featurize([ex, short], tokenizer, cfg)
    assert report.truncated_questions == 1
    for f in features:
        n_question = int((f.token_type_ids == 0).sum()) - 2  # minus [CLS] and [SEP]
        if f.example_index == 0:
            assert f.input_ids[1 : 1 + n_question].tolist() == full[:20]
        else:
            assert f.input_ids[1 : 1 + n_question].tolist() == who


def test_question_truncation_is_an_exact_token_prefix_on_real_questions(
    shared_data: Path,
) -> None:
    """With the default WordPiece vocabulary, a question cut to max_query_len tokens is the
    first max_query_len tokens of the full question (cutting at a token's char end is exact)."""
    path = shared_data / "splits" / "squad1-heldout.mrqa.jsonl.gz"
    if not path.exists():
        pytest.skip(f"{path} not available")
    tok = default_tokenizer()
    examples = [
        dataclasses.replace(e, context=e.context[:30], answers=())
        for e in read_examples(path).examples
    ]
    cfg = FeatureConfig(max_seq_len=64, doc_stride=16, max_query_len=7)
    features, report = featurize(examples, tok, cfg)
    full = tok([e.question.lstrip() for e in examples], add_special_tokens=False)["input_ids"]
    assert report.truncated_questions == sum(len(ids) > 7 for ids in full) > 1000
    for f in features:
        n_question = int((f.token_type_ids == 0).sum()) - 2
        assert f.input_ids[1 : 1 + n_question].tolist() == full[f.example_index][:7]


def test_empty_input_gives_no_features(tokenizer) -> None:
    features, report = featurize([], tokenizer)
    assert features == [] and report.features == 0


# ---- property test over the shared splits ---------------------------------------------------

SPLITS = [
    "splits/squad1-train.mrqa.jsonl.gz",
    "splits/squad1-heldout.mrqa.jsonl.gz",
    "splits/squad2-train.v2.0.json",
]


def default_tokenizer():
    from structqa.paths import default_encoder_path

    try:
        return load_tokenizer(default_encoder_path())
    except FileNotFoundError as err:
        pytest.skip(f"default encoder not installed: {err}")


def boundary_inside_token(f: Feature, start: int, end: int) -> bool:
    """Whether char ``start`` or ``end`` falls strictly inside one context token."""
    span = f.offsets[context_tokens(f)]
    inside_start = (span[:, 0] < start) & (start < span[:, 1])
    inside_end = (span[:, 0] < end) & (end < span[:, 1])
    return bool(inside_start.any() or inside_end.any())


@pytest.mark.parametrize("split", SPLITS)
def test_every_located_answer_is_recovered_from_offsets(shared_data: Path, split: str) -> None:
    path = shared_data / split
    if not path.exists():
        pytest.skip(f"{path} not available")
    tok = default_tokenizer()
    examples = [e for e in read_examples(path).examples if e.answers]
    assert len(examples) > 1000
    features, report = featurize(examples, tok, FeatureConfig())
    by_ex = windows_by_example(features)

    problems: dict[str, str] = {}
    inside_token: set[str] = set()
    for i, ex in enumerate(examples):
        gold = ex.answers[0]
        assert ex.context[gold.start : gold.end] == gold.text
        located = [f for f in by_ex[i] if f.start_position > 0]
        if not located:
            problems[ex.id] = f"no window locates gold {gold.text!r}"
            continue
        texts = [
            answer_text(ex.context, f.offsets, f.start_position, f.end_position) for f in located
        ]
        for text in texts:
            assert gold.text in text, (ex.id, gold.text, text)
        if boundary_inside_token(located[0], gold.start, gold.end):
            inside_token.add(ex.id)
        if gold.text not in texts:
            reason = "answer boundary inside a token"
            if ex.id not in inside_token:
                reason = "answer boundaries on token boundaries"
            problems[ex.id] = f"{reason}: recovered {texts[0]!r} for gold {gold.text!r}"

    listing = "\n".join(f"{k}: {v}" for k, v in sorted(problems.items()))
    assert set(problems) == inside_token, f"unexpected unrecoverable answers:\n{listing}"
    assert len(problems) < 0.01 * len(examples), listing
    assert report.features >= len(examples)


# ---- token tags (POS ids and entity flags for encoders pre-trained with them) ----------------

QUESTION = "  Who founded Zyx?"  # leading blanks: featurize strips them before tokenizing
CONTEXT = "Zyx was founded in 1999 by Ann Lee."
PARSES = {  # hand-written spaCy-style annotations: words with their POS, entities
    "Who founded Zyx?": Annotation(
        entities=((12, 15, "ORG"),),
        words=((0, 3), (4, 11), (12, 15), (15, 16)),
        pos=("PRON", "VERB", "PROPN", "PUNCT"),
    ),
    CONTEXT: Annotation(
        entities=((0, 3, "ORG"), (19, 23, "DATE"), (27, 34, "PERSON")),
        words=((0, 3), (4, 7), (8, 15), (16, 18), (19, 23), (24, 26), (27, 30), (31, 34), (34, 35)),
        pos=("PROPN", "AUX", "VERB", "ADP", "NUM", "ADP", "PROPN", "PROPN", "PUNCT"),
    ),
}


class HandAnnotator:
    """Serves PARSES (and records what it was asked), in place of spaCy."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def annotate(self, texts):
        texts = list(texts)
        self.asked.extend(texts)
        return [PARSES[t] for t in texts]


@pytest.fixture(scope="module")
def piece_tokenizer(tmp_path_factory: pytest.TempPathFactory):
    """WordPiece with whole words for "who was in by ann lee" only: the other words of the
    hand-made sentence split into single-character pieces."""
    from tiny import _wordpiece_tokenizer, build_vocab
    from transformers import BertTokenizerFast

    vocab_file = tmp_path_factory.mktemp("pieces") / "vocab.txt"
    vocab_file.write_text("\n".join(build_vocab(["who was in by ann lee"])) + "\n")
    return _wordpiece_tokenizer(BertTokenizerFast, vocab_file)


def test_pos_ids_and_entity_flags_align_to_word_pieces(piece_tokenizer) -> None:
    ex = Example(id="hand", question=QUESTION, context=CONTEXT)
    annotator = HandAnnotator()
    cfg = FeatureConfig(token_tags=("pos", "entities"))
    (f,), _ = featurize([ex], piece_tokenizer, cfg, annotator=annotator)
    assert annotator.asked == ["Who founded Zyx?", CONTEXT]
    pieces = piece_tokenizer.convert_ids_to_tokens(f.input_ids.tolist())
    founded = ["f", "##o", "##u", "##n", "##d", "##e", "##d"]
    zyx = ["z", "##y", "##x"]
    assert pieces == (
        ["[CLS]", "who", *founded, *zyx, "?", "[SEP]"]
        + [*zyx, "was", *founded, "in", "1", "##9", "##9", "##9", "by", "ann", "lee", "."]
        + ["[SEP]"]
    )
    tags = (
        [None, "PRON", *["VERB"] * 7, *["PROPN"] * 3, "PUNCT", None]
        + [*["PROPN"] * 3, "AUX", *["VERB"] * 7, "ADP", *["NUM"] * 4, "ADP", "PROPN", "PROPN"]
        + ["PUNCT", None]
    )
    assert f.pos_tag_ids is not None and f.pos_tag_ids.dtype == np.int64
    assert f.pos_tag_ids.tolist() == [0 if t is None else POS_IDS[t] for t in tags]
    in_entity = (
        [0, 0, *[0] * 7, 1, 1, 1, 0, 0] + [1, 1, 1, 0, *[0] * 7, 0, 1, 1, 1, 1, 0, 1, 1, 0] + [0]
    )
    assert f.entity_mask is not None and f.entity_mask.dtype == np.bool_
    assert f.entity_mask.astype(int).tolist() == in_entity

    (plain,), _ = featurize([ex], piece_tokenizer, FeatureConfig())
    assert plain.pos_tag_ids is None and plain.entity_mask is None
    (pos_only,), _ = featurize(
        [ex], piece_tokenizer, FeatureConfig(token_tags=("pos",)), annotator=annotator
    )
    assert pos_only.entity_mask is None and np.array_equal(pos_only.pos_tag_ids, f.pos_tag_ids)
    with pytest.raises(ValueError, match="unknown token tag"):
        FeatureConfig(token_tags=("lemma",))


def word_tag(annotation: Annotation, char: int) -> int:
    """The POS id of the word holding ``char`` (a plain loop)."""
    words = zip(annotation.words, annotation.pos, strict=True)
    return next(POS_IDS[tag] for (a, b), tag in words if a <= char < b)


def test_token_tags_follow_the_tokens_into_every_window(piece_tokenizer) -> None:
    """Short windows and a truncated question: each token keeps its own word's tag."""
    ex = Example(id="hand", question=QUESTION, context=CONTEXT)
    cfg = FeatureConfig(max_seq_len=20, doc_stride=6, max_query_len=5, token_tags=("pos",))
    features, report = featurize([ex], piece_tokenizer, cfg, annotator=HandAnnotator())
    assert len(features) > 2 and report.truncated_questions == 1
    question = QUESTION.lstrip()
    enc = piece_tokenizer(question, add_special_tokens=False, return_offsets_mapping=True)
    question_tags = [word_tag(PARSES[question], a) for a, _ in enc["offset_mapping"][:5]]
    for f in features:
        n_question = int((f.token_type_ids == 0).sum()) - 2
        assert f.pos_tag_ids[1 : 1 + n_question].tolist() == question_tags
        for t in context_tokens(f):
            assert f.pos_tag_ids[t] == word_tag(PARSES[CONTEXT], f.offsets[t, 0])
        assert f.pos_tag_ids[0] == f.pos_tag_ids[-1] == f.pos_tag_ids[n_question + 1] == 0


def test_negative_windows_are_subsampled_but_the_answer_stays(long_features) -> None:
    from structqa.training.data import subsample_negative_windows

    examples, features, _ = long_features
    kept = subsample_negative_windows(list(features), list(examples), 0.3, seed=0)
    again = subsample_negative_windows(list(features), list(examples), 0.3, seed=0)
    assert [id(f) for f in kept] == [id(f) for f in again]  # seeded
    answer_windows = [f for f in features if f.start_position > 0]
    assert answer_windows and all(any(f is k for k in kept) for f in answer_windows)
    for f in features:  # an unanswerable question's windows all stay
        if examples[f.example_index].is_impossible:
            assert any(f is k for k in kept)
    negatives = [
        f for f in features if f.start_position == 0 and not examples[f.example_index].is_impossible
    ]
    negative_ids = {id(f) for f in negatives}
    kept_negatives = [f for f in kept if id(f) in negative_ids]
    assert 0 < len(kept_negatives) < len(negatives)
    every = subsample_negative_windows(list(features), list(examples), 1.0, 0)
    assert [id(f) for f in every] == [id(f) for f in features]


class FirstWindowsOnly:
    """The tokenizer with each text's windows after the first ``keep`` dropped: what
    tokenizers 0.23.1 and 0.23.2 return for a long text."""

    def __init__(self, tokenizer, keep: int = 2) -> None:
        self.tokenizer, self.keep = tokenizer, keep

    def __getattr__(self, name: str):
        return getattr(self.tokenizer, name)

    def __call__(self, *args, **kwargs):
        enc = self.tokenizer(*args, **kwargs)
        if not kwargs.get("return_overflowing_tokens"):
            return enc
        seen: dict[int, int] = defaultdict(int)
        rows = []
        for f, sample in enumerate(enc["overflow_to_sample_mapping"]):
            seen[sample] += 1
            if seen[sample] <= self.keep:
                rows.append(f)
        return _Rows(enc, rows)


class _Rows:
    def __init__(self, enc, rows: list[int]) -> None:
        self.enc, self.rows = enc, rows

    def __getitem__(self, key: str) -> list:
        return [self.enc[key][r] for r in self.rows]

    def sequence_ids(self, f: int):
        return self.enc.sequence_ids(self.rows[f])


def test_windows_that_stop_before_the_text_ends_are_an_error(mini, tokenizer, long_cfg) -> None:
    examples = long_examples(mini)
    featurize(examples, FirstWindowsOnly(tokenizer, keep=100), long_cfg)  # all windows: fine
    with pytest.raises(WindowsLoseText, match=r"example 'long-0' \(to character [\d,]+ of") as err:
        featurize(examples, FirstWindowsOnly(tokenizer, keep=2), long_cfg)
    assert "tokenizers" in str(err.value)


def test_a_tail_without_letters_or_digits_is_no_loss(monkeypatch) -> None:
    check_covered(["words and more.  \n", "x" * 10], [14, 10], ["a", "b"])
    with pytest.raises(WindowsLoseText, match=r"1 of 2 texts: b \(to character 4 of 10\)"):
        check_covered(["ab.", "x" * 10], [2, 4], ["a", "b"])
    import tokenizers

    monkeypatch.setattr(tokenizers, "__version__", "0.23.2")
    with pytest.raises(WindowsLoseText, match=r"pip install 'tokenizers!=0.23.1,!=0.23.2'"):
        check_covered(["x" * 10], [4], ["c"])
