"""A seccomp filter for every bubblewrap sandbox: the kernel's key management calls fail with EPERM.

Why: the kernel keeps a uid's keyrings (its user, user-session and persistent keyrings, the last for days) after
the uid's processes are gone, so a key a command adds is there for the next command leased the same uid: a
channel from one candidate to a later one that no process kill, file removal or namespace ends. No tool a stage
runs uses keys. Denied: `add_key`, `request_key` and `keyctl`, for the x86-64 and i386 ABIs on x86-64 (x32 calls are
refused whole) and for arm64; other architectures get no filter (`program()` returns None).

The program is classic BPF as the kernel's seccomp takes it and bubblewrap loads it (`--seccomp FD`): each
instruction `struct sock_filter {u16 code; u8 jt; u8 jf; u32 k}`, reading `struct seccomp_data` (syscall number at
offset 0, audit architecture at offset 4).
"""

from __future__ import annotations

import os
import platform
import struct

_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_RET_K = 0x06  # BPF_RET | BPF_K
ALLOW = 0x7FFF0000  # SECCOMP_RET_ALLOW
DENY = 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM

ARCH_X86_64 = 0xC000003E
ARCH_I386 = 0x40000003
ARCH_AARCH64 = 0xC00000B7
X32_BIT = 0x40000000

# add_key, request_key, keyctl per audit architecture
DENIED = {
    ARCH_X86_64: (248, 249, 250),
    ARCH_I386: (286, 287, 288),
    ARCH_AARCH64: (217, 218, 219),
}
_MACHINES = {"x86_64": (ARCH_X86_64, ARCH_I386), "aarch64": (ARCH_AARCH64,)}


def _assemble(arches: tuple[int, ...]) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k): per architecture, its denied numbers; anything else is allowed."""
    blocks: list[list[tuple[int, int]]] = []  # per arch: (jump opcode, k) tests that deny on a match
    for arch in arches:
        tests = [(_JGE_K, X32_BIT)] if arch == ARCH_X86_64 else []
        tests += [(_JEQ_K, nr) for nr in DENIED[arch]]
        blocks.append(tests)
    # Layout: ld arch; for each arch: jeq arch -> its block; ret ALLOW; blocks (ld nr; tests; ret ALLOW); ret DENY
    prog: list[tuple[int, int, int, int]] = [(_LD_W_ABS, 0, 0, 4)]
    n_dispatch = len(arches)
    block_len = [1 + len(b) + 1 for b in blocks]
    starts = []
    at = 1 + n_dispatch + 1  # first block after the dispatch jumps and the ALLOW for other arches
    for length in block_len:
        starts.append(at)
        at += length
    deny_at = at
    for i, arch in enumerate(arches):
        here = 1 + i
        prog.append((_JEQ_K, starts[i] - here - 1, 0, arch))
    prog.append((_RET_K, 0, 0, ALLOW))
    for tests in blocks:
        prog.append((_LD_W_ABS, 0, 0, 0))
        for opcode, k in tests:
            here = len(prog)
            prog.append((opcode, deny_at - here - 1, 0, k))
        prog.append((_RET_K, 0, 0, ALLOW))
    prog.append((_RET_K, 0, 0, DENY))
    assert len(prog) == deny_at + 1
    return prog


def program(machine: str | None = None) -> bytes | None:
    """The compiled filter for this machine (None: an architecture it does not know)."""
    arches = _MACHINES.get(machine or platform.machine())
    if not arches:
        return None
    return b"".join(struct.pack("=HBBI", *ins) for ins in _assemble(arches))


_MEMFD: int | None = None


def open_filter() -> int | None:
    """A new read-only descriptor on the compiled filter (None: no filter for this machine), for one sandbox to
    read from its start: each start gets its own (a shared descriptor would share its read offset between
    concurrent starts). The filter lives in a memfd made once per process; the caller closes the descriptor."""
    global _MEMFD
    if _MEMFD is None:
        prog = program()
        if prog is None:
            return None
        fd = os.memfd_create("rtlreward-seccomp", os.MFD_CLOEXEC)
        os.write(fd, prog)
        _MEMFD = fd
    return os.open(f"/proc/self/fd/{_MEMFD}", os.O_RDONLY | os.O_CLOEXEC)
