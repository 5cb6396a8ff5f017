"""How the reproduction scorecard shows its verdicts to a reader: badges, legend, plain maths.

The verdicts themselves come from :mod:`capbook.readouts` (``scorecard_verdict``,
``verdict_kind``); this module only decides how they look.  A badge's colour
stands for one of five meanings (:data:`VERDICT_MEANINGS`): reproduced,
differs with a cause the book demonstrates, differs with the cause unknown,
inconclusive, and not a result (a setting, a value fixed by construction, a
result on substitutes, context, an item not re-run or pending).  The badge's
text always names the kind as well, so colour is never the only signal; the
book's style sheet (``book/_static/capassign.css``) keeps a badge on one line.
"""

from __future__ import annotations

import html
import re

from capassign import _validate_choice

from .readouts import VERDICT_KINDS

#: The five meanings of a badge's colour, in the order of the legend: each with its CSS
#: class (``book/_static/capassign.css``) and what it means, in words.
VERDICT_MEANINGS = {
    "reproduced": ("sc-result", "our result agrees with the paper's, by the item's rule"),
    "differs, cause demonstrated": (
        "sc-cause", "ours disagrees, and a computation in the book shows why"),
    "differs, cause unknown": (
        "sc-differs", "ours disagrees, and the book has not found why"),
    "inconclusive": ("sc-inconclusive", "the evidence cannot decide the paper's claim"),
    "not a result": (
        "sc-notresult", "a setting copied, a value fixed by construction, a result on "
        "substitute agents or data, context, or an item not re-run or pending"),
}


def verdict_meaning(kind, cause=None):
    """Which of the five meanings (:data:`VERDICT_MEANINGS`) a verdict kind has.

    Parameters
    ----------
    kind : str
        One of ``capbook.VERDICT_KINDS``.
    cause : str, optional
        An item's ``cause`` (``"tested"`` when a computation in the book shows
        why a result differs); read only for a result that differs.

    Returns
    -------
    str
        A key of :data:`VERDICT_MEANINGS`.

    Examples
    --------
    >>> verdict_meaning("result differs", "tested"), verdict_meaning("result differs")
    ('differs, cause demonstrated', 'differs, cause unknown')
    >>> verdict_meaning("setting copied")
    'not a result'
    """
    _validate_choice(kind, VERDICT_KINDS, "kind")
    if kind == "result differs":
        return "differs, cause demonstrated" if cause == "tested" else "differs, cause unknown"
    return {"result reproduced": "reproduced",
            "result inconclusive": "inconclusive"}.get(kind, "not a result")


def verdict_badge(kind, text=None, cause=None):
    """A verdict as a coloured label that never wraps (HTML).

    Parameters
    ----------
    kind : str
        One of ``capbook.VERDICT_KINDS``.
    text : str, optional
        The label's words; default the kind itself.
    cause : str, optional
        As in :func:`verdict_meaning`.

    Returns
    -------
    str
        A ``<span class="sc-verdict ...">`` whose class is the meaning's and whose
        title is the meaning in words.

    Examples
    --------
    >>> verdict_badge("result differs", "does not hold", "tested")
    '<span class="sc-verdict sc-cause" title="differs, cause demonstrated">does not hold</span>'
    """
    meaning = verdict_meaning(kind, cause)
    return (f'<span class="sc-verdict {VERDICT_MEANINGS[meaning][0]}" '
            f'title="{html.escape(meaning)}">{html.escape(text or kind)}</span>')


def verdict_legend():
    """The legend of the badges' colours (HTML), one line per meaning.

    Returns
    -------
    str
        A ``<div class="sc-legend">`` with the five badges and their meanings.

    Examples
    --------
    >>> legend = verdict_legend()
    >>> legend.count('class="sc-verdict'), "sc-cause" in legend
    (5, True)
    """
    rows = "".join(f'<li><span class="sc-verdict {cls}">{html.escape(name)}</span> '
                   f"{html.escape(words)}</li>"
                   for name, (cls, words) in VERDICT_MEANINGS.items())
    return ('<div class="sc-legend"><div class="ca-table-caption">What the colours mean'
            f'</div><ul>{rows}</ul></div>')


_SUBSCRIPT = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")
_GREEK = {"alpha": "α", "eta": "η", "Delta": "Δ", "theta": "θ", "lambda": "λ", "mu": "μ",
          "tau": "τ", "sigma": "σ"}
_MATH_WORD = re.compile(r"\b(" + "|".join(_GREEK) + r")(?:_(\d+))?\b")


def plain_maths(text):
    """The scorecard's item text with its ASCII maths typeset in Unicode.

    ``alpha_1`` becomes α₁, ``eta`` η, ``Delta(x)`` Δ(x), ``<=`` ≤, ``>=`` ≥,
    ``sqrt(`` √(; the rest of the text is unchanged.

    Parameters
    ----------
    text : str
        A field of an item of ``book/scorecard.yml``.

    Returns
    -------
    str

    Examples
    --------
    >>> plain_maths("alpha_1 = 0.5, eta <= 5, O(sqrt(A T H(theta*)))")
    'α₁ = 0.5, η ≤ 5, O(√(A T H(θ*)))'
    >>> plain_maths("beta and theta_12")
    'beta and θ₁₂'
    """
    text = _MATH_WORD.sub(lambda m: _GREEK[m[1]] + (m[2] or "").translate(_SUBSCRIPT),
                          str(text))
    return text.replace("<=", "≤").replace(">=", "≥").replace("sqrt(", "√(")
