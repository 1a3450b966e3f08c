"""The budget of the admin's "Sync now": its child process
(`manage.py sync_help_center --run-id`, started by
helpcenter/importers/sync.py) limits itself before it reads anything, and
cannot escape it: over its resident memory (KOOKEE_SYNC_MEMORY_MB) a
watchdog ends it, over its CPU seconds (KOOKEE_SYNC_CPU_SECONDS) and its
wall-clock seconds (KOOKEE_SYNC_SECONDS) the kernel's signals do. `ending`
says how the child ended, for the source's page, when its sync could not.
"""

from __future__ import annotations

import os
import resource
import signal
import threading
import time

from django.conf import settings

# The admin's child (sync_help_center --run-id) exits with OVER_MEMORY when
# an allocation fails under its budget; time and CPU end it by signals.
OVER_MEMORY = 3
OUT_OF_MEMORY = "stopped: out of memory"
CPU_GRACE = 5  # seconds of CPU past SIGXCPU before the kernel's SIGKILL
# The child's address space may be this many times its memory budget: threads
# reserve address space they never touch (glibc's arenas, stacks).
ADDRESS_SPACE = 3
MEMORY_WATCH_SECONDS = 0.02  # parsing grows by about 300 MB/s: some 6 MB past the budget at worst
_budgeted = False  # this process is the admin's child, under the sync budget (limit_this_process)
CHILD_SETTINGS = ("KOOKEE_SYNC_MEMORY_MB", "KOOKEE_SYNC_CPU_SECONDS", "KOOKEE_SYNC_SECONDS", "KOOKEE_IMPORT_ROOT")


def child_environment() -> dict[str, str]:
    """The environment of the admin's child: the server's, with its budget."""
    return {
        **os.environ,
        # Its budget and rules as this process has them: what the reaper
        # says the child ran under is what it ran under.
        **{name: str(getattr(settings, name)) for name in CHILD_SETTINGS},
        # The address space cap is a backstop, and glibc reserves 64 MB of
        # it for each thread that allocates (a crawl has up to 8): with two
        # arenas it stays near the memory used (a crawl of 8 threads: 624 MB
        # of address space for 122 MB resident; with two, 336 MB).
        "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "2"),
    }


def limit_this_process() -> None:
    """The admin's child, before it reads anything: its budget, which holds
    whatever the child runs (a loop in C too). Over its resident memory a
    watchdog thread ends it at once (exit OVER_MEMORY); over its CPU seconds
    SIGXCPU ends it, over its wall-clock seconds SIGALRM (their default
    action: nothing here catches them). Its address space is capped too, at
    ADDRESS_SPACE times the memory budget: a backstop for an allocation
    faster than the watchdog looks, never the first bound to hit, because
    CPython close to that cap may abort, or crawl through failing mmaps,
    rather than raise MemoryError (both seen)."""
    global _budgeted
    _budgeted = True
    memory = settings.KOOKEE_SYNC_MEMORY_MB * 2**20
    cpu = settings.KOOKEE_SYNC_CPU_SECONDS
    _lower(resource.RLIMIT_AS, memory * ADDRESS_SPACE, memory * ADDRESS_SPACE)
    _lower(resource.RLIMIT_CPU, cpu, cpu + CPU_GRACE)  # SIGXCPU, then SIGKILL
    _lower(resource.RLIMIT_CORE, 0, 0)  # SIGXCPU's default dumps core otherwise
    stops = {signal.SIGXCPU, signal.SIGALRM}
    for stop in stops:
        signal.signal(stop, signal.SIG_DFL)  # not as the server may have left them to its children
    signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
    signal.alarm(settings.KOOKEE_SYNC_SECONDS)
    os.nice(10)  # the server's visitors first
    threading.Thread(target=_watch_memory, args=(memory,), name="kookee-sync-memory", daemon=True).start()


def _watch_memory(budget: int) -> None:
    """Ends this process the moment its resident memory passes the budget."""
    while _resident() <= budget:
        time.sleep(MEMORY_WATCH_SECONDS)
    os._exit(OVER_MEMORY)  # the server's reaper records why, and gives the lease back


def _resident() -> int:
    """This process's resident memory now, in bytes. Not its peak
    (ru_maxrss): Linux carries that across exec from the process that
    forked, so a child of a server that had grown past the budget was over
    it before it read a page."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize()
    except (OSError, IndexError, ValueError):  # no /proc: the peak, as the kernel counts it (KB)
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _lower(limit: int, soft: int, hard: int) -> None:
    """Sets a limit, never above one the process already has (a user may not raise it)."""
    _, current = resource.getrlimit(limit)
    if current != resource.RLIM_INFINITY:
        hard = min(hard, current)
    resource.setrlimit(limit, (min(soft, hard), hard))


def ending(code: int) -> str:
    """How the admin's child ended, for the source's page (when its sync did not say)."""
    if code == OVER_MEMORY:
        return f"stopped: over its memory budget (KOOKEE_SYNC_MEMORY_MB, {settings.KOOKEE_SYNC_MEMORY_MB} MB)"
    if code == -signal.SIGXCPU:
        return f"stopped: over its CPU budget (KOOKEE_SYNC_CPU_SECONDS, {settings.KOOKEE_SYNC_CPU_SECONDS} s)"
    if code == -signal.SIGALRM:
        return f"stopped: over its time budget (KOOKEE_SYNC_SECONDS, {settings.KOOKEE_SYNC_SECONDS} s)"
    if code == -signal.SIGABRT:
        return "stopped: aborted (the server's log says why: CPython aborts when it runs out of memory)"
    if code == -signal.SIGKILL:
        return "stopped: killed (over its CPU budget, or the server was out of memory)"
    if code < 0:
        return f"stopped: killed by signal {-code} ({signal.strsignal(-code)})"
    return f"stopped: its process exited with code {code} (the server's log says why)"


def out_of_memory() -> str:
    """Why a sync that ran out of memory stopped: under the admin's budget,
    said as the server says it when the child cannot (whichever writes last,
    the page reads the same)."""
    return ending(OVER_MEMORY) if _budgeted else OUT_OF_MEMORY
