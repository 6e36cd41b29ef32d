"""Prefill & Decode Lab engine: model loading, instrumented generation, cost model, calibration.

The UI imports this package; it never imports streamlit.
"""

__version__ = "0.1.0"
