"""Request bodies -> validated items, with a 4xx that says what is wrong for anything else.

Decided before the model sees anything: the body is UTF-8 (400), JSON (400, with the line and
column), not nested beyond what the parser takes (400), of the documented shape (422, naming
the field) and within the context limit (413). The old ``/predict`` shapes
(``{"question", "context"}`` or ``{"pairs": [...]}``) map onto the same items.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from pydantic import TypeAdapter, ValidationError

from structqa.serving.schemas import AnswerBody, ExplainItem, QAItem


class ApiError(Exception):
    """A request the server refuses: its HTTP status, the message for the client, and extra
    headers (e.g. Retry-After)."""

    def __init__(
        self,
        status: int,
        message: str,
        headers: dict[str, str] | None = None,
        fields: list[dict[str, str]] | None = None,
    ):
        super().__init__(message)
        self.status, self.message = status, message
        self.headers = headers or {}
        self.fields = fields


_ANSWER = TypeAdapter(AnswerBody)
_EXPLAIN = TypeAdapter(ExplainItem)
_TAGS = {"one", "many"}  # the discriminator's branch names: left out of field paths


def parse_json(body: bytes) -> Any:
    """The JSON value of a request body."""
    if not body.strip():
        raise ApiError(
            400, 'the body is empty; send JSON such as {"question": ..., "context": ...}'
        )
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ApiError(
            400, f"the body is not UTF-8: byte 0x{body[e.start]:02x} at offset {e.start}"
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ApiError(
            400, f"the body is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}"
        ) from None
    except RecursionError:
        raise ApiError(400, "the body's JSON is nested too deeply to parse") from None
    except ValueError as e:  # Python's limit on an integer's digits (4,300), for one
        raise ApiError(400, f"the body's JSON cannot be read: {e}") from None


def field_path(loc: Sequence[Any]) -> str:
    """A pydantic error location as a path into the body: ``[1].context``, ``question``."""
    out = ""
    for part in loc:
        if part in _TAGS or part == "body":
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(body)"


def validation_fields(errors: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """Each error as {"field", "message"}; the input value is never echoed (it may be 1 MB,
    or text that cannot be encoded)."""
    out = []
    for err in errors:
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        kind = err.get("type")
        if kind in ("model_type", "model_attributes_type", "dict_type"):
            msg = "must be a JSON object"
        elif kind == "extra_forbidden":
            msg = "unknown field (a typo?); the fields are in the schema at /docs"
        elif kind == "missing":
            msg = "missing; required"
        elif kind == "string_too_long":
            most = (err.get("ctx") or {}).get("max_length")
            limit = f"the {most:,}" if isinstance(most, int) else "the most"
            msg = f"longer than {limit} characters this server takes; shorten it"
        out.append({"field": field_path(err.get("loc", ())), "message": msg})
    return out


def _invalid(err: ValidationError, usage: str) -> ApiError:
    fields = validation_fields(err.errors(include_input=False, include_url=False))
    head = "; ".join(f"{f['field']}: {f['message']}" for f in fields[:5])
    more = f" (and {len(fields) - 5} more)" if len(fields) > 5 else ""
    return ApiError(422, f"{head}{more}. Expected {usage}", fields=fields)


ANSWER_USAGE = '{"question": str, "context": str, "top_k"?: int} or a list of them'
PAIRS_USAGE = '{"pairs": [{"question": str, "context": str}, ...]}'


def under_pairs(err: ApiError) -> ApiError:
    """A 422 about /v1/answer's list of items said of /predict's ``pairs``."""
    fields = [{**f, "field": _under_pairs(f["field"])} for f in err.fields or []]
    head = "; ".join(f"{f['field']}: {f['message']}" for f in fields[:5])
    return ApiError(422, f"{head}. Expected {PAIRS_USAGE}", fields=fields)


def _under_pairs(field: str) -> str:
    """A field of /v1/answer's list named as the same field of /predict's ``pairs``."""
    if field == "(body)":
        return "pairs"
    return "pairs" + ("" if field.startswith("[") else ".") + field


def _json_type(value: Any) -> str:
    names = {str: "a string", int: "a number", float: "a number", bool: "true or false"}
    names |= {dict: "an object", type(None): "null"}
    return names.get(type(value), "a " + type(value).__name__)


def answer_items(value: Any, max_items: int) -> tuple[list[QAItem], bool]:
    """The items of a POST /v1/answer body and whether it was a single item (not a list)."""
    if isinstance(value, list) and len(value) > max_items:
        raise ApiError(
            413,
            f"the body holds {len(value)} questions; this server takes at most {max_items}"
            " per request (--max-questions): split the list",
        )
    if isinstance(value, list) and not value:
        message = "the list of questions is empty"
        raise ApiError(
            422,
            f"{message}. Expected {ANSWER_USAGE}",
            fields=[{"field": "(body)", "message": message}],
        )
    try:
        parsed = _ANSWER.validate_python(value)
    except ValidationError as e:
        raise _invalid(e, ANSWER_USAGE) from None
    return (parsed, False) if isinstance(parsed, list) else ([parsed], True)


def legacy_items(value: Any, max_items: int) -> tuple[list[QAItem], bool]:
    """The items of an old ``/predict`` body: ``{"question", "context"}`` or
    ``{"pairs": [{"question", "context"}, ...]}``."""
    if isinstance(value, dict) and "pairs" in value:
        pairs = value["pairs"]  # (other keys beside it are ignored, as they always were)
        if not isinstance(pairs, list):
            message = f"must be a list, not {_json_type(pairs)}"
            raise ApiError(
                422,
                f"pairs: {message}. Expected {PAIRS_USAGE}",
                fields=[{"field": "pairs", "message": message}],
            )
        try:
            return answer_items(pairs, max_items)[0], False
        except ApiError as err:  # its fields are the list's items: under pairs here
            if err.status != 422:
                raise
            raise under_pairs(err) from None
    if isinstance(value, list):
        message = (
            'the body is a JSON list; /predict expects {"question", "context"} or '
            '{"pairs": [...]} (POST /v1/answer takes a list)'
        )
        raise ApiError(422, message, fields=[{"field": "(body)", "message": message}])
    return answer_items(value, max_items)


def explain_item(value: Any) -> ExplainItem:
    try:
        return _EXPLAIN.validate_python(value)
    except ValidationError as e:
        raise _invalid(e, '{"question": str, "context": str}') from None


def check_context_sizes(
    items: Sequence[QAItem | ExplainItem], max_chars: int, limit: str = "--max-context-chars"
) -> None:
    """413 for a context over the server's limit, naming the item, its size, the limit and
    what sets it (``limit``)."""
    for i, item in enumerate(items):
        n = len(item.context)
        if n > max_chars:
            where = f"item {i}: " if len(items) > 1 else ""
            raise ApiError(
                413,
                f"{where}the context has {n:,} characters; this server accepts at most "
                f"{max_chars:,} ({limit}): send a shorter passage",
            )


@dataclass(frozen=True)
class Questions:
    """A POST body's validated questions, and whether it held one (not a list)."""

    items: list[QAItem]
    single: bool

    @property
    def pairs(self) -> list[tuple[str, str]]:
        return [(i.question, i.context) for i in self.items]


def questions_body(
    max_items: int, max_chars: int, legacy: bool = False
) -> Callable[[Request], Awaitable[Questions]]:
    """The FastAPI dependency that turns a POST /v1/answer (``legacy``: /predict) body into
    :class:`Questions`, or refuses it with the 4xx the module docstring lists."""

    async def questions(request: Request) -> Questions:
        value = parse_json(await request.body())
        items, single = (legacy_items if legacy else answer_items)(value, max_items)
        check_context_sizes(items, max_chars)
        return Questions(items, single)

    return questions


def explain_body(
    max_chars: int, limit: str = "--max-context-chars"
) -> Callable[[Request], Awaitable[ExplainItem]]:
    """The FastAPI dependency that turns a POST /v1/explain body into an :class:`ExplainItem`."""

    async def explain(request: Request) -> ExplainItem:
        item = explain_item(parse_json(await request.body()))
        check_context_sizes([item], max_chars, limit)
        return item

    return explain
