"""Pictures of a :class:`~structqa.analysis.attention_maps.QueryAttention`: PNG, HTML, JSON.

The PNG is a strip per query (rows: start query, end query; columns: the window's tokens,
wrapped into panels so labels stay readable), drawn with matplotlib (its Agg canvas) or,
without it, Pillow; with neither, :class:`RendererMissing` says what to install. The HTML page
is self-contained: no script, no external file. One colour scale serves both: white (0) to
dark red (the largest query -> token weight); query -> query cells (DyReF, DyREx) are drawn
on that scale too, clipped, with their values written in.
"""

from __future__ import annotations

import html
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from structqa.analysis.attention_maps import CONTEXT, QUESTION, SPECIAL, QueryAttention
from structqa.io import write_json, write_text

QUERY = "query"  # the column kind of the query -> query cells
QUERY_NAMES = ("q_s", "q_e")
# white -> yellow -> orange -> red -> dark red (matplotlib's YlOrRd with a white start)
ANCHORS = np.array(
    [[255, 255, 255], [254, 217, 118], [253, 141, 60], [227, 26, 28], [128, 0, 38]], float
)
LABEL_COLOURS = {QUERY: "#6a3d9a", SPECIAL: "#8c8c8c", QUESTION: "#1f4e99", CONTEXT: "#000000"}
TOKENS_PER_PANEL = 40
LABEL_CHARS = 18  # longer token labels are cut (URLs, long numbers)
INSTALL_HINT = "pip install matplotlib"


class RendererMissing(RuntimeError):
    """Neither matplotlib nor Pillow is importable."""


@dataclass(frozen=True)
class ExplainFiles:
    png: Path
    html: Path
    json: Path


def colour(weight: float, vmax: float) -> tuple[int, int, int]:
    """RGB of ``weight`` on the [0, vmax] scale (clipped)."""
    x = float(np.clip(weight / vmax if vmax > 0 else 0.0, 0.0, 1.0)) * (len(ANCHORS) - 1)
    i = min(int(x), len(ANCHORS) - 2)
    rgb = ANCHORS[i] + (x - i) * (ANCHORS[i + 1] - ANCHORS[i])
    return int(round(rgb[0])), int(round(rgb[1])), int(round(rgb[2]))


def _hex(rgb: tuple[int, int, int]) -> str:
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def _ink(weight: float, vmax: float) -> str:
    """Text colour readable on ``colour(weight)``."""
    return "#ffffff" if vmax > 0 and weight / vmax > 0.6 else "#000000"


def scale_max(att: QueryAttention) -> float:
    """The top of the colour scale: the largest query -> token weight (never 0)."""
    top = float(max(att.start_weights.max(), att.end_weights.max()))
    return top if top > 0 else 1.0


@dataclass(frozen=True)
class _Column:
    label: str
    kind: str  # query | special | question | context
    answer: bool
    start: float
    end: float


def _columns(att: QueryAttention) -> list[_Column]:
    """The strip's columns: the two query columns (when the model has query attention), then
    the window's tokens."""
    cols: list[_Column] = []
    if att.query_weights is not None:
        for j, name in enumerate(QUERY_NAMES):
            qw = att.query_weights
            cols.append(_Column(name, QUERY, False, float(qw[0, j]), float(qw[1, j])))
    a, b = att.answer_tokens
    for t, (tok, seg) in enumerate(zip(att.tokens, att.segments, strict=True)):
        cols.append(
            _Column(
                tok if len(tok) <= LABEL_CHARS else tok[: LABEL_CHARS - 1] + "…",
                seg,
                a <= t <= b and a >= 0,
                float(att.start_weights[t]),
                float(att.end_weights[t]),
            )
        )
    return cols


def _row_names(att: QueryAttention) -> tuple[str, str]:
    if att.kind == "static":
        return "start p(i)", "end p(j)"
    return "start  q_s", "end  q_e"


def _boundaries(cols: Sequence[_Column]) -> list[int]:
    """Column indices i where a separator goes between columns i - 1 and i: around the query
    columns and around the question."""
    out = []
    for i in range(1, len(cols)):
        a, b = cols[i - 1].kind, cols[i].kind
        if (a != b and QUESTION in (a, b)) or ((a == QUERY) != (b == QUERY)):
            out.append(i)
    return out


def _title_lines(att: QueryAttention) -> list[str]:
    a, b = att.answer_tokens
    window = f"window {att.window + 1} of {att.num_windows}"
    answer = f'"{att.answer}" (tokens {a}-{b}, {window})' if att.answer else f"none ({window})"
    return [
        f"Q: {att.question}",
        f"A: {answer}    head: {att.head}",
    ]


