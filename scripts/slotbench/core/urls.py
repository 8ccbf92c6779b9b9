"""A server's base URL, read once and strictly: the scheme, host and port it names.

The config is checked with it before anything is sent, and the executor's endpoint resources
are named from it, so a URL urllib would trip over later (a port of 99999 or `abc`, an
unclosed IPv6 bracket, no host at all) is refused up front in words, never by a traceback.
"""

from __future__ import annotations

import ipaddress
import re

SCHEMES = {"http": 80, "https": 443}
EXAMPLE = "e.g. http://127.0.0.1:8080"
_IPV6 = "e.g. http://[::1]:8080"
HOST_NAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9._-]*[A-Za-z0-9_])?\.?")


def endpoint(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of ``url``, the scheme's port when none is given.

    Raises ValueError with what is wrong, phrased to follow the URL in a sentence: a scheme
    other than http or https, no host, a host no name or address can be, a malformed IPv6
    literal, or a port that is not a number in 1-65535."""
    scheme, sep, rest = str(url).partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        raise ValueError("does not start with http:// or https://")
    netloc = re.split(r"[/?#]", rest, maxsplit=1)[0]
    hostport = netloc.rpartition("@")[2]  # past any user:password@
    if hostport.startswith("["):
        host, port_text = _bracketed(hostport)
    elif "[" in hostport or "]" in hostport:
        raise ValueError(f"has a malformed IPv6 address: write it in brackets, {_IPV6}")
    else:
        host, _, port_text = hostport.partition(":")
        if not host:
            raise ValueError(f"has no host; give the server's host and port, {EXAMPLE}")
        if not HOST_NAME.fullmatch(host):
            raise ValueError(f"has the host {host!r}, which no host name or address can be")
    return scheme.lower(), host.lower(), _port(port_text, SCHEMES[scheme.lower()])



def _bracketed(hostport: str) -> tuple[str, str]:
    """An IPv6 literal in brackets and the text after its ``:``, if any."""
    literal, closed, after = hostport[1:].partition("]")
    try:
        ipaddress.IPv6Address(literal)
    except ValueError:
        closed = ""
    if not closed or (after and not after.startswith(":")):
        raise ValueError(f"has a malformed IPv6 address: write it in brackets, {_IPV6}")
    return literal, after[1:]


def _port(text: str, default: int) -> int:
    if not text:
        return default
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"has port {text!r}, not a number; give a port in 1-65535, {EXAMPLE}")
    if not 1 <= int(text) <= 65535:
        raise ValueError(f"has port {int(text)}, outside 1-65535")
    return int(text)


def problem(key: str, url) -> str | None:
    """The line that refuses ``url`` as config key ``key``, or None when it is a good URL."""
    try:
        endpoint(url)
    except ValueError as exc:
        return f"config key `{key}`: {url!r} {exc}"
    return None
