"""The server side: protocol plans, learners on released data, aggregation, reports.

Nothing here imports the client side: the server reaches clients only through a
transport (:mod:`ldpfda.server.session`).
"""