def _spread(att: QueryAttention) -> str:
    """The range of the query -> token weights: a near-uniform map shows as one colour."""
    both = np.concatenate([att.start_weights, att.end_weights])
    return f"from {both.min():.3g} to {both.max():.3g}"


def _legend_line(att: QueryAttention) -> str:
    what = "probability" if att.kind == "static" else "max attention weight"
    return (
        f"colour: {what}, 0 (white) to {scale_max(att):.3g} (dark red), token weights "
        f"{_spread(att)}; labels: blue = question, grey = special, purple = queries; in a black "
        "box = predicted answer"
    )


# ---- PNG ---------------------------------------------------------------------------------


def render_png(att: QueryAttention, path: str | Path, per_panel: int = TOKENS_PER_PANEL) -> Path:
    """Write the strip picture; matplotlib if importable, else Pillow, else an error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        try:
            import PIL  # noqa: F401
        except ImportError:
            raise RendererMissing(
                f"writing {path.name} needs matplotlib ({INSTALL_HINT}), or at least Pillow "
                "(pip install pillow); neither is installed"
            ) from None
        _png_pillow(att, path, per_panel)
        return path
    _png_matplotlib(att, path, per_panel)
    return path


def _panels(cols: list[_Column], per_panel: int) -> list[range]:
    return [range(i, min(i + per_panel, len(cols))) for i in range(0, len(cols), per_panel)]


def _png_matplotlib(att: QueryAttention, path: Path, per_panel: int) -> None:
    # the Agg canvas directly, not pyplot: no global figure state, the caller's backend
    # (a notebook's, say) is left alone
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import LinearSegmentedColormap
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    cmap = LinearSegmentedColormap.from_list("white_ylorrd", ANCHORS / 255.0)
    vmax = scale_max(att)
    cols = _columns(att)
    panels = _panels(cols, per_panel)
    seps = set(_boundaries(cols))
    longest = max(len(c.label) for c in cols)
    label_in = 0.12 + 0.075 * longest  # rotated labels hang below each panel
    panel_in = 2 * 0.34 + label_in
    width = 1.3 + 0.24 * per_panel + 0.9
    footer = textwrap.wrap(att.aggregation, width=int(width * 14))
    head_in, foot_in = 0.9, 0.15 + 0.14 * len(footer)
    height = head_in + panel_in * len(panels) + foot_in
    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    left, right = 1.3 / width, 1 - 0.9 / width
    rows = _row_names(att)
    image = None
    for p, span in enumerate(panels):
        top = 1 - (head_in + p * panel_in) / height
        ax = fig.add_axes(
            (left, top - 0.68 / height, (right - left) * len(span) / per_panel, 0.68 / height)
        )
        grid = np.array([[cols[i].start for i in span], [cols[i].end for i in span]])
        image = ax.imshow(
            grid, cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto", interpolation="nearest"
        )
        ax.set_yticks([0, 1], rows, fontsize=9)
        ax.set_xticks(range(len(span)), [cols[i].label for i in span], rotation=90, fontsize=8)
        for tick, i in zip(ax.get_xticklabels(), span, strict=True):
            tick.set_color(LABEL_COLOURS[cols[i].kind])
            tick.set_fontstyle("italic" if cols[i].kind == QUESTION else "normal")
            tick.set_fontweight("bold" if cols[i].answer or cols[i].kind == QUERY else "normal")
        ax.tick_params(length=0)
        for i in span:
            if i in seps and i != span.start:
                ax.axvline(i - span.start - 0.5, color="white", lw=3)
            if cols[i].kind == QUERY:
                for r, w in enumerate((cols[i].start, cols[i].end)):
                    ax.text(
                        i - span.start,
                        r,
                        f"{w:.2f}",
                        ha="center",
                        va="center",
                        fontsize=6,
                        color=_ink(w, vmax),
                    )
        answer = [i - span.start for i in span if cols[i].answer]
        if answer:
            ax.add_patch(
                Rectangle(
                    (answer[0] - 0.5, -0.5), len(answer), 2, fill=False, edgecolor="black", lw=2
                )
            )
    fig.text(0.01, 1 - 0.12 / height, "\n".join(_title_lines(att)), va="top", fontsize=10)
    fig.text(0.01, 1 - 0.62 / height, _legend_line(att), va="top", fontsize=8, color="#444444")
    fig.text(0.01, 0.08 / height, "\n".join(footer), va="bottom", fontsize=7.5, color="#444444")
    bar = fig.add_axes(
        (right + 0.25 / width, 1 - (head_in + 0.68) / height, 0.12 / width, 0.68 / height)
    )
    fig.colorbar(image, cax=bar)
    bar.tick_params(labelsize=7)
    fig.savefig(path, format="png", facecolor="white")


def _pil_font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size)  # a scalable font (Pillow >= 10.1 with FreeType)
    except TypeError:
        return ImageFont.load_default()


def _png_pillow(att: QueryAttention, path: Path, per_panel: int) -> None:
    from PIL import Image, ImageDraw

    vmax = scale_max(att)
    cols = _columns(att)
    panels = _panels(cols, per_panel)
    seps = set(_boundaries(cols))
    font, small = _pil_font(13), _pil_font(10)
    cell_w, cell_h, left, pad = 20, 24, 110, 14
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))

    def text_size(text: str, f) -> tuple[int, int]:
        box = measure.textbbox((0, 0), text, font=f)
        return box[2], box[3]  # from the drawing origin: "," sits low, "'" high

    label_h = max(text_size(c.label, font)[0] for c in cols) + 8
    panel_h = 2 * cell_h + label_h + pad
    wrapped = textwrap.wrap(att.aggregation, width=per_panel * cell_w // 7)
    head_h = 3 * 20 + pad
    width = left + per_panel * cell_w + 60
    height = head_h + panel_h * len(panels) + 16 * len(wrapped) + pad
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    for k, line in enumerate([*_title_lines(att), _legend_line(att)]):
        draw.text((8, 6 + 20 * k), line, fill="#444444" if k == 2 else "black", font=font)
    for p, span in enumerate(panels):
        y0 = head_h + p * panel_h
        for r, name in enumerate(_row_names(att)):
            draw.text((8, y0 + r * cell_h + 5), name, fill="black", font=font)
        for i in span:
            x = left + (i - span.start) * cell_w
            c = cols[i]
            for r, w in enumerate((c.start, c.end)):
                box = (x, y0 + r * cell_h, x + cell_w - 1, y0 + (r + 1) * cell_h - 1)
                draw.rectangle(box, fill=colour(w, vmax))
                if c.kind == QUERY:
                    draw.text(
                        (x + 1, y0 + r * cell_h + 7),
                        f"{w:.2f}".removeprefix("0"),
                        font=small,
                        fill=_ink(w, vmax),
                    )
            if i in seps and i != span.start:
                draw.line((x - 1, y0, x - 1, y0 + 2 * cell_h), fill="white", width=3)
            tw, th = text_size(c.label, font)
            label = Image.new("RGBA", (tw + 2, th + 2), (255, 255, 255, 0))
            ImageDraw.Draw(label).text((0, 0), c.label, fill=LABEL_COLOURS[c.kind], font=font)
            label = label.rotate(90, expand=True)
            img.paste(label, (x + (cell_w - label.width) // 2, y0 + 2 * cell_h + 4), label)
            if c.answer:  # no bold face in the default font: underline the label instead
                draw.line(
                    (x + 2, y0 + 2 * cell_h + 2, x + cell_w - 3, y0 + 2 * cell_h + 2),
                    fill="black",
                    width=2,
                )
        answer = [i - span.start for i in span if cols[i].answer]
        if answer:
            x0 = left + answer[0] * cell_w
            draw.rectangle(
                (x0, y0, x0 + len(answer) * cell_w - 1, y0 + 2 * cell_h - 1),
                outline="black",
                width=2,
            )
    y = head_h + panel_h * len(panels)
    for k, line in enumerate(wrapped):
        draw.text((8, y + 16 * k), line, fill="#444444", font=small)
    img.save(path, format="PNG")


# ---- HTML --------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 72em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.05em; margin: 1.2em 0 0.4em; }
.meta { color: #666; }
.row { line-height: 2.1; }
.tok { padding: 0.15em 0.05em; margin-left: 0.28em; border-radius: 3px; }
.tok.cont { margin-left: 0; }
.tok.question { font-style: italic; color: #1f4e99; border-bottom: 2px solid #1f4e99; }
.tok.special { color: #8c8c8c; font-size: 0.85em; }
.tok b { font-weight: 800; }
.tok.answer { outline: 2px solid #000; }
.sep { display: inline-block; width: 0; border-left: 3px double #999; height: 1.4em;
       vertical-align: middle; margin: 0 0.5em; }
.bar { display: inline-block; width: 16em; height: 1em; vertical-align: middle;
       border: 1px solid #ccc; }
table.qq td, table.qq th { padding: 0.3em 0.8em; text-align: center; }
.swatch { padding: 0 0.3em; }
"""


