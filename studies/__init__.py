"""Studies: scripts that measure the product (error rates of the gate, the report's search), not part of it.

Run from the repository root, e.g. ``python -m studies.gate_error_rates --help``.
"""
