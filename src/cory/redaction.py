"""Secrets never reach a file: a URL is written without the password of its ``user:password@``
part. Run folders, checkpoints, tracker state and every message hold the redacted form; a
process that needs the password (a resumed run, ``cory eval`` of a run folder) gets the URL
again from its own config or command line."""

from __future__ import annotations

import urllib.parse
from typing import Any

HIDDEN = "***"


def redact(url: str) -> str:
    """``url`` without the password of a ``user:password@`` part (``user:***@``)."""
    try:
        parts = urllib.parse.urlsplit(url)
        password = parts.password
    except ValueError:  # not a URL (an unparsable port, say): nothing to hide in it
        return url
    if password is None or password == HIDDEN:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:{HIDDEN}@{host}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def lacks_password(url: str) -> bool:
    """Whether ``url`` is a redacted URL: its password was left out when it was written."""
    try:
        return urllib.parse.urlsplit(url).password == HIDDEN
    except ValueError:
        return False


def redacted(tree: Any) -> Any:
    """A config tree (dicts, lists, values) with every URL redacted."""
    if isinstance(tree, dict):
        return {key: redacted(value) for key, value in tree.items()}
    if isinstance(tree, list):
        return [redacted(value) for value in tree]
    if isinstance(tree, str) and "@" in tree and "://" in tree:
        return redact(tree)
    return tree
