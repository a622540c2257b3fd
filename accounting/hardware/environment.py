"""The environment variables a user sets to override what the package would measure or look up.

Named in one module that imports nothing, so that the pytest plugin can name them in its options' help
without importing torch (:mod:`accounting.bench.options`), and the modules that read them import them from here.

>>> PEAK_TFLOPS_ENV, CPU_GHZ_ENV
('ACCOUNTING_PEAK_TFLOPS', 'ACCOUNTING_CPU_GHZ')
"""

PEAK_TFLOPS_ENV = "ACCOUNTING_PEAK_TFLOPS"
"""A dense peak in TFLOP/s to use instead of the peak table or the CPU estimate
(:func:`accounting.hardware.peaks.peak_override_tflops`)."""
CPU_GHZ_ENV = "ACCOUNTING_CPU_GHZ"
"""The CPU clock in GHz to compute the CPU peak with (:func:`accounting.hardware.cpu_clock.cpu_clock_ghz`)."""
