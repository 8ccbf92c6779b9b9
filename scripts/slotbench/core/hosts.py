"""Which machine a row describes: the client host, the server host, or one machine that is both.

slotbench runs on the *client host*: the machine whose samplers read thermal sensors, CPU load
and the CPU governor, and whose processes send the requests. The *server host* is the machine
the target server runs on. They are one machine when slotbench manages the server (it starts
it here) or when the target's URL names a loopback address (127.0.0.0/8, ::1, localhost): then
every host-side row describes "this machine (client and server)". Any other URL is treated as
another machine, even one that happens to route back here: what this machine's samplers read
then describes the client alone, and nothing on this machine can speak of the server host's
temperature or load.

A row about the server host can only come from what the server host reports itself (the
server, or an exporter beside it): a sample source whose name is in SERVER_REPORTED_SOURCES.
No such source exists yet, so a target on another machine has client-host rows only.
"""

from __future__ import annotations

import ipaddress

from slotbench.core import urls

CLIENT_HOST = "client host"
SERVER_HOST = "server host"
SHARED = "this machine (client and server)"
# the words a row's title ends with, in brackets, for each
TITLE_WORDS = {SHARED: "this machine: client and server", CLIENT_HOST: CLIENT_HOST,
               SERVER_HOST: SERVER_HOST}
LOOPBACK_NAMES = {"localhost", "ip6-localhost", "ip6-loopback"}
# Sample sources whose readings come from the server host itself (an exporter, or the server's
# own report of its machine). None is read yet: every sample this machine takes is the client's.
SERVER_REPORTED_SOURCES: frozenset[str] = frozenset()


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a URL's host: a name or an address) names this machine's loopback:
    127.0.0.0/8, ::1 (or an IPv4-mapped 127.x), localhost."""
    host = str(host).strip("[]").rstrip(".").lower()
    if host in LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


def shares_client_host(target: dict) -> bool:
    """Whether the target's server runs on the client host: it is managed (slotbench starts it
    here), or its URL names a loopback address. A URL that cannot be read is another machine's:
    nothing says it is here."""
    if target.get("managed"):
        return True
    try:
        _, host, _ = urls.endpoint(target.get("url", ""))
    except ValueError:
        return False
    return is_loopback(host)


def titled(title: str, machine: str) -> str:
    """A host-side row's title naming the machine it describes, e.g. "Thermal throttling
    (client host)", or within the title's own brackets: "Host contention (other processes,
    steal; client host)"."""
    if title.endswith(")"):
        return f"{title[:-1]}; {TITLE_WORDS[machine]})"
    return f"{title} ({TITLE_WORDS[machine]})"


def the(machine: str) -> str:
    """The machine in a sentence: "this machine (client and server)", "the client host"."""
    return machine if machine == SHARED else f"the {machine}"


def not_described(machine: str) -> str:
    """What a client-host row adds about the server host: nothing (a sentence, empty for one
    machine that is both)."""
    if machine != CLIENT_HOST:
        return ""
    return (" The server runs on another machine, which reported neither its temperature nor "
            "its load: nothing here describes it.")
