"""Test-session hooks: print the privacy audit table at the end of a run; property
tests draw their examples deterministically (a fixed seed, as every randomized test)."""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("ldpfda", derandomize=True, print_blob=True)
settings.load_profile("ldpfda")


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ARG001
    try:
        from tests.privacy.test_audit_suite import AUDIT_TABLE
    except ImportError:  # pragma: no cover - the suite was not collected
        return
    if not AUDIT_TABLE:
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
    for name, claimed, audit, violated in AUDIT_TABLE:
        bounds = f"[{audit.lower_bound:.3f}, {audit.upper_bound:.3f}]"
        verdict = "VIOLATES" if violated else "ok"
        write(
            f"{name:52s} {claimed:8.3f} {audit.estimate:9.4f} {bounds:>19s}  {verdict}"
        )
