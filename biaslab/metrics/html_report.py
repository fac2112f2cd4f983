"""Shared pieces of the HTML reports: figure saving, tables, and the page wrapper."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

#: Script recording, on the page, whether every figure loaded (read by the headless-browser tests).
IMAGE_CHECK = ("<script>window.addEventListener('load',function(){var i=document.images,n=0;"
               "for(var k=0;k<i.length;k++){if(i[k].complete&&i[k].naturalWidth>0){n++;}}"
               "document.body.setAttribute('data-images-loaded',n+'/'+i.length);});</script>")

_STYLE = ("<style>body{font-family:sans-serif;max-width:1100px;margin:auto} img{max-width:100%;display:block}"
          "table{border-collapse:collapse;font-size:12px} td,th{padding:2px 6px;border-bottom:1px solid #ddd}"
          "</style>")


def save_figure(fig, out: Path, name: str) -> str:
    """Save a matplotlib figure as out/name and close it; returns the name for an <img src>."""
    fig.tight_layout()
    fig.savefig(out / name, dpi=90)
    plt.close(fig)
    return name


def table_html(frame: pd.DataFrame) -> str:
    """A data frame as a compact HTML table (4 significant digits, empty cells for missing values)."""
    return frame.to_html(index=False, float_format=lambda x: f"{x:.4g}", na_rep="", border=0)


def write_page(out: Path, title: str, parts: Sequence[str]) -> Path:
    """Write out/index.html from body fragments, with the shared style and the image-load check."""
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>{IMAGE_CHECK}{_STYLE}"
            "</head><body>" + "\n".join(parts) + "</body></html>")
    index = out / "index.html"
    index.write_text(page, encoding="utf-8")
    return index
