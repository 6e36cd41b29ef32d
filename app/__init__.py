"""Prefill & Decode Lab: the Streamlit UI (thin: the engine lives in `core`)."""
