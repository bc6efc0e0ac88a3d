"""The HTTP front door: signal, callback and approval delivery, and instance reads (internal)."""
