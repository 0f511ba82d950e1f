"""Evaluation metrics over plain dicts (no models, no readers): the SQuAD metrics at the
package level."""

from structqa.metrics.squad import *  # noqa: F403  (re-exports exactly squad.__all__)
from structqa.metrics.squad import __all__ as __all__
