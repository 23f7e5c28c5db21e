"""The schema room, below both sides: typed queries, release descriptions, payloads.

Nothing here imports Flower, scikit-learn or the server: the client and the server,
and both transports (in process and the Flower grid), speak these types.
"""
