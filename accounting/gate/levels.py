"""The gate's statistical levels and resampling settings, each stated once.

:mod:`accounting.gate.stats` (the two-sample tests), :mod:`accounting.gate.multiple` (the matrix's
adjustment) and :mod:`accounting.gate.power` (what a verdict could have seen) all read them.

>>> ALPHA, CONFIDENCE
(0.01, 0.9)
"""

ALPHA = 0.01
"""Family-wise significance level of "slower" (and "faster") across the whole matrix (Holm).

Pinpoint calls p ≤ 0.01 *different*; asv uses 0.002 two-sided on raw samples. The gate's samples
are runs, few and costly, so 0.01 one-sided: with 10 baseline runs, 3 current runs reach
p = 1/286 and 4 reach 1/1001, enough for a matrix of 3 (Holm's smallest level 0.01/3)."""
CONFIDENCE = 0.90
"""Two-sided level of the ratio's interval: its upper end is a one-sided 95 % bound, the
one a benchmark must stay under to be called *no change*."""
EXACT_LIMIT = 200_000
"""Enumerate every split up to this many (``binom(K + c, c)``); above it, draw random ones."""
RANDOM_RESAMPLES = 9_999
SEED = 0
"""The random splits are drawn from a seeded generator, so CI reruns of the same data agree."""
