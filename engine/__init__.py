"""The engine room, above the client and the server: in-process runs and sessions.

:func:`run_protocol` and :func:`run_repeat` run a protocol plan with every client in
this process; the estimators, multi-server sessions and the fault study build on them.
"""

from ldpfda.engine.runner import run_protocol, run_repeat

__all__ = ["run_protocol", "run_repeat"]
