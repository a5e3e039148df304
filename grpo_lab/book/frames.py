"""The static half of the slider mechanism (:mod:`grpo_lab.book.sliders`): a figure drawn over a
grid of slider values (:func:`render_frames`), and the self-contained HTML that plays those
frames on the static site (:func:`frames_html`).

The HTML is the template ``slider_frames.html`` and its script is ``slider_player.js``, both
in this folder and shipped with the package: a few lines of markup and JavaScript, kept as
files of their own kind rather than as strings in Python.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import io
import itertools
import json
import math
import re
import string
import sys
from dataclasses import dataclass
from importlib import resources
from numbers import Real

__all__ = ["Frames", "check_grid", "describe_figures", "figure_alt", "frames_html",
           "grid_position", "render_frames"]


@dataclass(frozen=True)
class Frames:
    """Precomputed figures over a grid of slider values.

    =========  ==========================  ================================================
    Field      Shape                       Meaning
    =========  ==========================  ================================================
    names      (P,)                        the grid's parameters, in slider order
    values     P lists                     the values each parameter takes on the grid
    start      (P,)                        index of the start value of each parameter
    index      (prod of the value counts,) frame shown for each combination, C order
    images     (F,) PNG bytes              the distinct frames, F <= len(index)
    fixed      dict                        the other arguments, the same in every frame
    alts       (F,) str                    each distinct frame's alt text (:func:`figure_alt`)
    =========  ==========================  ================================================
    """

    names: tuple
    values: tuple
    start: tuple
    index: tuple
    images: tuple
    fixed: dict
    alts: tuple = ()

    def frame(self, **values) -> bytes:
        """The PNG shown for one combination of grid values: ``frames.frame(G=8, spread=1.0)``."""
        positions = [grid_position(n, o, values[n]) for n, o in zip(self.names, self.values)]
        return self.images[self.shown(positions)]

    def shown(self, positions) -> int:
        """Which of ``images`` the grid positions (one index per parameter) show."""
        flat = 0
        for options, i in zip(self.values, positions):
            flat = flat * len(options) + i              # C order: the last varies fastest
        return self.index[flat]


def grid_position(name, options, value) -> int:
    """Index of ``value`` in ``options`` (the grid of parameter ``name``); floats match to
    rounding (a log slider's 1.0). A value off the grid is a ValueError naming ``name``."""
    for i, option in enumerate(options):
        if option == value or (isinstance(option, Real) and isinstance(value, Real)
                               and not isinstance(option, bool)
                               and math.isclose(option, value, rel_tol=1e-9)):
            return i
    raise ValueError(f"grid[{name!r}]: expected a list containing the start value {value!r}, "
                     f"got {list(options)!r}")


def check_grid(grid, start_values, max_frames):
    """Raise ValueError / TypeError naming the problem unless ``grid`` is a non-empty dict of
    distinct values for names in ``start_values``, with at most ``max_frames`` combinations."""
    if not isinstance(grid, dict) or not grid:
        raise TypeError(f"grid: expected a non-empty dict of name -> list of values, "
                        f"got {type(grid).__name__}")
    for name, options in grid.items():
        if name not in start_values:
            known = ", ".join(repr(n) for n in start_values)
            raise ValueError(f"grid: expected names of the controls ({known}), got {name!r}")
        if not isinstance(options, (list, tuple)) or not options:
            raise ValueError(f"grid[{name!r}]: expected a non-empty list of values, "
                             f"got {options!r}")
        if len(set(map(repr, options))) != len(options):
            raise ValueError(f"grid[{name!r}]: expected distinct values, got {list(options)!r}")
    n_frames = math.prod(len(options) for options in grid.values())
    if n_frames > max_frames:
        sizes = " x ".join(str(len(options)) for options in grid.values())
        raise ValueError(f"grid: expected at most max_frames={max_frames} combinations, "
                         f"got {sizes} = {n_frames}")


def _plain(text) -> str:
    """A matplotlib label as a screen reader should hear it: one line, mathtext's ``$`` and
    backslashes dropped (``$\\beta$`` reads "beta")."""
    text = re.sub(r"\\(mathrm|text|mathbf|mathit)\{([^}]*)\}", r"\2", str(text))
    text = text.replace("$", "").replace("\\", "").replace("{", "").replace("}", "")
    return " ".join(text.split())


def figure_alt(fig) -> str:
    r"""The alt text of a matplotlib figure, from what the figure itself states: its title
    (the finding, by the book's convention: ``gl.book``), then each panel's title and what
    its axes measure.

    >>> import matplotlib; matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> fig, (a, b) = plt.subplots(1, 2)
    >>> _ = fig.suptitle("Bigger groups: fewer ties")
    >>> _ = a.set(title="$\\beta$ = 0.04", xlabel="G", ylabel="share")
    >>> figure_alt(fig)
    'Bigger groups: fewer ties. 2 panels: (1) beta = 0.04, share against G; (2) a plot.'
    >>> plt.close(fig)
    """
    title = _plain(fig._suptitle.get_text()) if getattr(fig, "_suptitle", None) else ""
    panels = []
    for ax in fig.axes:
        if not ax.get_visible() or ax.get_label() == "<colorbar>":
            continue
        names = [_plain(ax.get_title(loc)) for loc in ("left", "center", "right")]
        name = "; ".join(n for n in names if n)
        x, y = _plain(ax.get_xlabel()), _plain(ax.get_ylabel())
        what = f"{y} against {x}" if x and y else (y or x)
        panels.append(", ".join(part for part in (name, what) if part) or "a plot")
    if len(panels) == 1:
        body = panels[0][0].upper() + panels[0][1:] + "."
    else:
        body = f"{len(panels)} panels: " + "; ".join(
            f"({i}) {p}" for i, p in enumerate(panels, 1)) + "."
    if not panels:
        body = ""
    text = f"{title.rstrip('.')}. {body}" if title else body
    return text.strip() or "A figure without a title."


def _figure_alt_metadata(fig):
    """IPython mime-bundle hook: no data of its own (the inline backend draws the PNG), only
    the alt text as the PNG's output metadata, which ``_ext/grpo_site.py`` puts on the page."""
    try:
        return {}, {"image/png": {"alt": figure_alt(fig)}}
    except Exception:  # an alt text must never break a figure
        return {}, {}


def describe_figures(shell=None) -> bool:
    """Give every matplotlib figure that the IPython ``shell`` displays its alt text
    (:func:`figure_alt`) as output metadata. The book build runs this in the kernel that
    executes the chapters (``_ext/grpo_site.py``); returns False outside IPython."""
    if shell is None:
        ipython = sys.modules.get("IPython")  # not loaded: not in IPython, and no import
        shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return False
    shell.display_formatter.mimebundle_formatter.for_type_by_name(
        "matplotlib.figure", "Figure", _figure_alt_metadata)
    return True


def _png(fig, dpi, colors) -> bytes:
    """The figure as a palette PNG: ``colors`` colours, no dithering (flat plots stay crisp)."""
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    image = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    image = image.quantize(colors=colors, method=Image.Quantize.MEDIANCUT,
                           dither=Image.Dither.NONE)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


def render_frames(figure, grid, start, *, dpi=72, colors=16, max_frames=64) -> Frames:
    """Draw ``figure(**values, fig=fig)`` for every combination of the ``grid`` values.

    ``start`` holds every argument's start value: the grid's parameters start there (each
    must be on its grid), the others stay there in every frame. Identical frames are kept once.

    >>> import matplotlib; matplotlib.use("Agg")
    >>> import grpo_lab as gl
    >>> frames = render_frames(gl.book.ch01.advantage_explorer_figure,
    ...                        {"G": [4, 8], "spread": [1.0, 10.0]},
    ...                        {"G": 8, "spread": 1.0, "scale": "group", "n_groups": 200})
    >>> len(frames.index), frames.start
    (4, (1, 0))
    >>> frames.frame(G=4, spread=1.0) == frames.frame(G=8, spread=1.0)   # G changes the figure
    False
    """
    import matplotlib.pyplot as plt

    check_grid(grid, start, max_frames)
    names = tuple(grid)
    values = tuple(tuple(grid[n]) for n in names)
    first = tuple(grid_position(n, grid[n], start[n]) for n in names)
    fixed = {k: v for k, v in start.items() if k not in grid}

    fig = None
    images, alts, seen, index = [], [], {}, []
    for combo in itertools.product(*values):  # C order: the last parameter varies fastest
        fig = figure(**fixed, **dict(zip(names, combo)), fig=fig)
        png = _png(fig, dpi, colors)
        if png not in seen:
            seen[png] = len(images)
            images.append(png)
            alts.append(figure_alt(fig))
        index.append(seen[png])
    plt.close(fig)
    return Frames(names, values, first, tuple(index), tuple(images), fixed, tuple(alts))


def _label(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _template_file(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


@functools.cache
def _templates() -> dict:
    """The sections of ``slider_frames.html`` as ``string.Template`` (each joined from its
    lines without their indentation) and the player script of ``slider_player.js`` (as it is,
    less its leading ``//`` comment lines). Both files ship with the package."""
    parts = re.split(r"<!--\s*section:\s*(\w+).*?-->", _template_file("slider_frames.html"),
                     flags=re.S)
    sections = {name: string.Template("".join(line.strip() for line in body.splitlines()))
                for name, body in zip(parts[1::2], parts[2::2])}
    lines = _template_file("slider_player.js").splitlines(keepends=True)
    while lines and lines[0].startswith("//"):
        lines.pop(0)
    return {"sections": sections, "script": "\n" + "".join(lines)}   # "<script>\n(function"


def frames_html(frames: Frames, *, labels=None, title="") -> str:
    """A self-contained HTML widget (inputs, one image, a small inline script) for ``frames``.

    ``labels`` maps a parameter name to the text shown beside its slider. The image's alt
    text is the shown frame's own (``frames.alts``: its title and panels, see
    :func:`figure_alt`), after ``title`` if one is given, then the slider settings. Numeric
    grids become range sliders (each with ``aria-valuetext``: the value shown beside it,
    not its position on the grid), others a drop-down list. The markup is the template
    ``slider_frames.html``; the script is ``slider_player.js``.
    """
    html_of = _templates()["sections"]
    labels = labels or {}
    encoded = [base64.b64encode(png).decode("ascii") for png in frames.images]
    alts = list(frames.alts) if len(frames.alts) == len(encoded) else [""] * len(encoded)
    alts = [": ".join(part for part in (title, alt) if part) or "figure" for alt in alts]
    data = {"names": [labels.get(n, n) for n in frames.names],
            "values": [[_label(v) for v in options] for options in frames.values],
            "index": list(frames.index), "images": encoded, "alts": alts}
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    uid = hashlib.sha1(payload.encode()).hexdigest()[:12]  # stable across builds

    controls = []
    for k, (name, options) in enumerate(zip(frames.names, frames.values)):
        start = frames.start[k]
        if all(isinstance(v, Real) and not isinstance(v, bool) for v in options):
            control = html_of["range"].substitute(uid=uid, k=k, last=len(options) - 1,
                                                  start=start,
                                                  value=html.escape(_label(options[start])))
        else:
            opts = "".join(html_of["option"].substitute(
                i=i, selected=" selected" if i == start else "", value=html.escape(_label(v)))
                for i, v in enumerate(options))
            control = html_of["select"].substitute(uid=uid, k=k, options=opts)
        controls.append(html_of["label"].substitute(uid=uid, k=k, control=control,
                                                    text=html.escape(labels.get(name, name))))

    fixed = ", ".join(f"{html.escape(labels.get(k, k))}={html.escape(_label(v))}"
                      for k, v in frames.fixed.items())
    start_parts = ", ".join(f"{labels.get(n, n)}={_label(o[i])}"
                            for n, o, i in zip(frames.names, frames.values, frames.start))
    frame = frames.shown(frames.start)
    return html_of["player"].substitute(
        uid=uid, frame=frame, controls="".join(controls), image=encoded[frame],
        alt=html.escape(f"{alts[frame]} ({start_parts})"),
        settings=len(frames.index), distinct=len(frames.images),
        kb=f"{sum(len(s) for s in encoded) / 1000:.0f}", fixed=fixed or "nothing",
        payload=payload, script=_templates()["script"])
