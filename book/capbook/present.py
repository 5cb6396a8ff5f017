"""The page: one figure style, tables beside the paper's values, glued numbers.

Everything here formats results for a chapter of the book; nothing computes
one.  The numbers come from :mod:`capassign`; this module decides how they
look on the page: the figure size and style (:func:`book_figure`,
:func:`legend_outside`), tables with the paper's value beside ours
(:func:`show_table` and the text tables of :func:`error_table`,
:func:`paired_table`, :func:`adherence_table`), and numbers stored for the
prose (:func:`glue`).
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

from capassign import (CapacityAdherence, _check_frame, _validate_bool, _validate_int,
                       _validate_real)


# --- figures: one style, drawn at the width of the text column ------------------

#: Width of the book's text column in CSS pixels (the article at a 1280-px window).
COLUMN_PX = 688
#: Dots per inch of the book's figures in CSS pixels: one inch of a figure is
#: 100 CSS pixels on the page.
BOOK_DPI = 100
#: Device pixels per CSS pixel of a figure's PNG: figures are stored at twice
#: the resolution at which the page shows them, sharp on HiDPI screens.
PIXEL_RATIO = 2
#: Width of a figure that fills the text column, in inches (the largest allowed).
COLUMN_INCHES = COLUMN_PX / BOOK_DPI
#: Default width of a figure, in inches.  A figure is shown at this width at
#: 1280 px and shrunk to the column at 390 px (342 CSS px): its 10.5-pt text is
#: 14.6 px on a laptop and 9.2 px on a phone.
FIGURE_INCHES = 5.4

#: The Okabe-Ito palette (Okabe & Ito, "Color Universal Design"), whose colours
#: stay apart under the common colour-vision deficiencies.
OKABE_ITO = {"black": "#000000", "orange": "#E69F00", "sky blue": "#56B4E9",
             "bluish green": "#009E73", "yellow": "#F0E442", "blue": "#0072B2",
             "vermillion": "#D55E00", "reddish purple": "#CC79A7", "grey": "#7F7F7F"}

#: Colour, line style, marker and label of every policy in every figure of the
#: book: each policy of the paper differs from every other in colour and in line
#: style or marker, and the colours come from :data:`OKABE_ITO` (the two logistic
#: policies are blue and green, the two tree policies vermillion and purple, never
#: two shades of one hue); the exploration policies beyond the paper's differ from
#: their family's in marker and line style (logistic UCB also in colour).  :func:`book_figure` makes :data:`capassign.POLICY_STYLE`
#: (which the library's plots read) take these styles.
BOOK_POLICY_STYLE = {
    "random": dict(color="0.35", ls=":", marker="o", label="non-contextual (random)"),
    "marginal": dict(color=OKABE_ITO["orange"], ls=":", marker="x", label="learned marginal"),
    "logistic-greedy": dict(color=OKABE_ITO["blue"], ls="-", marker="s",
                            label="logistic greedy"),
    "logistic-ts": dict(color=OKABE_ITO["bluish green"], ls="--", marker="^",
                        label="logistic TS"),
    "tree-greedy": dict(color=OKABE_ITO["vermillion"], ls="-", marker="D", label="tree greedy"),
    "tree-ts": dict(color=OKABE_ITO["reddish purple"], ls="--", marker="v", label="tree TS"),
    "offline-logistic": dict(color=OKABE_ITO["blue"], ls=(0, (1, 3)), marker="",
                             label="offline logistic (unconstrained)"),
    "offline-tree": dict(color=OKABE_ITO["vermillion"], ls=(0, (1, 3)), marker="",
                         label="offline tree (unconstrained)"),
    "hindsight": dict(color="k", ls="-.", marker="", label="hindsight optimum"),
    # beyond the paper (capassign.EXPLORATION_POLICIES): the family's colour, a
    # dash-dot line and a marker of their own
    "marginal-egreedy": dict(color=OKABE_ITO["orange"], ls="-.", marker="P",
                             label="marginal ε-greedy"),
    "logistic-ucb": dict(color=OKABE_ITO["sky blue"], ls="-.", marker="o", label="logistic UCB"),
    "logistic-egreedy": dict(color=OKABE_ITO["blue"], ls="-.", marker="P",
                             label="logistic ε-greedy"),
    "tree-egreedy": dict(color=OKABE_ITO["vermillion"], ls="-.", marker="P",
                         label="tree ε-greedy"),
}

#: Matplotlib settings of every figure in the book (applied by :func:`book_figure`).
#: At :data:`BOOK_DPI`, one point is 1.39 CSS pixels: the smallest text (10.5 pt,
#: tick labels and legends) is 14.6 px high in a figure shown at its drawn size.
#: Lines without a colour of their own take the colours of :data:`OKABE_ITO`.
BOOK_STYLE = {
    "figure.dpi": BOOK_DPI, "savefig.dpi": BOOK_DPI * PIXEL_RATIO, "font.size": 11,
    "axes.titlesize": 11, "axes.labelsize": 11, "legend.fontsize": 10.5,
    "xtick.labelsize": 10.5, "ytick.labelsize": 10.5, "axes.spines.top": False,
    "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3, "legend.frameon": False,
    "lines.linewidth": 1.8, "lines.markersize": 5,
    "axes.prop_cycle": "cycler(color=['#0072B2', '#D55E00', '#009E73', '#CC79A7', "
                       "'#E69F00', '#56B4E9', '#000000', '#7F7F7F'])",
}

#: Key of the PNG text chunk in which :func:`figure_png` records the smallest
#: font of a figure, in points (read by the book's browser test).
FONT_RECORD_KEY = "capbook:min-font-pt"
#: Key of the PNG text chunk in which :func:`figure_png` records what a legend
#: of the figure covers (:func:`legend_overlaps`; ``none`` when nothing).
OVERLAP_RECORD_KEY = "capbook:legend-overlaps"


def _row_height(ncols):
    """Default height in inches of one row of ``ncols`` panels across the figure."""
    return {1: 3.3, 2: 2.9, 3: 2.6}.get(ncols, 2.4)


def _apply_book_style():
    """Set :data:`BOOK_STYLE` and make the library's plots draw :data:`BOOK_POLICY_STYLE`."""
    import capassign
    import matplotlib.pyplot as plt

    plt.rcParams.update(BOOK_STYLE)
    for policy, style in BOOK_POLICY_STYLE.items():
        capassign.POLICY_STYLE[policy] = dict(style)


