"""Execution sandbox for model-written code: the reward of GRPO and SCoRe is whether a program passes its tests.

Such code is hostile: a policy rewarded for passing tests learns to pass them any way it can. So each program runs
in its own process tree (``subprocess`` exec only, never a fork of the caller, which may hold CUDA and threads),
in a fresh directory, with limits on address space, CPU seconds, processes, file size and open files, no core
files, a PID and network namespace of its own where the machine allows it (see :mod:`.isolation`) and, as root, an
unprivileged uid per worker slot. At the wall-clock deadline the namespace's first process is killed, which makes
the kernel kill everything in the namespace, ``setsid`` daemons included.

Why a pass cannot be faked by exiting early or lying about equality (see :mod:`.runner`): the runner gets a random
token on stdin and prints it only after the last test statement has run; a pass needs exit status 0 *and* the token.
Every comparison in an ``assert`` is rewritten to trust only exact built-in value types (containers recursively),
so an object whose ``__eq__`` always says True fails; the runner keeps its own references to every builtin it uses
and gives the tests a copy of the builtins taken before the program ran.

Residual risks, known and accepted:

- The program shares an interpreter with the runner: it can reach the token through frames
  (``sys._getframe().f_back``), ``gc`` or ``ctypes`` and print it. Isolation bounds the damage a program does,
  not whether it can forge a pass; reward hacking of that kind shows in ``stats`` and in rollouts, not here.
- Tests that compute before comparing (``abs(f(x) - y) < eps``) let an object of the program's choosing steer
  the arithmetic; helper functions of modules the program can patch (``math.isclose``) can be replaced.
- Values of exact built-in types only: a correct program returning a numpy scalar or its own class fails.
- No mount namespace: /tmp and /dev/shm are shared and writable (files left there outlive the run); other files
  are protected by the slot uid's lack of permissions, or not at all under ``userns`` and non-root ``rlimits``.
- Under ``userns`` and non-root ``rlimits`` the process limit counts the caller's uid, so it is set above what the
  caller already runs; under ``rlimits`` there is network and setsid daemons survive (a loud warning is logged).
- Disk: the file-size limit is per file; there is no quota, so a program can write many files until the deadline.
- A parent killed with SIGKILL takes its process trees down (parent-death signals) but leaves its temp dir behind.
- Slot uids are numbers above 2**31 without /etc/passwd entries; a site that assigns such uids to people must
  not run this as root.
"""

from distlab.recipes.lm.sandbox.config import SandboxConfig
from distlab.recipes.lm.sandbox.sandbox import Sandbox, SandboxResult

__all__ = ["Sandbox", "SandboxConfig", "SandboxResult"]
