"""pytest-benchmark's own test suite with this package's plugin and without it: ``python -m studies.pytest_benchmark_suite``.

The plugin loads in every pytest run once the package is installed, pytest-benchmark's included, and hooks into
pytest-benchmark (machine info, the compare guard, the missing-baseline note). This check runs pytest-benchmark's
tests, at the version installed here, twice: with the plugin active (its entry point) and with
``-p no:accounting``, and compares the counts. The results are in docs/development.md ("pytest-benchmark's own
suite"). It takes minutes, starts pytest many times, and needs the network once: it is not part of CI.

Steps (everything under ``--work``, outside the repository):

1. ``pip download pytest-benchmark==<installed> --no-binary :all: --no-deps``: the sdist, which carries the tests;
2. ``pip install --target`` what the tests' own requirements (:data:`TEST_REQUIREMENTS`) add to this environment,
   seen only by these runs through ``PYTHONPATH``: the project's environment is left as it is;
3. ``python -m pytest tests`` in the unpacked sdist with its own ``pytest.ini`` (``-o addopts`` repeats its
   options less ``--nbmake``: the notebook plugin is not installed, so the one notebook test is not run), as its
   tox.ini does (``PYTHONPATH=tests``, ``COLUMNS=80``), once with each setting.

Exit status: 0 when the run with the plugin has no failure or error and the same counts as the run without it,
1 when not, 2 when it could not run (no network, the plugin not installed).

>>> summary_counts("== 2 failed, 243 passed, 15 skipped, 1 error in 809.91s (0:13:29) ==")
{'failed': 2, 'passed': 243, 'skipped': 15, 'errors': 1}
"""

import argparse
import configparser
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

DISTRIBUTION = "pytest-benchmark"
# source: pytest-benchmark 5.3.1, pyproject.toml ([dependency-groups] dev; the aspect, elasticsearch and histogram
# extras) and tox.ini ([testenv] deps).
TEST_REQUIREMENTS = ("freezegun>=1.5.5", "aspectlib", "elasticsearch", "pygal==3.1.3", "pygaljs==1.0.2",
                     "pytest-xdist==3.8.0")
"""What pytest-benchmark's tests import beyond pytest-benchmark itself (nbmake left out: see the docstring)."""
LEFT_OUT_OPTIONS = ("--nbmake",)
DEFAULT_WORK = Path.home() / ".cache" / "accounting" / "pytest-benchmark-suite"
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?|warnings?|deselected)\b")


def summary_counts(line: str) -> dict[str, int]:
    """The counts in pytest's last line, by outcome (``error`` and ``errors`` both read as ``errors``)."""
    counts = {}
    for number, outcome in _COUNT.findall(line):
        outcome = {"error": "errors", "warning": "warnings"}.get(outcome, outcome)
        counts[outcome] = counts.get(outcome, 0) + int(number)
    return counts


def fetch_sdist(version: str, work: Path) -> Path:
    """The unpacked sdist of pytest-benchmark ``version`` under ``work`` (downloaded once)."""
    unpacked = work / f"pytest_benchmark-{version}"
    if (unpacked / "tests").is_dir():
        return unpacked
    subprocess.run([sys.executable, "-m", "pip", "download", f"{DISTRIBUTION}=={version}", "--no-binary", ":all:",
                    "--no-deps", "--quiet", "-d", str(work)], check=True)
    (archive,) = work.glob(f"pytest[_-]benchmark-{version}.tar.gz")
    with tarfile.open(archive) as sdist:
        if hasattr(tarfile, "data_filter"):
            sdist.extractall(work, filter="data")
        else:  # Python without extraction filters (before 3.11.4): the archive comes from the index pip trusts
            sdist.extractall(work)
    return unpacked


def install_requirements(version: str, work: Path) -> Path:
    """A folder holding what :data:`TEST_REQUIREMENTS` need beyond this environment (installed once), for ``PYTHONPATH``.

    pip resolves them against this environment first (``--dry-run --report``), then installs only the missing
    distributions there, without their dependencies: nothing already installed (pytest, pluggy) is shadowed.
    """
    target = work / f"requirements-{version}"
    done = target / ".installed"
    if not done.exists():
        report = work / "requirements-report.json"
        subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report", str(report),
                        *TEST_REQUIREMENTS], check=True)
        missing = [f"{item['metadata']['name']}=={item['metadata']['version']}"
                   for item in json.loads(report.read_text())["install"]]
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                        *missing], check=True)
        done.write_text("\n".join(missing) + "\n")
    return target


def suite_addopts(sdist: Path) -> str:
    """The sdist's own ``addopts`` (pytest.ini) without :data:`LEFT_OUT_OPTIONS`."""
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(sdist / "pytest.ini")
    return " ".join(option for option in ini["pytest"]["addopts"].split() if option not in LEFT_OUT_OPTIONS)


def run_suite(sdist: Path, requirements: Path, *extra: str) -> tuple[dict[str, int], float, str]:
    """``(counts, seconds, last line)`` of pytest-benchmark's tests in one pytest process."""
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": os.pathsep.join([str(requirements), str(sdist / "tests")])}
    env.pop("PYTEST_ADDOPTS", None)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-o", f"addopts={suite_addopts(sdist)}", *extra, "tests"],
                          cwd=sdist, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    lines = done.stdout.strip().splitlines() or [done.stderr.strip()]
    return summary_counts(lines[-1]), seconds, lines[-1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.pytest_benchmark_suite", description=__doc__.split("\n")[0])
    parser.add_argument("--work", type=Path, default=DEFAULT_WORK,
                        help="where the sdist and the tests' requirements go. Default: %(default)s")
    args = parser.parse_args(argv)
    plugins = {entry.name for entry in importlib.metadata.entry_points(group="pytest11")}
    if "accounting" not in plugins:
        print("the accounting plugin is not installed here (pip install -e .): nothing to compare", file=sys.stderr)
        return 2
    version = importlib.metadata.version(DISTRIBUTION)
    args.work.mkdir(parents=True, exist_ok=True)
    try:
        sdist = fetch_sdist(version, args.work)
        requirements = install_requirements(version, args.work)
    except (subprocess.CalledProcessError, ValueError) as error:
        print(f"could not fetch pytest-benchmark {version}'s sources or test requirements: {error}", file=sys.stderr)
        return 2
    print(f"pytest-benchmark {version}'s tests ({sdist}), pytest {importlib.metadata.version('pytest')}, "
          f"Python {sys.version.split()[0]}")
    results = {}
    for label, extra in (("with the accounting plugin", ()), ("-p no:accounting", ("-p", "no:accounting"))):
        counts, seconds, last = run_suite(sdist, requirements, *extra)
        results[label] = counts
        print(f"{label:28s} {last}   [{seconds:.0f} s]", flush=True)
    with_plugin, without = results.values()
    broken = with_plugin.get("failed", 0) + with_plugin.get("errors", 0)
    if broken or with_plugin != without or not with_plugin.get("passed"):
        print("the runs differ, or the run with the plugin failed: see above")
        return 1
    print("the same counts with and without the plugin, and no failure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