def policy_style(policy):
    """The book's style of ``policy`` (:data:`BOOK_POLICY_STYLE`): keyword arguments of ``plot``.

    Parameters
    ----------
    policy : str
        A policy of :data:`BOOK_POLICY_STYLE`; any other name is drawn in its own
        label with matplotlib's defaults.

    Returns
    -------
    dict
        ``color``, ``ls``, ``marker`` and ``label`` (a copy).

    Examples
    --------
    >>> policy_style("tree-ts")["color"], policy_style("tree-ts")["marker"]
    ('#CC79A7', 'v')
    >>> policy_style("my policy")
    {'label': 'my policy'}
    """
    return dict(BOOK_POLICY_STYLE.get(policy, {"label": str(policy)}))


def book_figure(ncols=1, nrows=1, *, width=None, height=None, **subplots):
    """A new figure in the book's one style (:data:`BOOK_STYLE`, :data:`BOOK_POLICY_STYLE`).

    The default width is :data:`FIGURE_INCHES`, at which the page shows the
    figure at 1280 px; at 390 px the page shrinks it to the column and its
    smallest text stays at least 9 px high.  The default height is 3.3 inches
    per row of one panel, 2.9 of two, 2.6 of three.  In a notebook the figure
    is shown through :func:`figure_png` (twice the page's resolution, its
    smallest font and legend overlaps recorded).  Extra keyword arguments go
    to :func:`matplotlib.pyplot.subplots`.

    Returns
    -------
    fig, axes
        As from :func:`matplotlib.pyplot.subplots` (``axes`` is an array
        when there is more than one panel).

    Examples
    --------
    >>> fig, ax = book_figure()
    >>> fig.get_size_inches().tolist()
    [5.4, 3.3]
    >>> import matplotlib.pyplot as plt; plt.close(fig)

    Parameters
    ----------
    ncols, nrows : int
        Panels across and down.
    width, height : float, optional
        Figure size in inches (defaults above); a width above
        :data:`COLUMN_INCHES` is refused, since the page would shrink the figure.
    **subplots
        Further arguments of :func:`matplotlib.pyplot.subplots`.
    """
    import matplotlib.pyplot as plt

    ncols = _validate_int(ncols, "ncols", 1)
    nrows = _validate_int(nrows, "nrows", 1)
    w = FIGURE_INCHES if width is None else _validate_real(width, "width", 0.5)
    if w > COLUMN_INCHES:
        raise ValueError(f"width must be at most the text column's {COLUMN_INCHES} inches, "
                         f"got {w}")
    h = _row_height(ncols) * nrows if height is None else _validate_real(height, "height", 0.5)
    _apply_book_style()
    fig, axes = plt.subplots(nrows, ncols, figsize=(w, h), **subplots)
    # after the first figure: that is when pyplot sets up the notebook's own formatter
    _show_figures_as_book_png()
    return fig, axes


def smallest_font(fig):
    """The smallest font size, in points, of the visible text of a drawn figure.

    Counts every visible, non-empty text of the figure: titles, axis labels,
    tick labels, legend entries and annotations.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure (drawn first if it has not been).

    Returns
    -------
    float or None
        None when the figure holds no text.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = book_figure()
    >>> _ = ax.set_title("a title"); _ = ax.text(0.5, 0.5, "note", fontsize=7)
    >>> smallest_font(fig)
    7.0
    >>> plt.close(fig)
    """
    from matplotlib.text import Text

    fig.canvas.draw()
    sizes = [t.get_fontsize() for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip()
             and (t.axes is None or t.axes.get_visible())]
    return float(min(sizes)) if sizes else None


