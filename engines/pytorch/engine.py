"""The engine's gRPC service: each RPC validated in the handler's thread, its device work queued (device.py), versions in
the cache (versions.py), Generate and Score runs in generation.py, Update in update.py."""
import collections
import hashlib
import os
import tempfile
import threading
import time
import traceback
import urllib.parse
from concurrent import futures

import torch

import engine_pb2 as pb
import engine_pb2_grpc as pbg
import faults as faultsmod
import hf
import memory
import spec as specmod
from lora import LoraModel, init_adapter
from update import NonFiniteUpdate, run_update
from boot import DEFAULT_MICRO_BATCH_BYTES, log
from contract import (
    BATCH_INVARIANCE,
    CHUNK_BYTES,
    ENGINE_NAME,
    Fault,
    MAX_REMEMBERED_UPDATES,
    PROGRESS_EVERY_S,
    PROTOCOL_VERSION,
    REASON_CODE,
    REQUEST_ID_LIMIT,
    RPCS,
    invalid,
)
from device import DeviceQueue
from generation import GenerateCall, Generation
from prefix_cache import PrefixCache
from messages import (
    check_key,
    check_version,
    finite_list,
    info_of,
    js_float,
    load_checkpoint,
    sampling_of,
    sequence_issue,
    settings_of,
    spec_from_wire,
    spec_to_wire,
    token_ids,
)
from versions import (
    VersionCache,
    decode_optimizer,
    decode_weights,
    encode_optimizer,
    encode_weights,
    path_of_uri,
    read_reference,
    sha256_hex,
)