def _token_span(att: QueryAttention, t: int, weight: float, vmax: float) -> str:
    tok, seg = att.tokens[t], att.segments[t]
    a, b = att.answer_tokens
    answer = a >= 0 and a <= t <= b
    cont = tok.startswith("##") and seg != SPECIAL
    shown = html.escape(tok[2:] if cont else tok)
    classes = " ".join(
        c for c, on in (("tok", True), (seg, True), ("cont", cont), ("answer", answer)) if on
    )
    style = f"background:{_hex(colour(weight, vmax))};color:{_ink(weight, vmax)}"
    title = html.escape(f"{tok} · {weight:.4f}", quote=True)
    body = f"<b>{shown}</b>" if answer else shown
    return f'<span class="{classes}" style="{style}" title="{title}">{body}</span>'


def _query_row(att: QueryAttention, weights: np.ndarray, vmax: float) -> str:
    parts = []
    for t in range(len(att.tokens)):
        if t > 0 and (att.segments[t - 1] == QUESTION) != (att.segments[t] == QUESTION):
            parts.append('<span class="sep" title="question | passage"></span>')
        parts.append(_token_span(att, t, float(weights[t]), vmax))
    return '<div class="row">' + "".join(parts) + "</div>"


def _cell(weight: float, vmax: float) -> str:
    style = f"background:{_hex(colour(weight, vmax))};color:{_ink(weight, vmax)}"
    return f'<td style="{style}">{weight:.4f}</td>'