def _axis_boxes(fig, renderer):
    """(name, bounding box) of every panel's axis labels, tick labels and plotting area."""
    boxes = []
    for k, ax in enumerate(fig.get_axes(), start=1):
        if not ax.get_visible():
            continue
        boxes.append((f"panel {k}", ax.get_window_extent(renderer)))
        for which, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            if axis.label.get_visible() and axis.label.get_text().strip():
                boxes.append((f"panel {k}'s {which}-axis label",
                              axis.label.get_window_extent(renderer)))
            drawn = axis._update_ticks()     # the ticks inside the view, as drawn
            ticks = [label.get_window_extent(renderer) for tick in drawn
                     for label in (tick.label1, tick.label2)
                     if label.get_visible() and label.get_text().strip()]
            if ticks:
                from matplotlib.transforms import Bbox

                boxes.append((f"panel {k}'s {which} tick labels", Bbox.union(ticks)))
    return boxes


def legend_overlaps(fig, *, pad=1.0):
    """What the legends of a figure cover: axis labels, tick labels or a panel.

    A legend of the figure (:func:`legend_outside`) may cover no panel, no axis
    label and no tick label; a legend inside a panel may cover no axis label or
    tick label (of any panel); no legend may cover another.  Boxes are compared as drawn, grown by ``pad``
    pixels so that touching counts as covering.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure (drawn first).
    pad : float
        Pixels added around every legend before comparing.

    Returns
    -------
    list of str
        One entry per legend and what it covers; empty when nothing.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = book_figure()
    >>> _ = ax.plot([0, 1], [0, 1], label="a line"); _ = ax.set_xlabel("capacity")
    >>> _ = legend_outside(fig); legend_overlaps(fig)
    []
    >>> fig.legends[0].set_bbox_to_anchor((0.5, 0.02), transform=fig.transFigure)
    >>> legend_overlaps(fig)               # lifted onto the x-axis label
    ["figure legend 1 covers panel 1's x-axis label"]
    >>> plt.close(fig)
    """
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = _axis_boxes(fig, renderer)
    legends = [(f"figure legend {k}", leg, True) for k, leg in enumerate(fig.legends, start=1)]
    legends += [(f"panel {k}'s legend", ax.get_legend(), False)
                for k, ax in enumerate(fig.get_axes(), start=1)
                if ax.get_legend() is not None and ax.get_visible()]
    found = []
    shown = [(name, leg.get_window_extent(renderer)) for name, leg, _ in legends
             if leg.get_visible()]
    for k, (name, box) in enumerate(shown):
        found += [f"{name} covers {other}" for other, b in shown[k + 1:]
                  if box.padded(pad).overlaps(b)]
    for name, leg, of_figure in legends:
        if not leg.get_visible():
            continue
        box = leg.get_window_extent(renderer).padded(pad)
        for what, other in boxes:
            if what.startswith("panel") and what.endswith(tuple("0123456789")) and not of_figure:
                continue    # a legend inside a panel sits over its plotting area by design
            if box.overlaps(other):
                found.append(f"{name} covers {what}")
    return found


def figure_png(fig):
    """PNG bytes of a figure as the book shows it, with what a test of the page needs recorded.

    The figure is saved as a notebook shows it (tight bounding box, the
    figure's own colours) at :data:`PIXEL_RATIO` times :data:`BOOK_DPI`: the
    page shows it at half its pixel width (:func:`_figure_png_base64` gives the
    notebook that width), sharp on screens of two device pixels per CSS pixel.
    Two PNG text chunks record the smallest font of its text in points
    (:func:`smallest_font`, key :data:`FONT_RECORD_KEY`) and what its legends
    cover (:func:`legend_overlaps`, key :data:`OVERLAP_RECORD_KEY`), so that a
    test of the rendered page can check both from the PNG alone.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure.

    Returns
    -------
    bytes

    Examples
    --------
    >>> import io, matplotlib.pyplot as plt
    >>> from PIL import Image
    >>> fig, ax = book_figure()
    >>> _ = ax.plot([0, 1], [0, 1])
    >>> png = Image.open(io.BytesIO(figure_png(fig)))
    >>> png.text[FONT_RECORD_KEY], png.text[OVERLAP_RECORD_KEY], round(png.info["dpi"][0])
    ('10.5', 'none', 200)
    >>> plt.close(fig)
    """
    import io

    pt = smallest_font(fig)
    meta = {FONT_RECORD_KEY: f"{pt:g}"} if pt is not None else {}
    meta[OVERLAP_RECORD_KEY] = "; ".join(legend_overlaps(fig)) or "none"
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=BOOK_DPI * PIXEL_RATIO, bbox_inches="tight",
                facecolor=fig.get_facecolor(), edgecolor=fig.get_edgecolor(), metadata=meta)
    return buf.getvalue()


