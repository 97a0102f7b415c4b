"""One self-contained HTML page from several figures: plotly.js inlined once, no CDN, works offline."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

PLOT_CONFIG = {"displaylogo": False, "responsive": True, "toImageButtonOptions": {"scale": 2}}
_STYLE = """
body { font-family: Inter, Helvetica, Arial, sans-serif; color: #222; margin: 0; background: #f4f5f7; }
main { max-width: 1500px; margin: 0 auto; padding: 24px 32px 48px; }
h1 { font-size: 24px; margin: 0 0 4px; }
p.meta { margin: 2px 0; color: #555; font-size: 14px; }
p.warn { margin: 6px 0; padding: 6px 10px; background: #fff4e5; border-left: 4px solid #e67e22; font-size: 14px; }
section { background: #fff; border-radius: 8px; padding: 8px 16px 12px; margin-top: 20px;
          box-shadow: 0 1px 2px rgba(0, 0, 0, .08); }
h2 { font-size: 18px; margin: 10px 0 4px; }
p.note { color: #555; font-size: 14px; margin: 6px 0 10px; }
"""


@dataclass(frozen=True)
class Section:
    """One block of a page: a heading, a note under it, and a figure (None for a note on its own)."""

    heading: str
    figure: go.Figure | None = None
    note: str = ""
    key: str = ""  # names the figure's div (and its PNG file)


def page(title: str, meta: Sequence[str], sections: Sequence[Section], warnings: Sequence[str] = ()) -> str:
    """The HTML text of a page: title, warnings, meta lines, then each section; plotly.js is inlined once."""
    parts = [
        f"<h1>{html.escape(title)}</h1>",
        *(f'<p class="warn">warning: {html.escape(line)}</p>' for line in warnings),
        *(f'<p class="meta">{html.escape(line)}</p>' for line in meta),
    ]
    inlined = False
    for section in sections:
        parts.append(f"<section><h2>{html.escape(section.heading)}</h2>")
        if section.note:
            parts.append(f'<p class="note">{html.escape(section.note)}</p>')
        if section.figure is not None:
            parts.append(
                section.figure.to_html(
                    full_html=False, include_plotlyjs=not inlined, config=PLOT_CONFIG, div_id=section.key or None
                )
            )
            inlined = True
        parts.append("</section>")
    body = "\n".join(parts)
    return (
        f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{html.escape(title)}</title>\n'
        f"<style>{_STYLE}</style>\n</head>\n<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    )
