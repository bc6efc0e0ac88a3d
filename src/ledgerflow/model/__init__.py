"""The pure domain model of Ledgerflow (internal; import from :mod:`ledgerflow` instead).

Identities, states, the allowed-transition tables, effect classifications and retry policies.
Nothing in this package performs I/O, reads a clock or knows about SQL: the runtime decides with
these types and the storage layer persists what was decided.
"""