def _figure_png_base64(fig):
    """(base64 PNG, its display size in CSS pixels) of ``fig`` for the notebook, or None."""
    import base64
    import struct

    if not fig.axes and not fig.lines:
        return None  # nothing drawn: as the notebook's own formatter, show nothing
    png = figure_png(fig)
    width, height = struct.unpack(">II", png[16:24])   # the IHDR chunk
    size = {"width": width // PIXEL_RATIO, "height": height // PIXEL_RATIO}
    return base64.b64encode(png).decode("ascii"), size


def _show_figures_as_book_png():
    """In a notebook, show every matplotlib figure through :func:`figure_png`."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with the notebook tools
        return
    shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return
    from matplotlib.figure import Figure

    shell.display_formatter.formatters["image/png"].for_type(Figure, _figure_png_base64)


def legend_outside(fig, ax=None, *, ncol=None):
    """One legend for the whole figure, below the panels, outside the data.

    The entries are taken from ``ax`` (default: the figure's first axes; with
    ``"all"``, every labelled line of every panel, once each, in order of
    appearance) and spread over ``ncol`` columns (default: up to four; fewer
    when that many are wider than the figure).  The panels are lifted until
    their axis labels clear the legend by 6 px, so that the legend covers no
    axis, label or tick label (:func:`legend_overlaps`).  Returns the legend.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure.
    ax : matplotlib.axes.Axes or "all", optional
        The axes whose entries are shown.
    ncol : int, optional
        Columns of the legend.

    Returns
    -------
    matplotlib.legend.Legend

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = book_figure()
    >>> _ = ax.plot([0, 1], [0, 1], label="a"); _ = ax.plot([0, 1], [1, 0], label="b")
    >>> [t.get_text() for t in legend_outside(fig).get_texts()]
    ['a', 'b']
    >>> plt.close(fig)
    """
    axes = fig.get_axes()
    if not axes:
        raise ValueError("legend_outside: the figure has no axes")
    if isinstance(ax, str) and ax == "all":
        entries = {}
        for a in axes:
            for h, lab in zip(*a.get_legend_handles_labels()):
                entries.setdefault(lab, h)
        handles, labels = list(entries.values()), list(entries)
    else:
        handles, labels = (ax or axes[0]).get_legend_handles_labels()
    if not handles:
        raise ValueError("legend_outside: the axes have no labelled lines")
    for a in axes:
        if a.get_legend() is not None:
            a.get_legend().remove()
    ncol = _validate_int(ncol, "ncol", 1) if ncol is not None else min(4, len(handles))
    fig.tight_layout()
    renderer = fig.canvas.get_renderer()
    while True:   # as many columns as fit the figure's width
        legend = fig.legend(handles, labels, loc="lower center", ncol=ncol, frameon=False,
                            bbox_to_anchor=(0.5, 0.0))
        fig.canvas.draw()
        if ncol == 1 or legend.get_window_extent(renderer).width <= fig.bbox.width:
            break
        legend.remove()
        ncol -= 1
    gap = 6.0 / fig.bbox.height          # 6 px between the axis labels and the legend
    for _ in range(3):   # the panels' labels move with them: place, measure, place again
        fig.canvas.draw()
        top = legend.get_window_extent(renderer).y1 / fig.bbox.height
        lowest = min(a.get_tightbbox(renderer).y0 for a in axes if a.get_visible())
        if lowest / fig.bbox.height >= top + gap - 1e-9:
            break
        bottom = fig.subplotpars.bottom + top + gap - lowest / fig.bbox.height
        fig.subplots_adjust(bottom=min(0.7, bottom))
    return legend


# --- tables: ours beside the paper's, as HTML in the page and text elsewhere ---


def _fmt_number(v, digits):
    """``v`` rounded to ``digits`` decimals, never ``-0.000``; integers as they are."""
    if isinstance(v, (bool, np.bool_)) or v is None:
        return str(v)
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}" if abs(int(v)) >= 10_000 else str(int(v))
    if isinstance(v, (float, np.floating)):
        if not np.isfinite(v):
            return "–" if np.isnan(v) else str(v)
        return f"{round(float(v), digits) + 0.0:.{digits}f}"
    return str(v)


#: Axis and column names that are symbols of the paper, and how a table's
#: header typesets them (:func:`show_table`).
SYMBOL_NAMES = {"alpha1": r"$\alpha_1$", "alpha_1": r"$\alpha_1$", "alpha": r"$\alpha$",
                "alpha2": r"$\alpha_2$", "eta": r"$\eta$", "mu": r"$\mu$"}

_TEX = re.compile(r"\$([^$]+)\$")


def _fmt_label(v):
    """A row or column label for a table: numbers short (0.2, not 0.200000), symbols as TeX."""
    if isinstance(v, tuple):
        return tuple(_fmt_label(x) for x in v)
    if isinstance(v, (bool, np.bool_)):
        return str(v)
    if isinstance(v, (float, np.floating)):
        return f"{float(v):g}" if np.isfinite(v) else str(v)
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return SYMBOL_NAMES.get(v, v) if isinstance(v, str) else v


def _tex_html(text):
    """``$...$`` in ``text`` as the inline math the book's MathJax typesets."""
    if not isinstance(text, str):
        return text
    return _TEX.sub(lambda m: f'<span class="math notranslate nohighlight">\\({m.group(1)}\\)'
                              f'</span>', text)


class Table:
    """A table for the book: HTML in the rendered page, aligned text elsewhere.

    Made by :func:`show_table`; a notebook displays its HTML (a box that scrolls
    sideways when wider than the text column), while ``print``, ``repr`` and
    the notebook's plain-text output (what nbval compares) give the same
    cells as text.  ``frame`` holds the formatted cells.

    Attributes
    ----------
    frame : pandas.DataFrame
        The formatted cells.

    Examples
    --------
    >>> import pandas as pd
    >>> t = show_table(pd.DataFrame({"error": [0.25, 0.125]}, index=["random", "tree-ts"]))
    >>> isinstance(t, Table)
    True
    >>> print(t)
             error
    random   0.250
    tree-ts  0.125
    """

    def __init__(self, frame, html, caption):
        self.frame, self.html, self.caption = frame, html, caption

    def __repr__(self):
        text = self.frame.to_string()
        return f"{self.caption}\n{text}" if self.caption else text

    def _repr_html_(self):
        return self.html


def show_table(df, *, digits=3, paper=None, tol=None, index=True, caption=None, formats=None,
               wrap=False, fold=False):
    """Format a results table for the book, with the paper's values beside ours.

    Numbers are rounded to ``digits`` decimals (never shown as ``-0.000``);
    ``formats`` maps a column to its own number of decimals or to a format
    function.  With ``paper`` (a frame whose index and columns are a subset of
    ``df``'s; NaN where the paper gives nothing) each such cell reads
    ``ours (paper)``, and where ``tol`` is given the cells that differ by more
    than ``tol`` are highlighted.

    Parameters
    ----------
    df : pandas.DataFrame
        Our values.
    digits : int
        Decimals of floats.
    paper : pandas.DataFrame, optional
        The paper's values, aligned with ``df`` by index and column labels.
    tol : float, optional
        Highlight cells where ``|ours - paper| > tol``.
    index : bool
        Show the index.
    caption : str, optional
        A title above the table.
    formats : dict, optional
        Per-column decimals (int) or ``callable(value) -> str``.
    wrap : bool
        Cells of text: left-aligned, wrapping long content over several
        lines.  By default every cell keeps one right-aligned line (numbers).
    fold : bool
        Fold the table under its caption (a detail table the reader opens
        on demand); needs ``caption``.

    Notes
    -----
    Row and column labels are printed short (``0.2``, not ``0.200000``), and
    labels and axis names that are symbols of the paper (:data:`SYMBOL_NAMES`,
    e.g. ``alpha1``) are typeset, as is any ``$...$`` in a label or the
    caption.

    Returns
    -------
    Table
        Displayed as HTML by a notebook, as text by ``print``.

    Examples
    --------
    >>> import pandas as pd
    >>> ours = pd.DataFrame({"random": [0.2801, -0.00001]}, index=["bank", "credit"])
    >>> paper = pd.DataFrame({"random": [0.278, float("nan")]}, index=["bank", "credit"])
    >>> print(show_table(ours, paper=paper, tol=0.01))
                   random
    bank    0.280 (0.278)
    credit          0.000
    """
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"df must be a pandas DataFrame, got {type(df).__name__}")
    digits = _validate_int(digits, "digits", 0)
    formats = dict(formats or {})
    if paper is not None:
        if not isinstance(paper, pd.DataFrame):
            raise TypeError(f"paper must be a pandas DataFrame, got {type(paper).__name__}")
        extra = [c for c in paper.columns if c not in df.columns]
        extra += [i for i in paper.index if i not in df.index]
        if extra:
            raise ValueError(f"paper has labels that df has not: {extra[:5]}")
    if tol is not None:
        tol = _validate_real(tol, "tol", 0.0)
    if _validate_bool(fold, "fold") and not caption:
        raise ValueError("fold needs a caption: the folded table shows only its caption")

    def cell_text(col, v):
        f = formats.get(col, digits)
        return f(v) if callable(f) else _fmt_number(v, f)

    text = pd.DataFrame(index=df.index, columns=df.columns, dtype=object)
    flag = pd.DataFrame(False, index=df.index, columns=df.columns)
    for col in df.columns:
        for i in df.index:
            v = df.at[i, col]
            s = cell_text(col, v)
            p = np.nan
            if paper is not None and col in paper.columns and i in paper.index:
                p = paper.at[i, col]
            if isinstance(p, (int, float, np.number)) and np.isfinite(p):
                s = f"{s} ({cell_text(col, p)})"
                if tol is not None and isinstance(v, (int, float, np.number)) \
                        and abs(float(v) - float(p)) > tol:
                    flag.at[i, col] = True
            text.at[i, col] = s
    # ids unique per table (several tables share a page) yet the same on every run
    uid = hashlib.sha256(repr((caption, text.to_string(), flag.to_numpy().tolist())).encode())
    styler = text.style.set_uuid(uid.hexdigest()[:10]).set_table_attributes('class="ca-table"')
    cell_style = ({"text-align": "left", "white-space": "normal", "vertical-align": "top",
                   "overflow-wrap": "anywhere"} if _validate_bool(wrap, "wrap")
                  else {"text-align": "right", "white-space": "nowrap"})
    styler = styler.set_properties(**cell_style)
    if flag.to_numpy().any():
        styler = styler.apply(lambda _: np.where(flag, "background-color: #fde2c8", ""),
                              axis=None)
    if not index:
        styler = styler.hide(axis="index")
        text = text.reset_index(drop=True)
    text = _relabel(text)
    styler = styler.format_index(lambda v: _tex_html(_fmt_label(v)), axis="columns")
    if index:
        styler = styler.format_index(lambda v: _tex_html(_fmt_label(v)), axis="index")
    names = [_tex_html(_fmt_label(n)) if n is not None else None for n in styler.index.names]
    cols = [_tex_html(_fmt_label(n)) if n is not None else None for n in styler.columns.names]
    if index and styler.index.nlevels == 1 and styler.columns.nlevels == 1:
        # one header row: the corner names the columns, else the rows
        cols = [cols[0] if cols[0] is not None else names[0]]
        styler = styler.hide(axis="index", names=True)
    styler.index.names, styler.columns.names = names, cols
    html = styler.to_html()
    note = ""
    if paper is not None:
        note = ("<div class=\"ca-table-note\">ours (paper)"
                + ("; shaded: differs by more than " + _fmt_number(float(tol), 3) if tol is not None
                   else "") + "</div>")
    head = f"<div class=\"ca-table-caption\">{_tex_html(caption)}</div>" if caption else ""
    box = (f"<div class=\"ca-table-box\" style=\"overflow-x:auto;max-width:100%\">"
           f"{'' if fold else head}{html}{note}</div>")
    if fold:
        box = (f"<details class=\"ca-fold\"><summary>{_tex_html(caption)}</summary>{box}"
               f"</details>")
    return Table(text, box, caption)


