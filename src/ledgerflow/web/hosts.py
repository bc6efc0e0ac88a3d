"""Which ``Host`` a request may name: the server's defence against DNS rebinding (internal).

A web page can make its own name resolve to 127.0.0.1 and then read a server on the
developer's machine as if it were its own origin: the browser sends ``Host: attacker.example``
and the page gets the answer. A server that answers only the names it is meant to be called by
refuses those requests before anything else is done (:class:`AllowedHosts`). The loopback
names (``localhost`` and its subdomains, 127.0.0.0/8, ``[::1]``) cannot be rebound by a page:
a browser resolves them to this machine itself, and no public name server may serve them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from ledgerflow.errors import CommandLineError

ANY_HOST = "*"


def host_name(header: str) -> str:
    """The host a ``Host`` header names, lowercased, without its port or IPv6 brackets
    (``""`` when it names none)."""
    value = header.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[1:end] if end > 0 else ""
    name, _, port = value.rpartition(":")
    return name if name and port.isdigit() else value


def is_loopback_name(name: str) -> bool:
    """Whether ``name`` (as :func:`host_name` gives it) can only mean this machine."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class AllowedHosts:
    """The hosts a server answers for: any (``names`` is None or holds ``*``), the loopback
    names (``loopback_only``), or exactly ``names`` (port ignored)."""

    def __init__(self, names: Iterable[str] | None = None, *, loopback_only: bool = False):
        self.names = frozenset(host_name(n) if n != ANY_HOST else n for n in names or ())
        self.loopback_only = loopback_only
        self.any = not loopback_only and (names is None or ANY_HOST in self.names)

    def allows(self, header: str | None) -> bool:
        if self.any:
            return True
        name = host_name(header or "")
        if self.loopback_only:
            return is_loopback_name(name)
        return name in self.names

    def describe(self) -> str:
        """The rule, for a refusal's text."""
        if self.loopback_only:
            return "loopback names only (localhost, 127.0.0.1, [::1])"
        return ", ".join(sorted(self.names)) or "no name"


def allowed_hosts(names: Iterable[str], *, listening_on: str, insecure: bool) -> AllowedHosts:
    """The names ``ledgerflow serve`` answers: ``--allowed-host`` as given; without it, the
    loopback names when it listens on a loopback address (nothing else can reach it but a
    rebound page), any otherwise. Without authentication, loopback names only, and
    ``--allowed-host`` may name nothing else."""
    names = tuple(names)
    if insecure:
        foreign = [n for n in names if not is_loopback_name(host_name(n))]
        if foreign:
            raise CommandLineError(
                f"--insecure-no-auth answers loopback host names only, not {', '.join(foreign)}"
            )
        return AllowedHosts(loopback_only=True)
    if names:
        return AllowedHosts(names)
    return AllowedHosts(loopback_only=True) if is_loopback_name(listening_on) else AllowedHosts()
