"""Test-session hooks: print the privacy audit table at the end of a run (its rows come
in the reports of tests/privacy/test_audit_suite.py, from whichever worker ran them);
property tests draw their examples deterministically (a fixed seed, as every randomized
test); numbers pinned bit for bit come from one BLAS kernel on every x86-64 machine."""

from __future__ import annotations

import os
import platform
import sys

# OpenBLAS picks its kernels by CPU when it loads: an AVX-512 Intel core and an AMD core
# round a fit differently in the last bits (up to ~200 ulps after an MRMA fit). Pinned
# float.hex values (tests/engine/test_mrma_pinned.py) would then depend on the machine,
# not the code. Fix the kernel to Haswell's (AVX2, on every x86-64 machine of CI's
# kind) before numpy is loaded; the processes the tests start inherit it.
if platform.machine().lower() in ("x86_64", "amd64"):
    if "numpy" in sys.modules and "OPENBLAS_CORETYPE" not in os.environ:
        raise RuntimeError(
            "numpy was loaded before tests/conftest.py could fix the BLAS kernel: "
            "set OPENBLAS_CORETYPE=Haswell in the environment"
        )
    os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell")
# The suite runs one worker per core (addopts: -n 2): a BLAS or OpenMP pool of its own
# in each worker, and in each process a test starts, only oversubscribes the cores, and
# OpenBLAS's idle threads spin. With one thread each, the quick tests take 136
# core-seconds instead of 172, for the same numbers.
for _pool in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_pool, "1")

from hypothesis import settings  # noqa: E402

settings.register_profile("ldpfda", derandomize=True, print_blob=True)
settings.load_profile("ldpfda")

AUDIT_ROWS: list[tuple[str, float, float, float, float, bool]] = []


def pytest_collection_modifyitems(config, items):  # noqa: ARG001
    """Files marked slow (they mostly wait on Flower processes) go first, so the rest
    of the suite runs beside them instead of after. The workers take two files each to
    start with, in this order (addopts keep xdist from reordering): the first two
    slow files go one to each worker, then a quick file, so that the third slow file
    does not queue behind the first (the loopback deployments, the longest)."""
    files = list(dict.fromkeys(item.path for item in items))
    marked = {item.path for item in items if item.get_closest_marker("slow")}
    slow = [f for f in files if f in marked]
    quick = [f for f in files if f not in marked]
    order = {f: n for n, f in enumerate(slow[:2] + quick[:1] + slow[2:] + quick[1:])}
    items.sort(key=lambda item: order[item.path])


def pytest_runtest_logreport(report):
    if report.when == "call":
        AUDIT_ROWS.extend(
            tuple(value) for key, value in report.user_properties if key == "audit_row"
        )


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ARG001
    if not AUDIT_ROWS:
        return
    write = terminalreporter.write_line
    write("")
    write(
        "privacy audit (10^6 releases per input unless the row says): "
        "estimated vs claimed epsilon"
    )
    write(
        f"{'mechanism':52s} {'claimed':>8s} {'estimate':>9s} "
        f"{'simultaneous bounds':>19s}  verdict"
    )
    for name, claimed, estimate, lower, upper, violated in AUDIT_ROWS:
        bounds = f"[{lower:.3f}, {upper:.3f}]"
        verdict = "VIOLATES" if violated else "ok"
        write(f"{name:52s} {claimed:8.3f} {estimate:9.4f} {bounds:>19s}  {verdict}")