def _relabel(frame):
    """``frame`` with its row and column labels (and their names) as :func:`_fmt_label` prints them."""
    out = frame.copy()
    out.columns = out.columns.map(_fmt_label)
    out.index = out.index.map(_fmt_label)
    out.columns.names = [_fmt_label(n) if n is not None else None for n in frame.columns.names]
    out.index.names = [_fmt_label(n) if n is not None else None for n in frame.index.names]
    return out


class Fold:
    """Text folded under a title: a dropdown in the page, the text itself elsewhere.

    Made by :func:`fold_text`.  A notebook displays a closed fold whose title
    says what is inside; ``print``, ``repr`` and the notebook's plain text
    (what nbval compares) give the text.

    Attributes
    ----------
    title : str
        What the fold holds.
    text : str
        The folded text.

    Examples
    --------
    >>> f = fold_text("Accuracy per bin", "bank: 0.91 0.88")
    >>> print(f)
    bank: 0.91 0.88
    >>> f._repr_html_().startswith('<details class="ca-fold">')
    True
    """

    def __init__(self, title, text):
        self.title, self.text = title, text

    def __repr__(self):
        return self.text

    def _repr_html_(self):
        import html

        return (f"<details class=\"ca-fold\"><summary>{_tex_html(html.escape(self.title))}"
                f"</summary><pre class=\"ca-fold-text\">{html.escape(self.text)}</pre></details>")


