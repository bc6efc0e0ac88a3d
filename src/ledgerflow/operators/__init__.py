"""Operators' tools (internal): authority, audited repairs, the attention queue, reconciliation.

Everything here changes the ledger only through the store's audited or fenced write paths; a
person never edits rows.
"""
