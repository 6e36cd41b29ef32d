"""Colours and shared chart styling: the Okabe-Ito palette, safe for the common colour-vision deficiencies.

Every chart takes its colours from here so "measured" and "predicted" look the same everywhere.
Backgrounds stay transparent and text colour is left to the theme, so light and dark both read.
"""

from __future__ import annotations

from typing import Any

# Okabe & Ito (2008), "Color Universal Design".
ORANGE = "#E69F00"
SKY = "#56B4E9"
GREEN = "#009E73"
YELLOW = "#F0E442"
BLUE = "#0072B2"
VERMILLION = "#D55E00"
PURPLE = "#CC79A7"
GREY = "#999999"

MEASURED = BLUE
PREDICTED = ORANGE
PREFILL = VERMILLION
DECODE = BLUE
KEPT = GREEN  # a follow-up's cache positions kept from the last turn
WEIGHTS = SKY
KV_READ = VERMILLION
KV_WRITE = GREEN
# cividis: perceptually uniform and readable with red-green colour blindness.
HEATMAP_SCALE = "Cividis"

FONT = "Source Sans Pro, Source Sans 3, system-ui, sans-serif"

# Every page (app/navigation.py adds it before the router runs). Streamlit fades its captions with
# opacity 0.6, 3.9:1 on white, under WCAG AA's 4.5:1 for body text; at 0.8 a caption reads at about
# 7:1 in the light theme and 12:1 in the dark one, still a step quieter than the text around it.
PAGE_CSS = """<style>
  [data-testid="stCaptionContainer"] { opacity: 0.8 !important; }
</style>"""


def base_layout(title: str, height: int = 360, **extra: Any) -> dict[str, Any]:
    """Layout shared by every figure: transparent, compact, legend on top, readable type."""
    layout: dict[str, Any] = {
        "title": {"text": title, "font": {"size": 16}, "x": 0, "xanchor": "left"},
        "height": height,
        "margin": {"l": 60, "r": 20, "t": 50, "b": 130},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "font": {"family": FONT, "size": 13},
        # below the plot: a legend on top collided with the long titles
        "legend": {"orientation": "h", "yanchor": "top", "y": -0.3, "xanchor": "left", "x": 0},
        "hoverlabel": {"font": {"size": 13}},
    }
    layout.update(extra)
    return layout


def decade_ticks(lo: float, hi: float) -> dict[str, Any]:
    """Log-axis labels at the powers of ten from below `lo` to above `hi` only, written out (0.1, 1,
    1,000): Plotly's own add "2" and "5" between them and write 1e9 as "1B", read as bytes."""
    import math

    vals = [10.0 ** k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]
    return {"tickvals": vals, "ticktext": [f"{v:,.10g}" for v in vals]}


def fit_legend(fig: Any, px_per_char: float = 7.2, symbol_px: int = 50) -> Any:
    """Give a horizontal legend a fixed entry width from its longest name.

    Plotly 4's horizontal legend, when it wraps onto a second row, clips the last entry of the first
    row (its measured row width comes out short); a fixed entry width sidesteps that measurement.
    Works on a go.Figure or a figure dict; returns it.
    """
    data = fig["data"] if isinstance(fig, dict) else fig.data
    names = [t.get("name") if isinstance(t, dict) else t.name for t in data
             if (t.get("showlegend") if isinstance(t, dict) else t.showlegend) is not False]
    names = [n for n in names if n]
    if not names:
        return fig
    width = int(max(len(n) for n in names) * px_per_char + symbol_px)
    legend = {"entrywidth": width, "entrywidthmode": "pixels"}
    if isinstance(fig, dict):
        fig.setdefault("layout", {}).setdefault("legend", {}).update(legend)
    else:
        fig.update_layout(legend=legend)
    return fig