def fold_text(title, text):
    """Printed detail (long text output) folded under ``title`` (:class:`Fold`).

    Parameters
    ----------
    title : str
        What the fold holds, shown when it is closed; ``$...$`` is typeset.
    text : str or sequence of str
        The text, or its lines; a line longer than :data:`PRINTED_WIDTH`
        characters is wrapped (:func:`wrap`).

    Returns
    -------
    Fold

    Examples
    --------
    >>> print(fold_text("Runs per cell", ["bank 10", "credit 12"]))
    bank 10
    credit 12
    >>> fold_text(" ", "x")
    Traceback (most recent call last):
    ...
    ValueError: title must be a non-empty str
    """
    if not isinstance(title, str) or not title.strip():
        raise ValueError("title must be a non-empty str")
    if not isinstance(text, str):
        text = "\n".join(str(line) for line in text)
    return Fold(title, wrap(text))


#: The longest line a chapter prints, in characters (the width of a code line).
PRINTED_WIDTH = 88


def wrap(text, width=PRINTED_WIDTH):
    """``text`` with every line longer than ``width`` characters broken at spaces.

    A broken line continues on lines indented by two spaces more than it, so
    that printed read-outs fit the text column at 1280 px without scrolling.
    Lines that fit are kept as they are, and a word longer than ``width`` is
    never split.

    Parameters
    ----------
    text : str
        The text, possibly of several lines.
    width : int
        Longest line.

    Returns
    -------
    str

    Examples
    --------
    >>> print(wrap("deviation at t = T: random 0.0078, marginal 0.0004, tree-ts 0.0005", 40))
    deviation at t = T: random 0.0078,
      marginal 0.0004, tree-ts 0.0005
    """
    import textwrap

    width = _validate_int(width, "width", 20)
    out = []
    for line in str(text).split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[:len(line) - len(line.lstrip())]
        out.append(textwrap.fill(line, width, subsequent_indent=indent + "  ",
                                 break_long_words=False, break_on_hyphens=False))
    return "\n".join(out)