class Engine(Generation, pbg.EngineServicer):
    def __init__(self, device, requested, fell_back, fallback_reason, threads, memory_bytes=None, max_batch=64,
                 prefix_cache_bytes=None):
        self.device = device
        self.max_batch = max_batch
        self.memory_bytes = memory_bytes if memory_bytes is not None else memory.default_budget(device)
        # finished sequences' keys and values for their episodes' next turns: an eighth of the budget unless told
        self.prefix = PrefixCache(self.memory_bytes // 8 if prefix_cache_bytes is None else prefix_cache_bytes)
        self.requested = requested
        self.fell_back = fell_back
        self.fallback_reason = fallback_reason
        self.threads = threads
        self.started = time.time()
        self.cache = VersionCache(device)
        self.queue = DeviceQueue()
        self.updates = collections.OrderedDict()  # request_id -> (fingerprint, future)
        self.updates_lock = threading.Lock()
        self.calls = set()
        self.calls_lock = threading.Lock()
        self.counters = collections.Counter()
        self.generate_s = 0.0
        self.faults = faultsmod.parse_faults(None)
        self.micro_batch_bytes = DEFAULT_MICRO_BATCH_BYTES
        self.checkpoint_layers = False
        self.parallel = None  # parallel.Fsdp with several devices

    # -- plumbing
    def _run(self, context, fn):
        try:
            return fn()
        except Fault as f:
            fault = f
        except Exception as e:  # noqa: BLE001
            log("internal_error", error=repr(e), trace=traceback.format_exc())
            fault = Fault("INTERNAL", f"internal engine error: {e}")
        self._abort(context, fault)

    def _abort(self, context, f):
        context.set_trailing_metadata((("troupe-error-reason", f.reason),))
        context.abort(REASON_CODE[f.reason], f.message)

    def _device(self, fn, kind="run"):
        job = self.queue.submit(fn, kind)
        return job.future.result()

    def _check_memory(self, s):
        """A spec whose smallest run cannot fit in the memory budget is refused before anything is allocated."""
        try:
            memory.check_fits(s, self.memory_bytes)
        except memory.SpecTooLarge as e:
            raise invalid(str(e))

    def _hf_checkpoint(self, s, d):
        try:
            return hf.load_checkpoint(d, self.cache.runtime(s))
        except hf.HfSpecError as e:
            raise invalid(f"spec.checkpoint: {e}")

    # -- versions
    def InitModel(self, req, context):
        def go():
            key = check_key(req.model_key)
            s, ck = spec_from_wire(req.spec if req.HasField("spec") else None)
            self._check_memory(s)
            # read before the model exists here: a bad directory changes nothing
            pretrained = (self._hf_checkpoint(s, ck[0]) if hf.is_hf(s) else load_checkpoint(ck)) if ck else None

            def work(job):
                m = self.cache.ensure_model(key, s)
                if pretrained is not None:
                    theta = pretrained
                elif "lora" in s:
                    theta = init_adapter(s, int(req.seed))
                else:
                    theta = self.cache.seeded(s, int(req.seed))

                def z():
                    return torch.zeros(theta.numel())

                return info_of(m, self.cache.put(m, 0, theta.to(self.device), z().to(self.device), z().to(self.device), 0))
            return self._device(work)
        return self._run(context, go)

    def _load(self, req, weights=None, optim=None):
        key = check_key(req.model_key)
        number = check_version(req.version)
        s = spec_from_wire(req.spec if req.HasField("spec") else None)[0]
        self._check_memory(s)
        if req.HasField("weights_ref") and req.weights_ref.uri:
            weights = read_reference(req.weights_ref, "weights_ref")
        elif weights is None:
            weights = req.weights
        if req.HasField("optimizer_state_ref") and req.optimizer_state_ref.uri:
            optim = read_reference(req.optimizer_state_ref, "optimizer_state_ref")
        elif optim is None:
            optim = req.optimizer_state
        if req.weights_sha256 and sha256_hex(weights) != req.weights_sha256.lower():
            raise invalid(f"weights_sha256: the weights bytes hash to {sha256_hex(weights)}, not {req.weights_sha256}")
        P = specmod.adapter_layout(s)[1] if "lora" in s else s["params"] if hf.is_hf(s) else specmod.param_layout(s)[1]
        theta = decode_weights(weights, P)
        step, m, v = decode_optimizer(optim, P)

        def work(job):
            entry = self.cache.ensure_model(key, s)
            return info_of(entry, self.cache.put(entry, number, theta.to(self.device), m.to(self.device), v.to(self.device), step))
        return self._device(work)

    def LoadVersion(self, req, context):
        return self._run(context, lambda: self._load(req))

    def LoadVersionChunks(self, request_iterator, context):
        def go():
            header = None
            w, o = [], []
            for i, c in enumerate(request_iterator):
                if i == 0:
                    if not c.HasField("header"):
                        raise invalid("header: the first LoadVersionChunk must carry the request header")
                    header = c.header
                w.append(c.weights)
                o.append(c.optimizer_state)
            if header is None:
                raise invalid("header: the first LoadVersionChunk must carry the request header")
            return self._load(header, header.weights + b"".join(w), header.optimizer_state + b"".join(o))
        return self._run(context, go)

    def _export(self, req):
        m, v = self.cache.version(check_key(req.model_key), check_version(req.version))
        return m, v, encode_weights(v.theta), encode_optimizer(v.step, v.m, v.v)

    def ExportVersion(self, req, context):
        def go():
            m, v, w, o = self._export(req)
            if not req.destination_uri:
                return pb.ExportVersionResponse(info=info_of(m, v), weights=w, optimizer_state=o)
            try:
                d = path_of_uri(req.destination_uri, "destination_uri")
            except ValueError as e:
                raise Fault("REFERENCE_UNREADABLE", str(e))
            try:
                os.makedirs(d, exist_ok=True)  # the proto: created if missing
            except OSError as e:
                raise Fault("REFERENCE_UNREADABLE", f"destination_uri: cannot create {d} ({e.strerror})")
            if not os.path.isdir(d) or not os.access(d, os.W_OK):
                raise Fault("REFERENCE_UNREADABLE", f"destination_uri: {d} is not a directory this engine can write")
            refs = []
            for data, suffix in ((w, "weights"), (o, "optim")):
                sha = sha256_hex(data)
                name = os.path.join(d, f"{sha}.{suffix}")
                tmp = None
                try:
                    fd, tmp = tempfile.mkstemp(prefix=f".{sha[:16]}.", suffix=".tmp", dir=d)
                    with os.fdopen(fd, "wb") as f:
                        f.write(data)
                        f.flush()
                        os.fsync(f.fileno())
                    os.chmod(tmp, 0o644)
                    os.rename(tmp, name)  # complete before it is named
                except OSError as e:
                    if tmp and os.path.exists(tmp):
                        os.unlink(tmp)
                    raise Fault("REFERENCE_UNREADABLE", f"destination_uri: cannot write {name} ({e.strerror})")
                refs.append(pb.BlobReference(uri="file://" + urllib.parse.quote(name), size=len(data), sha256=sha))
            return pb.ExportVersionResponse(info=info_of(m, v), weights_ref=refs[0], optimizer_state_ref=refs[1])
        return self._run(context, go)

    def ExportVersionChunks(self, req, context):
        try:
            if req.destination_uri:
                raise invalid("destination_uri: export by reference is for the unary ExportVersion only")
            m, v, w, o = self._export(req)
        except Fault as f:
            self._abort(context, f)
        first = True
        for at in range(0, max(len(w), 1), CHUNK_BYTES):
            yield pb.ExportVersionChunk(info=info_of(m, v) if first else None, weights=w[at:at + CHUNK_BYTES])
            first = False
        for at in range(0, len(o), CHUNK_BYTES):
            yield pb.ExportVersionChunk(optimizer_state=o[at:at + CHUNK_BYTES])

    def _batch_version(self, req):
        """The model and version a Generate or Score request names, and that it has sequences."""
        key = check_key(req.model_key)
        number = check_version(req.version)
        if len(req.sequences) == 0:
            raise invalid("sequences: empty batch (send at least one sequence)")
        return self.cache.version(key, number)

    def Generate(self, req, context):
        def go():
            m, v = self._batch_version(req)
            s = m.spec
            shared = sampling_of(req.sampling, s, "sampling") if req.HasField("sampling") else None
            rows = []
            for i, q in enumerate(req.sequences):
                own = sampling_of(q.sampling, s, f"sequences[{i}].sampling") if q.HasField("sampling") else shared
                if own is None:
                    raise invalid(f"sampling: required (at least max_tokens), or sequences[{i}].sampling")
                ctx = token_ids(q.context, s["vocabSize"], f"sequences[{i}].context")
                sequence_issue(s, f"sequences[{i}]", len(ctx), len(ctx) + own["max_tokens"])
                rows.append((ctx, int(q.seed), own))
            call = GenerateCall(m.key, req.request_id, rows, m.model, v.theta, (specmod.spec_key(s), v.weights_sha256))

            def work(job):
                t0 = time.monotonic()
                calls = [job.call] + [j.call for j in job.merged]
                model = calls[0].model
                if isinstance(model, LoraModel):  # adapters over one base: each call's rows with its φ, unmerged
                    phis, index = [], {}
                    for c in calls:
                        c.adapter = index.setdefault(id(c.theta), len(phis))
                        if c.adapter == len(phis):
                            phis.append(c.theta)
                    W = model.adapters(phis)
                    if len(phis) > 1:
                        self.counters["mixed_adapter_runs"] += 1
                else:
                    W = model.weights(calls[0].theta, inference=True)
                results = self._generate_batch(model, W, calls)
                for j, out in zip(job.merged, results[1:]):
                    if not j.future.done():
                        j.future.set_result(out)
                self.generate_s += time.monotonic() - t0
                self.counters["generate_batches"] += 1
                self.counters["generate_rows"] += sum(c.n for c in calls)
                self.counters["generate_requests"] += len(calls)
                self.counters["tokens_generated"] += sum(len(r.tokens) for out in results for r in out)
                return results[0]

            with self.calls_lock:
                # a LoRA version shares runs with every adapter of its spec over the same base θ (one tensor per base,
                # VersionCache.shared_base, alive while these jobs hold it), other versions with their own calls only
                merge = ("lora", specmod.spec_key(s), id(m.model.base)) if isinstance(m.model, LoraModel) else (m.key, v.number, id(m))
                call.job = self.queue.submit(work, "generate", merge_key=merge)
                call.job.call = call
                self.calls.add(call)
            try:
                seqs = call.job.future.result()
            finally:
                with self.calls_lock:
                    self.calls.discard(call)
            for r in seqs:
                r.version = v.number
            return pb.GenerateResponse(version=v.number, sequences=seqs)
        return self._run(context, go)

    def Abort(self, req, context):
        def go():
            ids = set(req.request_ids)
            n = 0
            with self.calls_lock:
                for c in list(self.calls):
                    if req.model_key and c.model_key != req.model_key:
                        continue
                    if ids and c.request_id not in ids:
                        continue
                    if c.job.future.done() or c.aborted.is_set():  # returned already, or aborted by an earlier Abort
                        continue
                    c.aborted.set()
                    n += 1
                    if not c.job.started:  # still queued: comes back now, every sequence ABORTED with no tokens
                        res = [pb.GeneratedSequence(stop_reason=pb.ABORTED) for _ in range(c.n)]
                        with self.queue.cv:
                            if not c.job.started:
                                c.job.future.set_result(res)
            return pb.AbortResponse(aborted_requests=n)
        return self._run(context, go)

    def Score(self, req, context):
        def go():
            m, v = self._batch_version(req)
            s = m.spec
            seqs = []
            for i, q in enumerate(req.sequences):
                ctx = token_ids(q.context, s["vocabSize"], f"sequences[{i}].context")
                toks = token_ids(q.tokens, s["vocabSize"], f"sequences[{i}].tokens")
                sequence_issue(s, f"sequences[{i}]", len(ctx), len(ctx) + len(toks))
                seqs.append((ctx, toks))
            theta = v.theta

            def work(job):
                W = m.model.weights(theta, inference=True)
                out = [pb.ScoredSequence(logprobs=lp, entropy=ent) for lp, ent in self._score_many(m.model, W, seqs)]
                self.counters["score_runs"] += 1
                return out
            return pb.ScoreResponse(version=v.number, sequences=self._device(work))
        return self._run(context, go)

    # -- update
    def _start_update(self, req, arrived, progress):
        """(future, replayed) of an update; raises Fault for requests that fail validation."""
        key = check_key(req.model_key)
        base = check_version(req.base_version, "base_version")
        rid = req.request_id
        if not rid:
            raise invalid("request_id: required (the idempotency key of this update)")
        if len(rid) > REQUEST_ID_LIMIT:
            raise invalid(f"request_id: longer than {REQUEST_ID_LIMIT} characters")
        fp_req = pb.UpdateRequest()
        fp_req.CopyFrom(req)
        fp_req.request_id = ""
        fingerprint = hashlib.sha256(fp_req.SerializeToString(deterministic=True)).hexdigest()
        with self.updates_lock:
            prev = self.updates.get(rid)
            if prev is not None:
                if prev[0] != fingerprint:
                    raise Fault("REQUEST_ID_REUSED", f'request_id "{rid}" was already used for a different update request')
                return prev[1], True
            m, _ = self.cache.version(key, base)
            s = m.spec
            if len(req.samples) == 0:
                raise invalid("samples: empty batch (send at least one sample)")
            samples = []
            trained = 0
            for i, x in enumerate(req.samples):
                f = f"samples[{i}]"
                toks = token_ids(x.tokens, s["vocabSize"], f"{f}.tokens")
                n = len(toks)
                mask = finite_list(x.loss_mask, n, f"{f}.loss_mask")
                for t, mm in enumerate(mask):
                    if mm not in (0, 1):
                        raise invalid(f"{f}.loss_mask[{t}]: must be 0 or 1, got {mm}")
                    trained += mm
                ctx = token_ids(x.context, s["vocabSize"], f"{f}.context")
                sequence_issue(s, f, len(ctx), len(ctx) + n)
                samples.append({
                    "context": ctx, "tokens": toks, "loss_mask": mask,
                    "advantages": finite_list(x.advantages, n, f"{f}.advantages"),
                    "old_logprobs": finite_list(x.old_logprobs, n, f"{f}.old_logprobs"),
                    "loss_weights": finite_list(x.loss_weights, n, f"{f}.loss_weights", non_negative=True),
                    "ref_logprobs": [] if len(x.ref_logprobs) == 0 else finite_list(x.ref_logprobs, n, f"{f}.ref_logprobs"),
                })
            if trained == 0:
                raise invalid("samples: no trained tokens (every loss_mask is 0)")
            st = settings_of(req.settings if req.HasField("settings") else None)
            self._check_base(m, base, req.allow_stale_base)

            def work(job):
                t0 = time.monotonic()
                mm, v = self.cache.version(key, base)
                self._check_base(mm, base, req.allow_stale_base)
                progress["phase"] = "scoring"
                W = mm.model.weights(v.theta, inference=True)
                gaps = []
                for x, (lp, _) in zip(samples, self._score_many(mm.model, W, [(x["context"], x["tokens"]) for x in samples])):
                    gaps += [abs(x["old_logprobs"][t] - lp[t]) for t in range(len(lp)) if x["loss_mask"][t] == 1]
                progress["phase"] = "training"

                def on_step(k):
                    progress["inner_step"] = k
                    self.queue.progress()
                try:
                    theta, mo, ve, step, steps, ntok = run_update(mm.model, v.theta, v.m, v.v, v.step, samples, st, on_step,
                                                                  # a LoRA update runs here alone: FSDP2 shards full-fine-tuning models
                                                                  self.micro_batch_bytes, self.checkpoint_layers, None if "lora" in mm.spec else self.parallel)
                except NonFiniteUpdate as e:
                    raise Fault(
                        "NON_FINITE_UPDATE",
                        f'update of "{key}" from version {base} produced non-finite values at {e} '
                        f"(loss={js_float(e.loss)}, grad_norm={js_float(e.grad_norm)}); nothing was committed",
                    )
                finally:
                    self.counters["update_runs"] += 1
                if self.faults.hold_update(rid):
                    log("fault_hold_update", request_id=rid, seconds=faultsmod.HOLD_UPDATE_S)
                    time.sleep(faultsmod.HOLD_UPDATE_S)
                with self.cache.lock:
                    nv = self.cache.put(mm, mm.latest + 1, theta, mo, ve, step)
                self.counters["tokens_trained"] += ntok
                metrics = [pb.UpdateMetrics(**x) for x in steps]
                mean = {k: sum(x[k] for x in steps) / len(steps) for k in steps[0]}
                return pb.UpdateResponse(
                    info=info_of(mm, nv), base_version=base, metrics=pb.UpdateMetrics(**mean), step_metrics=metrics,
                    tokens=ntok, samples=len(samples), replayed=False, duration_ms=(time.monotonic() - t0) * 1000,
                    logprob_gap_mean=(sum(gaps) / len(gaps)) if gaps else 0.0, logprob_gap_max=max(gaps) if gaps else 0.0)

            job = self.queue.submit(work, "update")
            progress["job"] = job
            self.updates[rid] = (fingerprint, job.future)
            while len(self.updates) > MAX_REMEMBERED_UPDATES:
                self.updates.popitem(last=False)

            def forget(fut):
                if fut.exception() is not None:
                    with self.updates_lock:
                        if self.updates.get(rid, (None, None))[1] is fut:
                            del self.updates[rid]
            job.future.add_done_callback(forget)
            return job.future, False

    def _check_base(self, m, base, allow_stale):
        if base < m.latest and not allow_stale:
            raise Fault("STALE_BASE", f'base_version {base} of "{m.key}" is not the latest version ({m.latest}); set allow_stale_base to train from it anyway')

    def _result(self, fut, replayed):
        res = fut.result()
        if replayed:
            out = pb.UpdateResponse()
            out.CopyFrom(res)
            out.replayed = True
            return out
        return res

    def Update(self, req, context):
        def go():
            fut, replayed = self._start_update(req, time.monotonic(), {"phase": "queued", "inner_step": 0})
            return self._result(fut, replayed)
        return self._run(context, go)

    def UpdateStream(self, req, context):
        arrived = time.monotonic()
        progress = {"phase": "queued", "inner_step": 0}
        inner = req.settings.inner_steps if req.HasField("settings") and req.settings.HasField("inner_steps") else 1

        def event():
            job = progress.get("job")
            pos = self.queue.position(job) if job is not None and not job.started else 0
            return pb.UpdateEvent(progress=pb.UpdateProgress(
                phase=progress["phase"] if job is None or job.started else "queued", queue_position=pos,
                inner_step=progress["inner_step"], inner_steps=inner, micro_batches=1, elapsed_ms=(time.monotonic() - arrived) * 1000))
        try:
            fut, replayed = self._start_update(req, arrived, progress)
        except Fault as f:
            self._abort(context, f)
        yield event()
        while True:
            try:
                fut.result(timeout=PROGRESS_EVERY_S)
                break
            except futures.TimeoutError:
                yield event()
            except Exception:  # noqa: BLE001
                break
        try:
            res = self._result(fut, replayed)
        except Fault as f:
            self._abort(context, f)
        except Exception as e:  # noqa: BLE001
            log("internal_error", error=repr(e), trace=traceback.format_exc())
            self._abort(context, Fault("INTERNAL", f"internal engine error: {e}"))
        yield pb.UpdateEvent(result=res)

    # -- health / stats
    def capabilities(self):
        return pb.Capabilities(
            protocol_version=PROTOCOL_VERSION, engine=ENGINE_NAME, rpcs=RPCS,
            families=["transformer"], deterministic=True, score_matches_generate="bit-identical", score_tolerance=0.0,
            max_batch=self.max_batch, weights_by_reference=True, lora=True)

    def Health(self, req, context):
        return pb.HealthResponse(
            status="SERVING", device=self.device, requested_device=self.requested, fell_back=self.fell_back,
            fallback_reason=self.fallback_reason, uptime_s=time.time() - self.started, device_runs=self.queue.completed,
            queue_depth=self.queue.depth, capabilities=self.capabilities())

    def Stats(self, req, context):
        c = self.counters
        with self.cache.lock:
            models = [pb.ModelStats(model_key=m.key, spec=spec_to_wire(m.spec), versions=sorted(m.versions), latest_version=max(m.latest, 0))
                      for m in self.cache.models.values()]
        b = c["generate_batches"]
        return pb.StatsResponse(
            device=self.device, requested_device=self.requested, fell_back=self.fell_back, fallback_reason=self.fallback_reason,
            models=models, queue_depth=self.queue.depth,
            tokens_per_second=(c["tokens_generated"] / self.generate_s) if self.generate_s > 0 else 0.0,
            tokens_generated=c["tokens_generated"], generate_batches=b,
            mean_batch_size=(c["generate_rows"] / b) if b else 0.0, mean_requests_per_batch=(c["generate_requests"] / b) if b else 0.0,
            score_runs=c["score_runs"], update_runs=c["update_runs"], intra_op_threads=self.threads, batch_window_ms=0.0, max_batch=self.max_batch,
            batch_invariance=BATCH_INVARIANCE,
            uptime_s=time.time() - self.started, mixed_adapter_runs=c["mixed_adapter_runs"],
            prefill_rows_shared=c["prefill_rows_shared"], prefix_rows_reused=c["prefix_rows_reused"],
            prefix_cache_bytes=self.prefix.bytes)
