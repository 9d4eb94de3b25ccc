"""The plugin manager and a typed registry over it.

Built-in plugins and third-party plugins load the same way: from the `rtlreward` entry-point group. The core never
imports a plugin by name. What the core itself needs (combiners, preset profiles, executors: `BUILTIN_PLUGINS`) is
registered unconditionally, exempt from the lists below. Environment variables:

- `RTLREWARD_PLUGINS=a,b`: load only these entry points (an allow-list; empty means all).
- `RTLREWARD_DISABLE_PLUGINS=a,b`: never load these.
- `RTLREWARD_TRACE_PLUGINS=1`: print every hook call and its result to stderr (debugging a plugin).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

import attrs
import pluggy

from rtlreward import hookspecs

PROJECT = "rtlreward"
ENTRY_POINT_GROUP = "rtlreward"
# The core's own hook implementations, always registered (name, module): see rtlreward/builtin.py.
BUILTIN_PLUGINS = (("core", "rtlreward.builtin"),)

hookimpl = pluggy.HookimplMarker(PROJECT)


class PluginError(RuntimeError):
    """A plugin failed to load or registered something inconsistent."""


def _env_list(name: str) -> set[str]:
    return {x.strip() for x in os.environ.get(name, "").split(",") if x.strip()}


@attrs.frozen
class PluginInfo:
    name: str  # entry-point name (or the registered name of an in-process plugin)
    module: str
    version: str
    hooks: tuple[str, ...]
    distribution: str = ""


_SINGULAR = {
    "stages": "stage",
    "combiners": "combiner",
    "profiles": "profile",
    "datasets": "dataset",
    "harnesses": "harness",
    "executors": "executor",
    "trainers": "trainer",
}


@attrs.frozen
class Registered:
    kind: str  # "stage", "combiner", ...
    name: str
    obj: Any
    plugin: str


class Registry:
    """One method per hook, so the core never calls `pm.hook.x` with loose keyword arguments."""

    KINDS = ("stages", "combiners", "profiles", "datasets", "harnesses", "executors", "trainers")

    def __init__(
        self, pm: pluggy.PluginManager, load_errors: dict[str, str] | None = None, *, trace: bool = False
    ) -> None:
        self.pm = pm
        self.load_errors = load_errors or {}
        self.trace = trace
        self._cache: dict[str, dict[str, Registered]] = {}
        self._lock = threading.Lock()

    # -- collection --------------------------------------------------------------------------------------------
    def _collect(self, kind: str) -> dict[str, Registered]:
        with self._lock:
            if kind in self._cache:
                return self._cache[kind]
            hook = getattr(self.pm.hook, f"rtlreward_register_{kind}")
            found: dict[str, Registered] = {}
            # Call each implementation on its own so we know which plugin registered what.
            for impl in reversed(hook.get_hookimpls()):
                plugin_name = self.pm.get_name(impl.plugin) or repr(impl.plugin)

                mine: dict[str, Registered] = {}

                def register(*args: Any, _plugin: str = plugin_name, _mine: dict = mine) -> None:
                    if kind == "stages":
                        (obj,) = args
                        name = obj.name
                    else:
                        name, obj = args
                    if name in found or name in _mine:
                        other = found[name].plugin if name in found else _plugin
                        raise PluginError(
                            f"{_SINGULAR[kind]} {name!r} is registered by both {other!r} and {_plugin!r}; "
                            f"disable one with RTLREWARD_DISABLE_PLUGINS"
                        )
                    _mine[name] = Registered(kind=_SINGULAR[kind], name=name, obj=obj, plugin=_plugin)
                    if self.trace:
                        sys.stderr.write(
                            f"[rtlreward trace] {_plugin}: register {_SINGULAR[kind]} {name!r}\n"
                        )

                if self.trace:
                    sys.stderr.write(f"[rtlreward trace] call rtlreward_register_{kind} of {plugin_name}\n")
                try:
                    impl.function(register=register)
                except PluginError:
                    raise
                except Exception as exc:  # one broken plugin loses its own registrations, not everyone's
                    self.load_errors[plugin_name] = f"rtlreward_register_{kind}: {type(exc).__name__}: {exc}"
                    warnings.warn(
                        f"rtlreward plugin {plugin_name!r} failed in rtlreward_register_{kind}: {exc}",
                        stacklevel=3,
                    )
                    continue
                found.update(mine)
            self._cache[kind] = found
            return found

    def stages(self) -> dict[str, Any]:
        return {n: r.obj for n, r in self._collect("stages").items()}

    def combiners(self) -> dict[str, Callable[..., Any]]:
        return {n: r.obj for n, r in self._collect("combiners").items()}

    def profiles(self) -> dict[str, Any]:
        return {n: r.obj for n, r in self._collect("profiles").items()}

    def datasets(self) -> dict[str, Any]:
        return {n: r.obj for n, r in self._collect("datasets").items()}

    def harnesses(self) -> dict[str, Any]:
        return {n: r.obj for n, r in self._collect("harnesses").items()}

    def executors(self) -> dict[str, Callable[..., Any]]:
        return {n: r.obj for n, r in self._collect("executors").items()}

    def trainers(self) -> dict[str, Any]:
        return {n: r.obj for n, r in self._collect("trainers").items()}

    def registered(self) -> list[Registered]:
        """Everything every plugin registered, for `rtlreward plugins`."""
        out: list[Registered] = []
        for kind in self.KINDS:
            out.extend(self._collect(kind).values())
        return out

    def register_commands(self, app: Any) -> None:
        """Let every plugin add CLI commands; one that raises is reported and skipped, the others still load."""
        for impl in reversed(self.pm.hook.rtlreward_register_commands.get_hookimpls()):
            plugin_name = self.pm.get_name(impl.plugin) or repr(impl.plugin)
            if self.trace:
                sys.stderr.write(f"[rtlreward trace] call rtlreward_register_commands of {plugin_name}\n")
            try:
                impl.function(app=app)
            except Exception as exc:
                self.load_errors[plugin_name] = f"rtlreward_register_commands: {type(exc).__name__}: {exc}"
                warnings.warn(
                    f"rtlreward plugin {plugin_name!r} failed to add its commands: {exc}", stacklevel=2
                )

    # -- observers ---------------------------------------------------------------------------------------------
    def stage_finished(self, task: Any, candidate: Any, result: Any) -> None:
        try:
            self.pm.hook.rtlreward_stage_finished(task=task, candidate=candidate, result=result)
        except Exception as exc:  # an observer must never cost a reward
            warnings.warn(f"an rtlreward_stage_finished observer raised: {exc!r}", stacklevel=2)

    def reward_computed(self, task: Any, candidate: Any, reward: Any) -> None:
        try:
            self.pm.hook.rtlreward_reward_computed(task=task, candidate=candidate, reward=reward)
        except Exception as exc:
            warnings.warn(f"an rtlreward_reward_computed observer raised: {exc!r}", stacklevel=2)

    # -- services one plugin offers another ----------------------------------------------------------------------
    def audit_tasks(
        self,
        tasks: Any,
        profile: str,
        *,
        budget: int,
        attacks: tuple[str, ...] = (),
        executor: str = "local",
        jobs: int | None = None,
        progress: Any = None,
    ) -> dict[str, Any] | None:
        """An audit's report from whichever plugin implements `rtlreward_audit_tasks`; None when none does."""
        return self.pm.hook.rtlreward_audit_tasks(
            tasks=list(tasks),
            profile=profile,
            budget=budget,
            attacks=tuple(attacks),
            executor=executor,
            jobs=jobs,
            progress=progress,
        )

    # -- listing -----------------------------------------------------------------------------------------------
    def plugins(self) -> list[PluginInfo]:
        infos = []
        for name, plugin in sorted(self.pm.list_name_plugin(), key=lambda x: str(x[0])):
            if plugin is None:
                continue
            dist = self.pm.get_plugin(name) and _dist_of(self.pm, plugin)
            hooks = tuple(sorted(h.name for h in self.pm.get_hookcallers(plugin) or ()))
            infos.append(
                PluginInfo(
                    name=name,
                    module=getattr(plugin, "__name__", type(plugin).__name__),
                    version=str(getattr(plugin, "__version__", "") or (dist.version if dist else "")),
                    hooks=hooks,
                    distribution=dist.metadata["Name"] if dist else "",
                )
            )
        return infos


