"""Root test configuration: hypothesis profiles and the project's markers.

Profiles: ``dev`` (default; quick, random) and ``ci`` (derandomized, no deadline,
built on hypothesis's own ``ci`` profile). ``CI=true`` selects ``ci``; so does
``--hypothesis-profile=ci``.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=60, deadline=None)
settings.register_profile(
    "ci",
    parent=settings.get_profile("ci"),
    max_examples=150,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))

MARKERS = {
    "gpu": "needs a CUDA device; skipped with a reason where there is none",
    "cpu": "benchmarks that run on the CPU",
    "slow": "takes more than a few seconds",
}


def pytest_configure(config):
    for name, description in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {description}")
