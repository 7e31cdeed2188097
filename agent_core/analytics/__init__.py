"""Deterministic analytics core: anomaly detection on metrics over time and multi-dimensional
root-cause attribution of a metric's deviation. Pure functions on pandas DataFrames with
pydantic results, so agent tools can wrap them and return JSON. Import from the modules
(`anomaly`, `attribution`); `inputs` holds the light types tool inputs need."""
