"""Looking inside trained models: attention maps of the start/end queries, and their pictures."""

from structqa.analysis.attention_maps import QueryAttention, dyrex_trace, explain
from structqa.analysis.render import (
    ExplainFiles,
    RendererMissing,
    render_html,
    render_png,
    save_explanation,
)

__all__ = [
    "ExplainFiles",
    "QueryAttention",
    "RendererMissing",
    "dyrex_trace",
    "explain",
    "render_html",
    "render_png",
    "save_explanation",
]
