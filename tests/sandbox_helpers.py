"""Shared helpers for the sandbox tests: finding processes a hostile command tried to leave behind, and the
docker executor on the sim image (or a clean skip)."""

from __future__ import annotations

import os
import random
import time


def token() -> str:
    """A unique `sleep` duration, so the test can find exactly its own processes in /proc."""
    return f"987.{random.randrange(10**8, 10**9)}"


def procs_with(arg: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                parts = fh.read().split(b"\0")
            with open(f"/proc/{entry.name}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if arg.encode() in parts and state != "Z":
            found.append(int(entry.name))
    return found


def wait_gone(arg: str, within: float = 3.0) -> list[int]:
    """Processes still alive after `within` seconds (killing is asynchronous; zombies do not count)."""
    end = time.monotonic() + within
    while True:
        left = procs_with(arg)
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.05)


class Interrupted(Exception):
    """What `interrupted_after` raises in the main thread (a caller's Ctrl-C, without pytest's own KeyboardInterrupt)."""


def interrupted_after(seconds: float, fn):
    """Run `fn()` in the main thread with SIGUSR1 raising `Interrupted` there after `seconds` (once): (seconds `fn`
    took until it raised or returned, whether it was interrupted)."""
    import signal
    import threading

    fired = []

    def handler(_sig, _frame):
        if not fired:
            fired.append(True)
            raise Interrupted

    old = signal.signal(signal.SIGUSR1, handler)
    timer = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGUSR1))
    start = time.monotonic()
    timer.start()
    try:
        fn()
        hit = False
    except Interrupted:
        hit = True
    finally:
        took = time.monotonic() - start
        timer.cancel()
        timer.join()
        signal.signal(signal.SIGUSR1, old)
    return took, hit


def interrupt_a_running_command(ex, ws) -> tuple[float, bool, list[int]]:
    """`ex.run` of a long `sleep` in `ws`, interrupted 0.5 s in: (seconds until `run` returned or raised, whether the
    interrupt reached the caller, the sleep's processes still alive a moment later)."""
    from rtlreward.sandbox import Limits

    t = token()
    took, hit = interrupted_after(
        0.5,
        lambda: ex.run(["sh", "-c", f"echo first; exec sleep {t}"], workspace=ws, limits=Limits(timeout=20)),
    )
    return took, hit, wait_gone(t)


def sim_docker_executor():
    """A DockerExecutor on the rtlreward sim image; the test is skipped without a Docker engine, the image or the
    docker extra. The caller closes it."""
    import pytest

    try:
        import docker

        docker.from_env().ping()
    except Exception as exc:
        pytest.skip(f"no Docker engine: {exc}")
    from cvdp_adapter.runner_docker import image_available

    image = image_available()
    if image is None:
        pytest.skip("no rtlreward sim image: run `rtlreward sandbox build-image`")
    try:
        from rtlreward.sandbox.docker import DockerExecutor
    except ImportError:
        pytest.skip("the docker executor is not installed")
    return DockerExecutor(image=image)
