"""`rtlreward serve`: a reward server for trainers in other processes or languages (Starlette on uvicorn, the
`server` extra). See docs/trainers/http-server.md.

Modules: `server` (the logic without HTTP: items, the bounded pool, batches), `app` (the HTTP endpoints, token,
metrics, request log), `run` (uvicorn, the listen backlog, the request-head deadline, the bind rules),
`jsonlimits` (body size and nesting depth before parsing), `client` (`AsyncRewardClient`, httpx).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

from rtlreward import hookimpl

__version__ = "0.2.0"


class ServerTrainer:
    name = "server"
    description = "HTTP reward server (rtlreward serve): POST /score, /score_batch, /get_reward (OpenRLHF)"


@hookimpl
def rtlreward_register_trainers(register):
    register("server", ServerTrainer())


@hookimpl
def rtlreward_register_commands(app):
    import typer

    from .app import DEFAULT_CLIENT_TIMEOUT
    from .run import DEFAULT_MAX_CONNECTIONS
    from .server import DEFAULT_CLIENT_QUEUE, DEFAULT_MAX_QUEUE, DEFAULT_REQUEST_TIMEOUT

    @app.command("serve")
    def serve(
        datasets: list[str] = typer.Argument(
            None,
            help="Dataset names or paths to load tasks from; requests then name tasks by id.",
            metavar="DATASET",
            show_default=False,
        ),
        dataset: list[str] = typer.Option(
            [], "--dataset", "-d", help="A dataset name or path (repeatable); the same as DATASET."
        ),
        host: str = typer.Option(
            "127.0.0.1", help="Address to listen on. Anything but loopback needs --token."
        ),
        port: int = typer.Option(8808, help="Port to listen on (0: a free one, printed at start)."),
        profile: str = typer.Option(
            "shaped", "--profile", "-p", help="Reward profile: preset name or TOML file."
        ),
        executor: str = typer.Option("local", "--executor", "-x", help="Executor: local, docker, ray."),
        inline_tasks: bool = typer.Option(
            False,
            "--allow-inline-tasks/--no-inline-tasks",
            "--inline-tasks",
            help="Accept whole task objects in requests. Off by default: an inline task carries harness code "
            "the server runs, so any client could run code of its choosing in the sandbox.",
        ),
        token: str | None = typer.Option(
            None,
            "--token",
            envvar="RTLREWARD_SERVER_TOKEN",
            show_envvar=True,
            help="Bearer token every request but GET /health must carry (prefer the environment variable: "
            "a command line is visible to other users). Required when listening beyond loopback.",
        ),
        jobs: int | None = typer.Option(
            None, "--jobs", "-j", min=1, help="Evaluations at once (default: the number of CPUs)."
        ),
        max_queue: int = typer.Option(
            DEFAULT_MAX_QUEUE,
            min=0,
            help="Items that may wait for a worker; beyond it requests get 429 with Retry-After.",
        ),
        client_queue: int = typer.Option(
            DEFAULT_CLIENT_QUEUE,
            min=0,
            help="Items one client address may have waiting; beyond it its requests get 429. Clients are "
            "served in turns, so one client's backlog never holds back another's next item.",
        ),
        max_connections: int = typer.Option(
            DEFAULT_MAX_CONNECTIONS,
            min=0,
            help="Connections one client address may hold open (0: no cap); beyond it a connection gets 503.",
        ),
        reply_after: str | None = typer.Option(
            None,
            help="For /get_reward queries sent without 'prompts': the chat template (chatml, llama3, deepseek, "
            "gemma, phi3, gpt-oss) or the text that opens the assistant's turn; the reply is what follows it. "
            "Without it, such queries are refused rather than guessed at.",
        ),
        request_timeout: float = typer.Option(
            DEFAULT_REQUEST_TIMEOUT,
            help="Seconds a request may take, queue wait included (0: no limit); items not scored by then "
            "get an error (504).",
        ),
        client_timeout: float = typer.Option(
            DEFAULT_CLIENT_TIMEOUT,
            min=0.1,
            help="Seconds a client has to send its request head, and its body.",
        ),
        cache: bool = typer.Option(True, "--cache/--no-cache", help="Use the stage-result cache."),
        log_requests: bool = typer.Option(
            True, "--log-requests/--no-log-requests", help="One line per request on stderr."
        ),
    ) -> None:
        """Serve rewards over HTTP: POST /score {"task_id", "completion"} returns the reward as JSON."""
        import logging

        try:
            from .run import BindError, bind, check_bind, make_server
        except ImportError as exc:
            typer.echo(f"error: {exc}; install the server extra: pip install 'rtlreward[server]'", err=True)
            raise typer.Exit(2) from None
        from rtlreward.engine import Engine
        from rtlreward.integration import load_tasks

        from .server import RewardService

        token = token or None  # RTLREWARD_SERVER_TOKEN="" is no token
        try:
            check_bind(host, token)
        except BindError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        tasks = []
        for d in [*(datasets or []), *dataset]:
            try:
                tasks += load_tasks(d)
            except (ValueError, OSError) as exc:
                typer.echo(f"error: {exc}", err=True)
                raise typer.Exit(2) from None
        engine = Engine(profile=profile, executor=executor, jobs=jobs, cache=cache)
        service = RewardService(
            engine,
            tasks,
            allow_inline_tasks=inline_tasks,
            jobs=jobs,
            max_queue=max_queue,
            client_queue=client_queue,
            request_timeout=request_timeout,
        )
        access = logging.getLogger("rtlreward.server.access")
        if log_requests:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
            access.addHandler(handler)
            access.setLevel(logging.INFO)
        access.propagate = False
        server = make_server(
            service,
            token=token,
            client_timeout=client_timeout,
            max_connections=max_connections,
            reply_after=reply_after,
        )
        try:
            sock = bind(host, port, server.config.backlog)
        except OSError as exc:
            typer.echo(f"error: cannot listen on {host}:{port}: {exc}; choose another --port", err=True)
            engine.close()
            raise typer.Exit(2) from None
        bound_host, bound_port = sock.getsockname()[:2]
        url = (
            f"http://[{bound_host}]:{bound_port}"
            if ":" in bound_host
            else f"http://{bound_host}:{bound_port}"
        )
        typer.echo(
            f"rtlreward serving {len(tasks)} tasks with profile {profile!r} on {url} "
            f"({service.jobs} workers, queue {service.max_queue}, "
            f"{'token required' if token else 'no token'}, inline tasks {'on' if inline_tasks else 'off'})"
        )
        stop = _Stop(server, service, engine)
        try:
            if not stop.signals:  # a signal before the server started: do not start it
                server.run(sockets=[sock])
        except KeyboardInterrupt:
            pass
        finally:
            stop.finish(sock)


# Seconds a stop may take once the server stopped answering: the engine's running candidates (their commands
# killed at the signal) get STOP_WAIT to end and remove their workspaces; past STOP_LIMIT the process exits
# whatever a thread is still doing (a stage stuck in Python code would otherwise hold the exit).
STOP_WAIT = 10.0
STOP_LIMIT = 30.0


class _Stop:
    """How `rtlreward serve` stops on SIGTERM or SIGINT (Ctrl-C): uvicorn stops accepting and answers what it
    can (graceful, `timeout_graceful_shutdown`); at the signal, off the event loop, the service stops taking
    work (queued items are cancelled: 503) and the engine cancels the running candidates (their commands are
    killed, so their requests are answered at once); then the engine is closed: its containers (warm ones
    included) are killed and removed, and every workspace is gone. A signal during the stop is noted and
    ignored; the stop is bounded (STOP_LIMIT). The exit status is 0. After a `kill -9` nothing of this runs:
    the next server (any Engine) on the host removes what the dead one left (`rtlreward.sandbox.reaper`)."""

    def __init__(self, server, service, engine) -> None:
        self.server, self.service, self.engine = server, service, engine
        self.signals: list[int] = []
        self._once = threading.Lock()
        self._stopped = False
        self._handlers: dict[int, object] = {}
        # uvicorn installs its own handlers while it runs (and raises the signal again once it has stopped,
        # which would end the process by SIGTERM's default action, skipping every `finally`): ours note the
        # signal outside uvicorn's run, and its handler is wrapped so that the work stops at the signal.
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._handlers[sig] = signal.signal(sig, self._note)
        handle_exit = server.handle_exit

        def on_signal(sig, frame) -> None:
            handle_exit(sig, frame)
            self._note(sig, frame)

        server.handle_exit = on_signal

    def _note(self, sig, frame) -> None:
        if sig not in self.signals:
            self.signals.append(sig)
        self.server.should_exit = True
        threading.Thread(target=self.stop_work, name="rtlreward-stop", daemon=True).start()

    def stop_work(self) -> None:
        """Once: no new item starts, queued ones are cancelled, running candidates are cancelled."""
        with self._once:
            if self._stopped:
                return
            self._stopped = True
        self.service.close()
        self.engine.cancel()

    def finish(self, sock) -> None:
        """After the server's run: stop the work, close the engine (bounded), restore the signal handlers."""

        def hard_exit() -> None:  # a daemon thread: it only fires when the process did not end by itself
            time.sleep(STOP_LIMIT)
            with contextlib.suppress(Exception):
                sys.stderr.write(f"rtlreward: the server did not stop within {STOP_LIMIT:g} s; exiting\n")
                sys.stderr.flush()
                sys.stdout.flush()
            os._exit(0)

        threading.Thread(target=hard_exit, name="rtlreward-stop-limit", daemon=True).start()
        self.stop_work()
        sock.close()
        self.engine.close(timeout=STOP_WAIT)
        for sig, handler in self._handlers.items():
            with contextlib.suppress(Exception):
                signal.signal(sig, handler)
        names = "/".join(signal.Signals(s).name for s in self.signals) or "the server's end"
        print(
            f"rtlreward server stopped ({names}): its containers and workspaces are removed", file=sys.stderr
        )
