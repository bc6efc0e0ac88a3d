"""The ledgers as data (internal): the records every store keeps and returns, the writes a
commit carries, the transitions that decide them and the inbox's machine. Pure: no I/O, no
database; the storage layer below the runtime maps these to rows, and everything above reads
and writes the ledgers in these terms only.
"""
