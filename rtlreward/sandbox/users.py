"""Who a container runs as. Its own module because both the docker executor (which starts containers as this
user) and the reaper (which must recognise the workspaces handed to this user) need it."""

from __future__ import annotations

import os

__all__ = ["DEFAULT_SANDBOX_ID", "sandbox_user"]

DEFAULT_SANDBOX_ID = 65534  # `nobody`: the user a root caller's containers run as


def sandbox_user() -> tuple[int, int]:
    """(uid, gid) the containers run as: the caller's when it is not root, so the files a command writes stay
    the caller's; for a root caller $RTLREWARD_SANDBOX_UID / $RTLREWARD_SANDBOX_GID (default 65534, `nobody`),
    and the writable mounts are handed to that user before each run. Never 0."""
    if os.getuid() != 0:
        return os.getuid(), os.getgid()
    ids = []
    for var in ("RTLREWARD_SANDBOX_UID", "RTLREWARD_SANDBOX_GID"):
        raw = os.environ.get(var) or (ids[0] if ids else DEFAULT_SANDBOX_ID)
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"{var}={raw!r} is not a number: set it to an unprivileged uid/gid") from None
        if value <= 0:
            raise ValueError(f"{var}={value}: containers never run as root; set an unprivileged id (> 0)")
        ids.append(value)
    return ids[0], ids[1]
