"""The ``ledgerflow`` command line (internal): one module per command group."""
