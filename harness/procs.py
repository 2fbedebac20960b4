"""Process helpers shared by the writers that sweep up after killed runs."""
from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists (ours or not); used to tell a live writer's temp folder from a dead one's."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
