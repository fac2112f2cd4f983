"""Layout checks of the HTML reports (issue 36, item 5), shared by the report tests.

* `page_overflow`: the report opened in headless Chromium at a given window width; every element whose box reaches
  past the page's width (a table or image wider than the page, clipped or scrolled). A copy of the page gets a
  script that measures after the images load and writes the result into the DOM, read back with --dump-dom.
* `figure_problems`: from matplotlib's renderer, the text of a figure that overlaps other text (tick labels,
  annotations, titles) or runs past the figure, and legends that cover plotted data.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

MEASURE = """<script>
window.addEventListener('load', () => setTimeout(() => {
  const width = document.documentElement.clientWidth;
  const wide = [];
  for (const el of document.body.querySelectorAll('*')) {
    const box = el.getBoundingClientRect();
    if (box.width > 0 && box.right > width + 1) {
      wide.push({tag: el.tagName, right: Math.round(box.right), text: (el.textContent || el.src || '').slice(0, 60)});
    }
  }
  document.body.setAttribute('data-layout', JSON.stringify({width: width, wide: wide}));
}, 200));
</script>"""


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def dump_dom(page: Path, profile: Path, width: int | None = None) -> str:
    """The DOM of `page` after it loaded in headless Chromium (5 s of virtual time), at `width` px when given."""
    browser = chromium()
    assert browser is not None
    size = [f"--window-size={width},1000"] if width else []
    return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--no-first-run", f"--user-data-dir={profile}", *size, "--virtual-time-budget=5000",
                           "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout


def page_overflow(index: Path, width: int = 1400, profile: Path | None = None) -> dict:
    """{'width': the page width Chromium laid out, 'wide': elements reaching past it} of the report `index`."""
    probe = index.with_name("_layout_probe.html")
    probe.write_text(index.read_text(encoding="utf-8").replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    try:
        dom = dump_dom(probe, profile or index.parent / ".chromium", width)
    finally:
        probe.unlink()
    found = re.search(r'data-layout="([^"]*)"', dom)
    assert found, dom[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                      .replace("&gt;", ">"))


def figure_problems(fig) -> list[str]:
    """Overlapping or clipped text and legends over data in a drawn matplotlib figure (see the module docstring)."""
    from matplotlib.patches import Rectangle
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    page = fig.bbox
    problems = []
    hidden = set()  # tick labels matplotlib does not draw (ticks outside the view limits)
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            drawn = {id(t.label1) for t in axis._update_ticks()} | {id(t.label2) for t in axis._update_ticks()}
            hidden |= {id(t) for t in axis.get_ticklabels(which="both") if id(t) not in drawn}
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and t.figure is fig
             and id(t) not in hidden]
    boxes = [(t, t.get_window_extent(renderer)) for t in texts]
    for t, box in boxes:
        if box.x0 < page.x0 - 1 or box.x1 > page.x1 + 1 or box.y0 < page.y0 - 1 or box.y1 > page.y1 + 1:
            problems.append(f"text {t.get_text()!r} runs past the figure")
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1:]:
            if _inside_legend(a, b):
                continue
            if box_a.overlaps(box_b) and _area(box_a, box_b) > 4:
                problems.append(f"text {a.get_text()!r} overlaps {b.get_text()!r}")
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        lbox = legend.get_window_extent(renderer)
        for patch in ax.patches:
            if isinstance(patch, Rectangle) and patch.get_height() != 0 and patch.get_visible():
                pbox = patch.get_window_extent(renderer)
                if lbox.overlaps(pbox) and _area(lbox, pbox) > 4:
                    problems.append(f"the legend of {ax.get_title()!r} covers a bar")
                    break
    return problems


def _inside_legend(a, b) -> bool:
    """Two texts of one legend (laid out by the legend itself)."""
    return any(t.axes is None and t.get_figure() is not None for t in (a, b)) and \
        getattr(a, "_legend", None) is not None and a._legend is getattr(b, "_legend", None)


def _area(a, b) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return max(0.0, w) * max(0.0, h)
