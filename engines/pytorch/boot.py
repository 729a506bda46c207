"""The engine's start-up, before torch is imported: its log lines, its flags, and the gRPC stubs it generates from
engines/protocol/engine.proto (server.py runs these first, so a bad flag fails in a moment)."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.path.normpath(os.path.join(HERE, "..", "protocol"))
PROTO = os.path.join(PROTO_DIR, "engine.proto")
GEN = os.path.join(HERE, ".gen")
DEFAULT_MICRO_BATCH_BYTES = 256 * 2 ** 20  # the built-in engine's --micro-batch-bytes default
DTYPES = ("fp32", "bf16")  # compute types; weights and AdamW state stay float32 (master copies) in both


def log(event, **fields):
    sys.stderr.write(json.dumps({"event": event, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **fields}) + "\n")
    sys.stderr.flush()


def fail_start(message):
    sys.stderr.write(f"troupe-pytorch engine: {message}\n")
    sys.stderr.flush()
    sys.exit(1)


# ---------------------------------------------------------------- stubs

def ensure_stubs():
    """Generate engine_pb2*.py into .gen/ with grpcio-tools' protoc when missing, older than the
    proto, or made by another grpcio-tools (temp dir, then rename)."""
    try:
        import grpc_tools
    except ImportError:
        fail_start("grpcio-tools is needed to generate the gRPC stubs (engines/pytorch/requirements.txt)")
    stamp = os.path.join(GEN, "GRPC_TOOLS_VERSION")
    tools_version = _dist_version("grpcio-tools")
    target = os.path.join(GEN, "engine_pb2_grpc.py")
    fresh = (
        os.path.exists(target) and os.path.getmtime(target) >= os.path.getmtime(PROTO)
        and os.path.exists(stamp) and open(stamp).read().strip() == tools_version
    )
    if not fresh:
        tmp = tempfile.mkdtemp(prefix=".gen-", dir=HERE)
        os.chmod(tmp, 0o755)
        include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        r = subprocess.run(
            [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO_DIR}", f"-I{include}", f"--python_out={tmp}", f"--grpc_python_out={tmp}", "engine.proto"],
            capture_output=True, text=True,
        )
        if r.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            fail_start(f"protoc failed: {r.stderr.strip()}")
        with open(os.path.join(tmp, "GRPC_TOOLS_VERSION"), "w") as f:
            f.write(tools_version + "\n")
        # replace atomically; another engine starting at the same time may win the race (its stubs are equal)
        old = None
        if os.path.exists(GEN):
            old = tempfile.mkdtemp(prefix=".gen-old-", dir=HERE)
            os.rmdir(old)
            try:
                os.rename(GEN, old)
            except OSError:
                old = None
        try:
            os.rename(tmp, GEN)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
        if old:
            shutil.rmtree(old, ignore_errors=True)
    sys.path.insert(0, GEN)


def _dist_version(name):
    from importlib.metadata import version
    return version(name)


# ---------------------------------------------------------------- flags (parsed before heavy imports)

def parse_args(argv):
    class Parser(argparse.ArgumentParser):
        def error(self, message):
            fail_start(f"bad flag: {message}")

    p = Parser(description="Troupe engine (protocol v2) in PyTorch")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--exit-with-stdin", action="store_true")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--memory-bytes", default=os.environ.get("TROUPE_ENGINE_MEMORY_BYTES"))
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument("--prefix-cache-bytes", type=int, default=None)
    p.add_argument("--rss-limit-bytes", default=os.environ.get("TROUPE_ENGINE_RSS_LIMIT_BYTES"))
    p.add_argument("--micro-batch-bytes", type=int, default=DEFAULT_MICRO_BATCH_BYTES)
    p.add_argument("--activation-checkpointing", action="store_true")
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--metrics-port", default=os.environ.get("TROUPE_ENGINE_METRICS_PORT") or None)
    p.add_argument("--metrics-host", default=os.environ.get("TROUPE_METRICS_HOST") or "127.0.0.1")
    a = p.parse_args(argv)
    if a.metrics_port is not None:
        what = "--metrics-port" if "--metrics-port" in " ".join(argv) else "--metrics-port (from TROUPE_ENGINE_METRICS_PORT)"
        if not str(a.metrics_port).isdigit() or int(a.metrics_port) > 65535:
            fail_start(f"bad flag: {what} must be a port number (0-65535; 0: none), got {a.metrics_port!r}")
        a.metrics_port = int(a.metrics_port)
    if a.micro_batch_bytes < 1:
        fail_start(f"bad flag: --micro-batch-bytes must be a positive integer, got {a.micro_batch_bytes}")
    if a.dtype not in DTYPES:
        fail_start(f"bad flag: --dtype must be one of {', '.join(DTYPES)}, got {a.dtype!r}")
    if a.rss_limit_bytes is not None:
        what = "--rss-limit-bytes" if "--rss-limit-bytes" in " ".join(argv) else "--rss-limit-bytes (from TROUPE_ENGINE_RSS_LIMIT_BYTES)"
        if not str(a.rss_limit_bytes).isdigit() or int(a.rss_limit_bytes) < 1:
            fail_start(f"bad flag: {what} must be a positive integer, got {a.rss_limit_bytes!r}")
        a.rss_limit_bytes = int(a.rss_limit_bytes)
    if a.memory_bytes is not None:
        what = "--memory-bytes" if "--memory-bytes" in " ".join(argv) else "--memory-bytes (from TROUPE_ENGINE_MEMORY_BYTES)"
        if not str(a.memory_bytes).isdigit() or int(a.memory_bytes) < 1:
            fail_start(f"bad flag: {what} must be a positive integer, got {a.memory_bytes!r}")
        a.memory_bytes = int(a.memory_bytes)
    if not (0 <= a.port <= 65535):
        fail_start(f"bad flag: --port must be in [0, 65535], got {a.port}")
    if a.prefix_cache_bytes is not None and a.prefix_cache_bytes < 0:
        fail_start(f"bad flag: --prefix-cache-bytes must be >= 0 (0: no prefix cache), got {a.prefix_cache_bytes}")
    if not (1 <= a.max_batch <= 4096):
        fail_start(f"bad flag: --max-batch must be in [1, 4096], got {a.max_batch}")
    if a.threads is not None and a.threads < 1:
        fail_start(f"bad flag: --threads must be >= 1, got {a.threads}")
    d = a.device
    a.devices = d.split(",")
    if len(a.devices) > 1:  # FSDP2 Updates over these devices (parallel.py)
        if not (all(x == "cpu" for x in a.devices) or all(x.startswith("cuda:") and x[5:].isdigit() for x in a.devices)):
            fail_start(f'bad flag: --device with several devices must list cpu,cpu,... or cuda:N,cuda:M,..., got "{d}"')
        a.device = a.devices[0]
    elif not (d in ("cpu", "auto", "cuda") or (d.startswith("cuda:") and d[5:].isdigit())):
        fail_start(f'bad flag: --device must be cpu, cuda:N, auto, or a list (cpu,cpu or cuda:0,cuda:1), got "{d}"')
    return a
