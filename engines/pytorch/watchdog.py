"""The engine watching its own resident memory from a thread beside the device worker: the contract of the
built-in engine's watchdog (stack/watchdog.ts). Past the limit it writes one JSON line to stderr
({"event": "memory-exceeded", "rssBytes", "limitBytes", "message": "engine: ..."}) and kills the process
with SIGKILL (a device run holds the worker thread; nothing short of that stops it), so that its pool
worker's engine supervisor starts a fresh one and the call in flight fails as retryable. PyTorch kernels
release the GIL, so this thread runs while one allocates."""
import json
import os
import signal
import sys
import threading
import time

HINT = "a smaller model or --max-batch; --rss-limit-bytes / TROUPE_ENGINE_RSS_LIMIT_BYTES raises the limit"
EVERY_S = 0.1  # memory grows fast: look often (as stack/watchdog.ts does)


def _kb(path, field):
    with open(path) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise ValueError(field)


def rss_bytes():
    return _kb("/proc/self/status", "VmRSS")


def free_memory_bytes():
    """MemAvailable (what the host can still give), else physical memory."""
    try:
        return _kb("/proc/meminfo", "MemAvailable")
    except (OSError, ValueError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _mib(b):
    return f"{round(b / 2 ** 20)} MiB"


def watch(limit_bytes):
    """Start the watching thread (a daemon: it never keeps the process alive)."""
    def run():
        while True:
            try:
                held = rss_bytes()
            except (OSError, ValueError):
                return  # no /proc: nothing to watch
            if held > limit_bytes:
                message = (f"engine: resident memory {_mib(held)} is over the limit of {_mib(limit_bytes)}; "
                           f"exiting before the host runs out of memory ({HINT})")
                line = json.dumps({"ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "event": "memory-exceeded",
                                   "rssBytes": held, "limitBytes": limit_bytes, "message": message})
                os.write(sys.stderr.fileno(), (line + "\n").encode())
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(EVERY_S)

    threading.Thread(target=run, name="rss-watchdog", daemon=True).start()
