"""The engine's own Prometheus endpoint (--metrics-port): GET /metrics in the text exposition format, from the counters
behind Health and Stats, served by http.server in a daemon thread. The names and meanings are the built-in engine's
(engines/onnx/metrics.ts): troupe_engine_requests_total{rpc,code}, troupe_engine_tokens_generated_total,
troupe_engine_tokens_trained_total, troupe_engine_generate_batches_total, troupe_engine_score_runs_total,
troupe_engine_update_runs_total, troupe_engine_device_runs_total, troupe_engine_queue_depth,
troupe_engine_model_versions{model}, troupe_engine_model_latest_version{model}, troupe_engine_resident_memory_bytes,
troupe_engine_uptime_seconds."""
import collections
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc

import watchdog


class RequestCounts:
    """RPCs answered, by RPC and gRPC status name."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = collections.Counter()

    def count(self, rpc, code):
        with self.lock:
            self.counts[(rpc, code)] += 1

    def entries(self):
        with self.lock:
            return sorted(self.counts.items())


class CountingInterceptor(grpc.ServerInterceptor):
    """Counts every answered RPC in `requests` by its final status (a handler's abort sets it; an uncaught error is UNKNOWN)."""

    def __init__(self, requests):
        self.requests = requests

    def intercept_service(self, continuation, details):
        handler = continuation(details)
        if handler is None:
            return None
        rpc = details.method.rsplit("/", 1)[-1]
        done = self.requests.count

        def status(context, failed):
            code = context.code()
            return code.name if code is not None else ("UNKNOWN" if failed else "OK")

        def unary(fn):
            def call(request, context):
                try:
                    res = fn(request, context)
                except BaseException:
                    done(rpc, status(context, True))
                    raise
                done(rpc, status(context, False))
                return res
            return call

        def streaming(fn):
            def call(request, context):
                try:
                    yield from fn(request, context)
                except BaseException:
                    done(rpc, status(context, True))
                    raise
                done(rpc, status(context, False))
            return call

        kw = dict(request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer)
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(unary(handler.unary_unary), **kw)
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(unary(handler.stream_unary), **kw)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(streaming(handler.unary_stream), **kw)
        return grpc.stream_stream_rpc_method_handler(streaming(handler.stream_stream), **kw)


def _label(v):
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _family(name, kind, help_, samples):
    lines = [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
    for labels, value in samples:
        ls = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
        lines.append(f"{name}{{{ls}}} {value}" if ls else f"{name} {value}")
    return "\n".join(lines)


def metrics_text(engine, requests):
    """The exposition text of `engine` now."""
    health = engine.Health(None, None)
    stats = engine.Stats(None, None)

    def one(v):
        return [({}, v)]
    return "\n".join([
        _family("troupe_engine_requests_total", "counter", "RPCs answered, by RPC and gRPC status",
                [({"rpc": rpc, "code": code}, n) for (rpc, code), n in requests.entries()]),
        _family("troupe_engine_tokens_generated_total", "counter", "Tokens generated", one(stats.tokens_generated)),
        _family("troupe_engine_tokens_trained_total", "counter", "Trainable tokens of committed updates",
                one(engine.counters["tokens_trained"])),
        _family("troupe_engine_generate_batches_total", "counter", "Fused generate runs", one(stats.generate_batches)),
        _family("troupe_engine_score_runs_total", "counter", "Score runs", one(stats.score_runs)),
        _family("troupe_engine_update_runs_total", "counter", "Update runs (committed or not)", one(stats.update_runs)),
        _family("troupe_engine_device_runs_total", "counter", "Device runs finished (progress, as Health reports it)",
                one(health.device_runs)),
        _family("troupe_engine_queue_depth", "gauge", "Requests waiting or running in the engine", one(health.queue_depth)),
        _family("troupe_engine_model_versions", "gauge", "Versions cached per model",
                [({"model": m.model_key}, len(m.versions)) for m in stats.models]),
        _family("troupe_engine_model_latest_version", "gauge", "Newest version per model",
                [({"model": m.model_key}, m.latest_version) for m in stats.models]),
        _family("troupe_engine_resident_memory_bytes", "gauge", "The engine process's resident memory", one(watchdog.rss_bytes())),
        _family("troupe_engine_uptime_seconds", "gauge", "Seconds since the engine started", one(health.uptime_s)),
    ]) + "\n"


def serve(engine, requests, host, port):
    """Serves GET /metrics on host:port from a daemon thread; raises OSError when it cannot bind."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.split("?")[0] != "/metrics":
                self._send(404, "text/plain", b"not found: GET /metrics\n")
                return
            try:
                body, code = metrics_text(engine, requests).encode(), 200
            except Exception as e:  # noqa: BLE001
                body, code = f"{e}\n".encode(), 500
            self._send(code, "text/plain; version=0.0.4; charset=utf-8", body)

        def _send(self, code, kind, body):
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # stderr carries the engine's JSON log lines only
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    server = Server((host.strip("[]"), port), Handler)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
