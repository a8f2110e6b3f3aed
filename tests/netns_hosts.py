"""Hosts for a test, built as Linux network namespaces on one bridge with no uplink.

Each host has its own network stack and 10.x address; the bridge joins them and the root namespace
(the test's own host, where the flow runs) and leads nowhere else. A host's processes are started
with `ip netns exec`, in a mount namespace of their own where the directories the host must not see
(the flow's home) are covered by an empty tmpfs: as on another machine, they are not there. Killing a
host kills every process in its namespace (`ip netns pids`), as a machine that loses power.
Everything is removed on close, whatever happened before.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


def unavailable() -> str | None:
    """Why namespaces cannot be built here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    probe = f"obh-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` is not allowed here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@dataclass
class Host:
    name: str
    namespace: str
    address: str
    processes: list[subprocess.Popen] = field(default_factory=list)


class HostNetwork:
    """A bridge `10.<a>.<b>.0/24` with the root namespace at .1 and one namespace per host from .10."""

    def __init__(self) -> None:
        sweep()
        self.prefix = f"obh{os.getpid()}"  # interface names stay within the kernel's 15 characters
        self.subnet = f"10.{200 + os.getpid() % 50}.{os.getpid() % 250}"
        self.bridge = f"{self.prefix}br"
        self.hosts: dict[str, Host] = {}
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def add(self, name: str) -> Host:
        number = len(self.hosts)
        namespace, veth = f"{self.prefix}-{name}", f"{self.prefix}v{number}"
        host = Host(name, namespace, f"{self.subnet}.{10 + number}")
        self.hosts[name] = host  # registered first: close() removes a half-built host too
        _ip("netns", "add", namespace)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", namespace)
        _ip("link", "set", veth, "master", self.bridge, "up")
        _ip("-n", namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _ip("-n", namespace, "link", "set", "eth0", "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
        return host

    def start(self, host: Host, command: list[str], env: dict[str, str], log: Path,
              hidden: tuple[Path, ...] = ()) -> subprocess.Popen:
        """`command` on `host`, its output in `log`; the directories `hidden` are empty there."""
        log.parent.mkdir(parents=True, exist_ok=True)
        for path in hidden:  # a mount point must exist
            path.mkdir(parents=True, exist_ok=True)
        covers = "".join(f"mount -t tmpfs tmpfs {shlex.quote(str(path))} && " for path in hidden)
        inside = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                  f"{covers}exec {shlex.join(command)}"]
        with open(log, "ab") as out:
            process = subprocess.Popen(["ip", "netns", "exec", host.namespace, *inside], env=env,
                                       stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
        host.processes.append(process)
        return process

    def kill(self, host: Host) -> None:
        """Every process on the host, at once (SIGKILL): what its op workers held is lost."""
        for _ in range(3):  # a process may fork while the first ones die
            pids = _pids(host.namespace)
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)
        for process in host.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def close(self) -> None:
        for host in self.hosts.values():
            self.kill(host)
            subprocess.run(["ip", "netns", "del", host.namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


def sweep() -> None:
    """Remove what a killed test process left behind (its pid, in the names, is gone)."""
    listed = subprocess.run(["ip", "-o", "netns", "list"], capture_output=True, text=True).stdout.split()
    links = subprocess.run(["ip", "-o", "link", "show", "type", "bridge"], capture_output=True, text=True).stdout
    for name in listed + re.findall(r"\d+: (obh\d+br)[:@]", links):
        found = re.fullmatch(r"obh(\d+)(-.+|br)", name)
        if found is None or _alive(int(found.group(1))):
            continue
        if found.group(2) == "br":
            subprocess.run(["ip", "link", "del", name], capture_output=True)
            continue
        for pid in _pids(name):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _pids(namespace: str) -> list[int]:
    listed = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    return [int(p) for p in listed.stdout.split()]
