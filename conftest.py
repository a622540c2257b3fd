"""Root test configuration: hypothesis profiles.

Profiles: ``dev`` (default; quick, random) and ``ci`` (derandomized, no deadline,
built on hypothesis's own ``ci`` profile). ``CI=true`` selects ``ci``; so does
``--hypothesis-profile=ci``. ``mutmut`` is ``ci`` without shrinking a failure (mutation testing).
"""

import os

from hypothesis import HealthCheck, Phase, settings

settings.register_profile("dev", max_examples=60, deadline=None)
settings.register_profile(
    "ci",
    parent=settings.get_profile("ci"),
    max_examples=150,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
# Mutation testing (pyproject.toml, [tool.mutmut]) needs only pass or fail: ci's examples, no shrinking.
settings.register_profile(
    "mutmut", parent=settings.get_profile("ci"), phases=[Phase.explicit, Phase.reuse, Phase.generate]
)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# Markers (gpu, cpu, slow, distributed), options and benchmark fixtures come from the package's pytest plugin,
# accounting.bench.plugin, registered through the pytest11 entry point in pyproject.toml. A test that starts a
# process of its own is marked slow: mutation testing leaves those out (pyproject.toml, [tool.mutmut]).