def _dist_of(pm: pluggy.PluginManager, plugin: Any) -> importlib.metadata.Distribution | None:
    for p, dist in pm.list_plugin_distinfo():
        if p is plugin:
            return dist  # type: ignore[return-value]
    return None


def make_plugin_manager(
    *, extra_plugins: dict[str, Any] | None = None, load_entrypoints: bool = True
) -> Registry:
    """A fresh plugin manager: hookspecs added, entry points loaded (allow/deny lists applied), `extra_plugins`
    registered in-process (tests and embedding applications use this)."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    for name, module in BUILTIN_PLUGINS:
        pm.register(importlib.import_module(module), name=name)
    errors: dict[str, str] = {}
    if load_entrypoints:
        allow, deny = _env_list("RTLREWARD_PLUGINS"), _env_list("RTLREWARD_DISABLE_PLUGINS")
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            if (allow and ep.name not in allow) or ep.name in deny or pm.get_plugin(ep.name) is not None:
                continue
            try:
                plugin = ep.load()
            except Exception as exc:  # a broken plugin must not take the others down
                errors[ep.name] = f"{type(exc).__name__}: {exc}"
                warnings.warn(
                    f"rtlreward plugin {ep.name!r} ({ep.value}) failed to load: {exc}", stacklevel=2
                )
                continue
            pm.register(plugin, name=ep.name)
            pm._plugin_distinfo.append((plugin, pluggy._manager.DistFacade(ep.dist)))  # type: ignore[attr-defined]
    for name, plugin in (extra_plugins or {}).items():
        pm.register(plugin, name=name)
    if os.environ.get("RTLREWARD_TRACE_PLUGINS"):
        pm.trace.root.setwriter(lambda msg: sys.stderr.write(f"[rtlreward trace] {msg}"))
        pm.enable_tracing()
    return Registry(pm, errors, trace=bool(os.environ.get("RTLREWARD_TRACE_PLUGINS")))


_default: Registry | None = None
_default_lock = threading.Lock()


def get_registry() -> Registry:
    """The process-wide registry, loaded once on first use (lazy: importing rtlreward loads no plugin)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = make_plugin_manager()
        return _default


def reset_registry() -> None:
    """Forget the loaded plugins (after installing or removing a plugin package in-process)."""
    global _default
    with _default_lock:
        _default = None
