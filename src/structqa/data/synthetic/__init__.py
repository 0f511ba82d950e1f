"""Synthetic numerical-reasoning questions in DROP format, in the spirit of GenBERT's data.

GenBERT (Geva et al., 2020), the model NC-BERT builds on, is pre-trained on two synthetic sets
before DROP: *numerical data* (ND), short expressions and lists of numbers with the operation
to apply, and *textual data* (TD), short templated passages with numbers in context and
questions over them. This package writes both, seeded, as DROP JSON that
:func:`structqa.data.drop.read_drop` reads with no skips or warnings.

- ``numeric`` (ND): the passage holds only the numbers (an expression, a list, labelled
  values, two dates, a total), the question names the operation. Operations:
  :data:`NUMERIC_OPS`.
- ``textual`` (TD): 3-5 sentence passages (an intro sentence, then one fact per sentence)
  about teams, countries, people, cities and events, with questions needing the same
  operations. Operations: :data:`TEXTUAL_OPS`.

Answers, all computed exactly (``Decimal`` for numbers, ``datetime.date`` for dates):

- a number answer is written canonically by :func:`canonical_number`: rounded to 2 decimal
  places (half up), no thousands separators, no trailing zeros, no ".0" for an integer
  ("1204", "12.5", "0.75"). With the built-in operations no rounding ever happens: inputs
  have at most 2 decimals and only add, subtract, count and integer percent of an integer
  are computed. No answer is negative (subtraction orders its operands): the DROP metric
  splits tokens on hyphens, so it cannot see a minus sign;
- a span answer is text that occurs verbatim in the passage (a name, a label, a number as
  written there, e.g. "14,506");
- ``sort`` answers several spans, in the asked order (the k largest, largest first). The
  DROP metric compares spans as a bag, so the order is kept in the file for training but not
  scored; asking for k of n (k < n) keeps the bag itself informative;
- ``date_compare`` (ND) answers a DROP date (day, month name, year);
- ``date_diff`` counts days as ``(d2 - d1).days`` and years as complete years (the last
  anniversary of d1 on or before d2; a 29 February start has its anniversary on 1 March in
  common years).

Every example is checked as it is made (:func:`verify`); ``tests/data/test_synthetic.py``
recomputes every answer from the text alone.

Ids: query ``synth-{kind}-{seed}-{i}``, passage ``synth-{kind}-{seed}-p{i}``; each question has
its own passage. The same (kind, n, seed, config) gives byte-identical files; numeric and
textual draw from separate streams (``default_rng([seed, stream])``), so the numeric part of
``both`` equals ``numeric`` alone.

Modules: :mod:`~structqa.data.synthetic.base` (operations, word lists, config, drawing numbers
and dates), :mod:`~structqa.data.synthetic.numeric` (ND), :mod:`~structqa.data.synthetic.textual`
(TD), :mod:`~structqa.data.synthetic.make` (generation, checks, DROP JSON).
"""

from structqa.data.synthetic.base import (
    CITIES,
    COUNTRIES,
    EVENTS,
    KINDS,
    MONTHS,
    NUMERIC_OPS,
    PEOPLE,
    TEAMS,
    TEXTUAL_OPS,
    VARIABLES,
    SynthConfig,
    SynthExample,
    canonical_number,
    full_years,
)
from structqa.data.synthetic.make import (
    generate,
    generate_numeric,
    generate_textual,
    summarize,
    to_drop_json,
    verify,
    write_synthetic,
)

__all__ = [
    "CITIES",
    "COUNTRIES",
    "EVENTS",
    "KINDS",
    "MONTHS",
    "NUMERIC_OPS",
    "PEOPLE",
    "TEAMS",
    "TEXTUAL_OPS",
    "VARIABLES",
    "SynthConfig",
    "SynthExample",
    "canonical_number",
    "full_years",
    "generate",
    "generate_numeric",
    "generate_textual",
    "summarize",
    "to_drop_json",
    "verify",
    "write_synthetic",
]
