"""The service's settings (no heavy imports: the CLI's parser reads the defaults)."""

from __future__ import annotations

import os
from dataclasses import dataclass

API_KEY_ENV = "STRUCTQA_API_KEY"


@dataclass(frozen=True)
class ServeSettings:
    max_batch_windows: int = 16
    max_wait_ms: float = 2.0
    queue_size: int = 64  # requests admitted at once (featurizing, waiting or scored)
    max_context_chars: int = 100_000
    max_questions: int = 32  # items of one request
    max_body_bytes: int = 4 * 1024 * 1024
    request_timeout: float = 30.0  # seconds from admission to the answer
    body_timeout: float = 10.0  # seconds for a request's whole body to arrive
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    # Host header names accepted (empty: any); `structqa serve` on a loopback address sets
    # the loopback names, so that no other site's page reaches it under a name of its own
    allowed_hosts: tuple[str, ...] = ()
    featurize_threads: int = 2
    # each request whole (tokenize, all its windows, decode) before the next: no overlap, no
    # batching across requests (a plain server with one lock; a baseline for benchmarks)
    one_at_a_time: bool = False
    model_name: str = "model"


def api_key_from_env(given: str | None) -> str | None:
    """``--api-key``, else $STRUCTQA_API_KEY, else None (no key needed); an empty key is an
    error (it would let every request in)."""
    key = given if given is not None else os.environ.get(API_KEY_ENV)
    if key is not None and not key.strip():
        raise ValueError(
            f"the API key (--api-key or ${API_KEY_ENV}) is empty; set a key or unset it"
        )
    if key is not None and not key.isascii():  # HTTP headers carry bytes, not UTF-8 text
        raise ValueError(
            f"the API key (--api-key or ${API_KEY_ENV}) has a character that is not ASCII, "
            "which no client can send in a header as typed; choose an ASCII key"
        )
    return key


#: the names a server bound to a loopback address answers to (with --allowed-host's)
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a bind address) is a loopback address."""
    import ipaddress

    host = host.strip().lower().rstrip(".").strip("[]")
    if host in ("localhost", "ip6-localhost", "ip6-loopback"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return address.is_loopback or (mapped is not None and mapped.is_loopback)
