"""Operator commands above the library (``ldpfda deploy``): certificates, example node
files, SuperNode key registration and start with back-off, runs that fail loudly, and
loopback deployments and local SuperLinks for tests and benchmarks. Nothing in the
library imports this package; it needs the project's server side (``[server]``)."""