def say(*values, sep=" "):
    """Print ``values`` as :func:`print` does, every line wrapped by :func:`wrap`.

    A chapter's read-outs print through it so that no printed line is longer
    than :data:`PRINTED_WIDTH` characters.

    Parameters
    ----------
    *values
        What to print, each as by ``str``.
    sep : str
        Put between the values.

    Returns
    -------
    None

    Examples
    --------
    >>> say("first decisions:", ["logistic", "xgboost"] * 12)
    first decisions: ['logistic', 'xgboost', 'logistic', 'xgboost', 'logistic', 'xgboost',
      'logistic', 'xgboost', 'logistic', 'xgboost', 'logistic', 'xgboost', 'logistic',
      'xgboost', 'logistic', 'xgboost', 'logistic', 'xgboost', 'logistic', 'xgboost',
      'logistic', 'xgboost', 'logistic', 'xgboost']
    """
    print(wrap(sep.join(str(v) for v in values)))


def error_table(df, value="error", digits=3, *, text=True):
    """Pivot a tidy result table to policies x alpha_1, as fixed-width strings for printing.

    Any numeric column can be shown (``value``), e.g. ``"gap"`` of
    :func:`capassign.hindsight_gaps` or ``"diff"`` of :func:`capassign.paired_tests`; missing
    values print as ``n/a``.  With ``text=False`` the pivot keeps its numbers
    (for :func:`show_table`).

    Parameters
    ----------
    df : pandas.DataFrame
        A tidy table with ``policy``, ``alpha1`` and the column ``value``.
    value : str
        The column shown.
    digits : int
        Decimals of the text.
    text : bool
        Strings (``True``) or the numbers.

    Returns
    -------
    pandas.DataFrame
        Policies (rows, in their first order) x alpha_1 (columns).

    Examples
    --------
    >>> import pandas as pd
    >>> df = pd.DataFrame({"policy": ["random", "random", "tree-ts"], "alpha1": [0.2, 0.5, 0.5],
    ...                    "error": [0.31, 0.3, 0.2]})
    >>> print(error_table(df))
    alpha1     0.2    0.5
    policy
    random   0.310  0.300
    tree-ts    n/a  0.200
    """
    t = df.pivot_table(index="policy", columns="alpha1", values=value, sort=False,
                       dropna=False)
    if not _validate_bool(text, "text"):
        return t
    return t.map(lambda v: _fmt_number(v, digits) if np.isfinite(v) else "n/a")


def _fmt_p(p):
    if not np.isfinite(p):
        return "n/a"
    return "<0.0001" if p < 1e-4 else f"{p:.4f}"