def render_html(att: QueryAttention, path: str | Path) -> Path:
    """Write a self-contained page: question, answer, legend, one shaded line per query."""
    path = Path(path)
    vmax = scale_max(att)
    e = html.escape
    a, b = att.answer_tokens
    stops = ", ".join(_hex(colour(x * vmax, vmax)) for x in np.linspace(0, 1, 9))
    what = "probability" if att.kind == "static" else "max attention weight"
    names = (
        ("start distribution p(start)", "end distribution p(end)")
        if att.kind == "static"
        else ("start query q<sub>s</sub>", "end query q<sub>e</sub>")
    )
    answer = (
        f"<b>{e(att.answer)}</b> (characters {att.answer_chars[0]}-{att.answer_chars[1]}, "
        f"tokens {a}-{b}, score {att.score:.2f})"
        if att.answer
        else "<b></b>(no span in this window)"
    )
    out = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>structqa explain: {e(att.question)}</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>What the start and end queries look at</h1>",
        f'<p class="meta">head <code>{e(att.head)}</code> ({e(att.kind)}) · window '
        f"{att.window + 1} of {att.num_windows} · {len(att.tokens)} tokens</p>",
        f"<p><strong>Question:</strong> {e(att.question)}</p>",
        f"<p><strong>Predicted answer:</strong> {answer}</p>",
        '<h2>Legend</h2><p class="legend">colour = ' + what + ": 0 "
        f'<span class="bar" style="background:linear-gradient(to right, {stops})"></span> '
        f"{vmax:.4g} (the largest query &rarr; token weight; they range {_spread(att)}; hover "
        "a token for its exact value) · "
        '<span class="tok question swatch">question token</span> · '
        '<span class="tok special swatch">[special]</span> · '
        '<span class="tok answer swatch"><b>answer token</b></span> · '
        '<span class="sep"></span> question | passage</p>',
    ]
    for name, weights in zip(names, (att.start_weights, att.end_weights), strict=True):
        out.append(f"<h2>{name}</h2>")
        out.append(_query_row(att, weights, vmax))
    if att.query_weights is not None:
        qw = att.query_weights
        cells = "".join(
            f"<tr><th>{r}</th>" + "".join(_cell(float(w), vmax) for w in qw[i]) + "</tr>"
            for i, r in enumerate(("q<sub>s</sub>", "q<sub>e</sub>"))
        )
        out.append(
            "<h2>Query &rarr; query</h2>"
            '<table class="qq"><tr><th></th><th>to q<sub>s</sub></th><th>to q<sub>e</sub></th>'
            f"</tr>{cells}</table>"
        )
    out.append(f"<h2>How the map was made</h2><p>{e(att.aggregation)}</p>")
    out.append("</body></html>\n")
    write_text(path, "\n".join(out))
    return path


# ---- all three ---------------------------------------------------------------------------


def save_explanation(att: QueryAttention, out_dir: str | Path) -> ExplainFiles:
    """Write attention.json, attention.html, then attention.png into ``out_dir``.

    The PNG comes last: without a renderer, :class:`RendererMissing` is raised after the JSON
    and HTML are written."""
    out = Path(out_dir)
    files = ExplainFiles(out / "attention.png", out / "attention.html", out / "attention.json")
    write_json(files.json, att.to_dict())
    render_html(att, files.html)
    render_png(att, files.png)
    return files
