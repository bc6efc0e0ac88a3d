"""The runtime: engine, workers, replay, the effect protocol, fault points (internal).

Import the public API from :mod:`ledgerflow`; the modules here may change without notice.
"""
