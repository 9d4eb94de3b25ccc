"""What the core itself needs to run, registered unconditionally (pytest and llm do the same with a tuple of
built-in modules): the combiners, the preset profiles, the executors and the `rtlreward sandbox` commands.

These are hook implementations like any plugin's, so `rtlreward plugins` lists them and a third party can add
more, but they are not entry points: an allow-list such as `RTLREWARD_PLUGINS=folder,format,safety` can never
leave the engine without an executor or a combiner. Stages, datasets, harness runners and trainers stay optional
plugins.
"""

from __future__ import annotations

from rtlreward.plugins import hookimpl


def docker_executor(**kwargs):
    """The docker executor (needs the `docker` extra, a running daemon and `rtlreward sandbox build-image`)."""
    from rtlreward.sandbox.docker import DockerExecutor

    return DockerExecutor(**kwargs)


def ray_executor(**kwargs):
    """The ray executor (needs the `ray` extra): whole candidates scored on a Ray cluster, no shared disk
    needed (rtlreward.distributed)."""
    from rtlreward.distributed import RayBackend

    return RayBackend(**kwargs)


@hookimpl
def rtlreward_register_combiners(register):
    from rtlreward.combine import BUILTIN

    for name, fn in BUILTIN.items():
        register(name, fn)


@hookimpl
def rtlreward_register_profiles(register):
    from rtlreward.profiles import PRESETS, preset_path

    for name in PRESETS:
        register(name, preset_path(name))


@hookimpl
def rtlreward_register_executors(register):
    from rtlreward.sandbox.local import LocalExecutor

    register("local", LocalExecutor)
    register("docker", docker_executor)
    register("ray", ray_executor)


@hookimpl
def rtlreward_register_commands(app):
    from rtlreward.sandbox.commands import add_commands

    add_commands(app)