def paired_table(tests, digits=4):
    """:func:`capassign.paired_tests` as fixed-width strings, one row per (task, policy, alpha1).

    Parameters
    ----------
    tests : pandas.DataFrame
        A table from :func:`capassign.paired_tests`.
    digits : int
        Decimals of the difference and its interval.

    Returns
    -------
    pandas.DataFrame
        Text columns ``task``, ``policy``, ``alpha1``, ``diff``, ``95% CI``,
        ``p (t)``, ``p (Wilcoxon)``, ``p (Holm)`` and ``won/lost``.

    Examples
    --------
    >>> import numpy as np, pandas as pd, capassign as ca
    >>> df = pd.DataFrame({"task": "toy", "policy": ["random", "tree-ts"], "alpha1": 0.5,
    ...                    "errors": [np.array([0.30, 0.32, 0.31]), np.array([0.20, 0.23, 0.21])]})
    >>> paired_table(ca.paired_tests(df)).iloc[0].tolist()
    ['toy', 'tree-ts', '0.5', '-0.0967', '[-0.1110, -0.0823]', '0.0012', '0.2500', '0.0012', '3/0 of 3']
    """
    import pandas as pd

    _check_frame(tests, ("task", "policy", "alpha1", "diff", "ci_low", "ci_high", "p_t",
                         "p_wilcoxon", "p_holm", "won", "lost", "runs"), name="tests")
    def f(v):   # rounded first, so that a difference that rounds to zero reads +0.0000
        return f"{round(float(v), digits) + 0.0:+.{digits}f}"

    return pd.DataFrame({
        "task": tests["task"].astype(str),
        "policy": tests["policy"],
        "alpha1": tests["alpha1"].map(lambda v: f"{v:.1f}"),
        "diff": tests["diff"].map(f),
        "95% CI": [f"[{f(lo)}, {f(hi)}]"
                   for lo, hi in zip(tests["ci_low"], tests["ci_high"])],
        "p (t)": tests["p_t"].map(_fmt_p),
        "p (Wilcoxon)": tests["p_wilcoxon"].map(_fmt_p),
        "p (Holm)": tests["p_holm"].map(_fmt_p),
        "won/lost": [f"{w}/{l} of {n}" for w, l, n in
                     zip(tests["won"], tests["lost"], tests["runs"])],
    })


def adherence_table(adherences, digits=4):
    """Fixed-width table of :class:`capassign.CapacityAdherence` objects, one row each.

    Columns: ``task`` (the label), ``policy``, ``alpha`` (capacities),
    ``realised`` (mean final shares over runs), ``max dev (mean)`` and
    ``max dev (worst)`` (the per-run maximum running deviation, averaged over
    runs and at its worst run) and ``max tasks off (worst)`` (the same in
    tasks, worst run).

    Parameters
    ----------
    adherences : sequence of CapacityAdherence
        The rows.
    digits : int
        Decimals of the shares and deviations.

    Returns
    -------
    pandas.DataFrame
        Text cells.

    Examples
    --------
    >>> import capassign as ca
    >>> X, R, _ = ca.synthetic_stream(T=200, d=2, seed=1)
    >>> res = ca.simulate(X, R, (0.3, 0.7), "marginal", eta=ca.PAPER_ETA, runs=2,
    ...                   return_traces=True)
    >>> adherence_table([ca.capacity_adherence(res, label="toy")]).iloc[0].tolist()
    ['toy', 'marginal', '(0.3, 0.7)', '(0.3025, 0.6975)', '0.7000', '0.7000', '1.1']
    """
    import pandas as pd

    rows = []
    for ad in adherences:
        if not isinstance(ad, CapacityAdherence):
            raise TypeError(f"adherences must hold CapacityAdherence objects, got "
                            f"{type(ad).__name__}")
        caps = ", ".join("free" if np.isnan(c) else f"{c:g}" for c in ad.capacities)
        rows.append({"task": str(ad.label), "policy": ad.policy, "alpha": f"({caps})",
                     "realised": "(" + ", ".join(f"{s:.{digits}f}"
                                                 for s in ad.shares.mean(axis=0)) + ")",
                     "max dev (mean)": f"{ad.max_deviation.mean():.{digits}f}",
                     "max dev (worst)": f"{ad.max_deviation.max():.{digits}f}",
                     "max tasks off (worst)": f"{ad.max_count_deviation.max():.1f}"})
    return pd.DataFrame(rows)


# --- numbers for the prose ---------------------------------------------------


def glue(name, value, *, digits=10):
    """Store a number for a chapter's prose (myst-nb ``glue``), rounded first.

    A float is rounded to ``digits`` significant digits before it is stored,
    so that the stored output (which nbval compares on re-execution) does not
    carry last bits that follow the BLAS build, CPU or thread count; the prose
    formats it further (e.g. ``{glue:text}`key:.3f```).  Integers and other
    values are stored as they are.  Nothing is displayed.

    Parameters
    ----------
    name : str
        The key the prose refers to.
    value : int, float or object
        The value; NumPy scalars are converted to Python numbers.
    digits : int
        Significant digits kept of a float.

    Examples
    --------
    In a chapter, ``glue("da_fig1_split", 0.29442960928840245)`` stores
    0.2944296093, as it does for 0.2944296092884027 (the same number computed
    with other BLAS kernels); outside a notebook it stores nothing:

    >>> glue("da_fig1_split", 0.29442960928840245)

    Returns
    -------
    None
    """
    from myst_nb import glue as _glue

    if isinstance(value, (bool, np.bool_)):
        value = bool(value)
    elif isinstance(value, (int, np.integer)):
        value = int(value)
    elif isinstance(value, (float, np.floating)):
        value = float(f"{float(value):.{digits}g}")
    _glue(name, value, display=False)
