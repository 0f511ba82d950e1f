"""The service's typed request and response bodies (pydantic; they make the OpenAPI schema).

Text fields are checked here, at the edge, so that nothing the model cannot read reaches it:
a question or context must be non-empty after stripping, hold no NUL character and no lone
UTF-16 surrogate (JSON's ``"\\ud800"`` escape decodes to one; it cannot be encoded as UTF-8,
so the tokenizer could not read it and the reply could not echo it).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictInt,
    StrictStr,
    Tag,
    field_validator,
)

from structqa.data.hygiene import has_readable_text

DEFAULT_TOP_K = 5
MAX_TOP_K = 20
#: the most characters of a search query or a question over the index (POST /v1/search,
#: /v1/ask): far above what a question the reader reads takes (``data.max_query_len``
#: tokens, 64 by default; a longer one is refused by its tokens), so that the index is never
#: searched for a megabyte of text
MAX_QUERY_CHARS = 2_000


def check_text(value: str) -> str:
    """``value`` if a model can read it; a ValueError naming what is wrong otherwise (pydantic
    turns it into a 422 naming the field)."""
    if not value.strip():
        raise ValueError("must not be empty or only whitespace")
    if not has_readable_text(value):
        raise ValueError(
            "has no character a model reads (only spaces, zero-width, control or combining "
            "characters)"
        )
    nul = value.find("\0")
    if nul >= 0:
        raise ValueError(f"contains a NUL character (U+0000) at character {nul}; remove it")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"contains a lone surrogate (U+{ord(value[e.start]):04X}) at character {e.start}, "
            "which is not valid Unicode; send the text as valid UTF-8"
        ) from None
    return value


class QAItem(BaseModel):
    """One question about one passage."""

    model_config = ConfigDict(extra="forbid")

    question: StrictStr = Field(description="the question", examples=["Who won Super Bowl 50?"])
    context: StrictStr = Field(
        description="the passage that holds the answer",
        examples=["The Denver Broncos defeated the Carolina Panthers to win Super Bowl 50."],
    )
    top_k: StrictInt = Field(
        DEFAULT_TOP_K, ge=1, le=MAX_TOP_K, description="how many n-best answers to return"
    )

    @field_validator("question", "context")
    @classmethod
    def _readable(cls, value: str) -> str:
        return check_text(value)


def _one_or_many(value: Any) -> str:
    return "many" if isinstance(value, list) else "one"


#: The body of POST /v1/answer: one item, or a list of them (answered in order). The callable
#: discriminator picks the branch by the JSON type, so an error names the field of that branch
#: only (not "or: input should be a valid list").
AnswerBody = Annotated[
    Annotated[QAItem, Tag("one")] | Annotated[list[QAItem], Tag("many")],
    Discriminator(_one_or_many),
]


class ExplainItem(BaseModel):
    """One question about one passage, for the attention map."""

    model_config = ConfigDict(extra="forbid")

    question: StrictStr
    context: StrictStr

    @field_validator("question", "context")
    @classmethod
    def _readable(cls, value: str) -> str:
        return check_text(value)


class NBestEntry(BaseModel):
    text: str
    start: int = Field(description="character offset of the answer in the context")
    end: int = Field(description="end character offset (exclusive)")
    probability: float = Field(description="softmax share among the n-best spans, 0 to 1")


class ModelInfo(BaseModel):
    name: str = Field(description="the checkpoint directory the server loaded")
    head: str = Field(description="the span head: independent, joint, dyrex or dyref")
    encoder: str


class AnswerOut(BaseModel):
    answer: str = Field(description="the answer text; empty when the model abstained")
    start: int = Field(description="character offset in the context; -1 when abstained")
    end: int = Field(description="end character offset (exclusive); -1 when abstained")
    probability: float = Field(
        description="the chance that the returned answer (an abstention included) is right: "
        "calibrated on validation questions when the checkpoint carries calibration.json "
        "(see 'calibrated'), else the raw estimate (docs/calibration.md)"
    )
    answerable: bool = Field(description="whether the best span clears the no-answer threshold")
    calibrated: bool = Field(description="whether 'probability' comes from a fitted calibration")
    score: float = Field(description="start + end logit of the best span (unbounded)")
    null_odds: float = Field(description="no-answer score minus the best span's score")
    no_answer: bool = Field(description="whether the model abstained")
    nbest: list[NBestEntry]
    model: ModelInfo


class ErrorOut(BaseModel):
    error: str = Field(description="what is wrong and what to do")
    status: int
    fields: list[dict[str, str]] | None = Field(
        None, description="for a 422: each invalid field ('field') and why ('message')"
    )


class Health(BaseModel):
    status: Literal["ok", "failed"] = Field(
        description="failed (with 503): the model could not be loaded or warmed up"
    )


class Readiness(BaseModel):
    status: Literal["ready", "loading", "failed"]
    model: ModelInfo | None = None
    explain: str | None = Field(
        None, description="what POST /v1/explain shows: dyrex, dyref, static (no query attention)"
    )
    api_key_required: bool = False
    max_context_chars: int = 0
    max_questions: int = Field(0, description="the most items one request may hold")
    max_body_bytes: int = Field(0, description="the largest request body, in bytes")
    index: dict[str, Any] | None = Field(
        None, description="the document index served (--index): its folder, chunks, encoder"
    )
