#!/usr/bin/python3
"""Troupe engine protocol v2 (engines/protocol/engine.proto) in Python + PyTorch, for the
"transformer" family. See README.md.

    /usr/bin/python3 engines/pytorch/server.py --port 50061 [--device cpu|cuda:N|auto] [--exit-with-stdin]

gRPC handler threads validate and enqueue; one device worker thread runs the device
work (init, load, generate, score, update) in FIFO order.
"""
import json
import os
import sys
import threading
from concurrent import futures

from boot import GEN, HERE, ensure_stubs, fail_start, log, parse_args

ARGS = parse_args(sys.argv[1:]) if __name__ == "__main__" else None
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
if __name__ == "__main__":
    ensure_stubs()
else:
    sys.path.insert(0, GEN)
sys.path.insert(0, HERE)

import grpc  # noqa: E402
import torch  # noqa: E402

import engine_pb2_grpc as pbg  # noqa: E402
import faults as faultsmod  # noqa: E402
import metrics  # noqa: E402
import watchdog  # noqa: E402
from contract import ENGINE_NAME, MAX_MESSAGE_BYTES  # noqa: E402
from engine import Engine  # noqa: E402


# ---------------------------------------------------------------- main

def resolve_device(requested):
    if requested == "cpu":
        return "cpu", False, ""
    if requested == "auto":
        if torch.cuda.is_available():
            return "cuda:0", False, ""
        return "cpu", True, "auto: torch.cuda.is_available() is false (no CUDA device or torch built without CUDA)"
    idx = int(requested[5:]) if requested.startswith("cuda:") else 0
    if not torch.cuda.is_available():
        fail_start(f"--device {requested}: CUDA is not available to torch {torch.__version__} (torch.cuda.is_available() is false)")
    if idx >= torch.cuda.device_count():
        fail_start(f"--device {requested}: only {torch.cuda.device_count()} CUDA device(s)")
    return f"cuda:{idx}", False, ""


def main():
    a = ARGS
    # as the built-in engine (processes/onnx-engine.ts): 90% of what is free at start-up unless told
    watchdog.watch(a.rss_limit_bytes if a.rss_limit_bytes is not None else int(0.9 * watchdog.free_memory_bytes()))
    device, fell_back, reason = resolve_device(a.device)
    if a.dtype != "fp32" and not device.startswith("cuda"):
        # torch 1.13's CPU bf16 matmuls are emulated (slower than fp32 here) and no CPU bf16 path is tested: fp32 only
        fail_start(f"bad flag: --dtype {a.dtype} needs a CUDA device (--device cuda:N); on {device} the engine computes in fp32 only")
    threads = a.threads or 1
    torch.set_num_threads(threads)
    try:
        torch.use_deterministic_algorithms(True)
    except Exception:  # noqa: BLE001
        pass
    if fell_back:
        log("device_fallback", requested=a.device, device=device, reason=reason)
    engine = Engine(device, ",".join(a.devices), fell_back, reason, threads, a.memory_bytes, a.max_batch, a.prefix_cache_bytes)
    engine.micro_batch_bytes = a.micro_batch_bytes
    if len(a.devices) > 1:
        for d in a.devices[1:]:
            resolve_device(d)
        import parallel
        engine.parallel = parallel.Fsdp(a.devices, threads, a.dtype)
        log("fsdp_ranks", devices=a.devices, world_size=len(a.devices))
    engine.checkpoint_layers = a.activation_checkpointing
    if a.dtype == "bf16":
        engine.queue.autocast = torch.bfloat16
    try:
        engine.faults = faultsmod.parse_faults(os.environ.get("TROUPE_ENGINE_FAULTS"))
    except ValueError as e:
        fail_start(str(e))
    if engine.faults.armed:
        log("faults_armed", faults=engine.faults.armed)
    requests = metrics.RequestCounts()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=128), interceptors=[metrics.CountingInterceptor(requests)], options=[
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES), ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.so_reuseport", 0)])
    pbg.add_EngineServicer_to_server(engine, server)
    host = a.host
    target = f"[{host}]:{a.port}" if ":" in host and not host.startswith("[") else f"{host}:{a.port}"
    if a.port != 0:  # a clean one-line error for a taken port (gRPC core would log its own first)
        import errno
        import socket
        probe = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host.strip("[]"), a.port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                fail_start(f"port {a.port} on {host} is already in use")
        finally:
            probe.close()
    try:
        port = server.add_insecure_port(target)
    except RuntimeError:
        port = 0
    if port == 0:
        fail_start(f"cannot listen on {target}: port {a.port} on {host} is already in use (or the address is not available)")
    metrics_address = None
    if a.metrics_port:
        mh = a.metrics_host
        try:
            metrics.serve(engine, requests, mh, a.metrics_port)
        except OSError as e:
            fail_start(f"bad flag: --metrics-port {a.metrics_port}: cannot listen on {mh}:{a.metrics_port}: {e.strerror or e}")
        metrics_address = f"[{mh}]:{a.metrics_port}" if ":" in mh and not mh.startswith("[") else f"{mh}:{a.metrics_port}"
    server.start()
    address = f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"
    sys.stdout.write(json.dumps({"event": "listening", "port": port, "address": address, "device": device, "fell_back": fell_back,
                                 "fallback_reason": reason, "pid": os.getpid(),
                                 **({"metrics_address": metrics_address} if metrics_address else {})}, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    log("engine_started", engine=ENGINE_NAME, address=address, device=device, threads=threads,
        memory_bytes=engine.memory_bytes)
    if a.exit_with_stdin:
        def watch():
            try:
                while sys.stdin.buffer.read(65536):
                    pass
            except Exception:  # noqa: BLE001
                pass
            log("stdin_closed", message="parent went away; exiting")
            os._exit(0)
        threading.Thread(target=watch, daemon=True).start()
    try:
        server.wait_for_termination()
    except KeyboardInterrupt:
        server.stop(1)


if __name__ == "__main__":
    main()
