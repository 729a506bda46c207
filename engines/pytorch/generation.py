"""Generate and Score over cache slots (the Engine's side of them): every row through the model's row steps
(hf.HfTransformer.run_rows), Generate's sequences continuously batched into the slots, each drawing its next token
from its row's logits with its own Philox noise, so Generate's log-probs are Score's."""
import bisect
import collections
import threading

import numpy as np
import torch

import engine_pb2 as pb
import memory
import philox
from steps import LORA
from sampling import sample_rows


class GenerateCall:
    def __init__(self, model_key, request_id, rows, model=None, theta=None, ident=None):
        self.model_key = model_key
        self.ident = ident  # the version's identity in the prefix cache: (spec key, weights sha256)
        self.request_id = request_id
        self.aborted = threading.Event()
        self.rows = rows  # [(context, seed, sampling)]
        self.n = len(rows)
        self.job = None
        self.model, self.theta = model, theta  # the version's runtime (a LoraModel for an adapter) and θ (φ)
        self.adapter = 0  # in a LoRA run, the index of its φ among the run's adapters


class Generation:
    """The Engine's Generate and Score runs (a mixin: it reads the Engine's cache, queue, memory and counters)."""

    def _shape(self, model):
        """(cache slots, most rows a step) of a Score or Generate run (memory.run_slots, memory.step_rows)."""
        budget = self.memory_bytes - self.prefix.budget  # the prefix cache may fill its share beside a run
        slots = memory.run_slots(model.spec, budget, self.max_batch)
        return slots, memory.step_rows(model.spec, budget, slots)

    def _run_rows(self, model, W, cache, max_step, rows, on_rows):
        """run_rows over `rows` [(token, position, slot)] → on_rows(logits, log-softmax, first row, real rows) per
        step, both [step rows, V] (row-wise and element-wise ops on a whole step: a multiple of 16 rows, so an element's
        bits do not depend on how many rows are real)."""
        def on_block(logits, a, m):
            on_rows(logits, torch.log_softmax(logits, dim=-1), a, m)
            self.queue.progress()  # each step is a device run (the hang watchdog sees progress)
        with torch.no_grad():
            model.run_rows(W, cache, rows, on_block, max_step)

    def _score_many(self, model, W, items):
        """[(context, tokens)] → [(log π(tokens[t]), entropies)]: each sequence's rows 0..S-2 in a cache slot of its own,
        as many sequences at a time as there are slots, packed into run_rows steps (a row's bits do not depend on
        what runs beside it, and are those of Generate's row at the same position)."""
        R, max_step = self._shape(model)
        cache = None
        results = [([], []) for _ in items]
        todo = [i for i, (_, toks) in enumerate(items) if len(toks) > 0]
        for w in range(0, len(todo), R):
            wave = todo[w:w + R]
            if cache is None:
                cache = model.new_cache(R)
            else:  # no keys of an earlier sequence stay in a slot
                for k, v in cache:
                    k.zero_()
                    v.zero_()
            rows, targets = [], []
            for r, i in enumerate(wave):
                full = list(items[i][0]) + list(items[i][1])
                rows += [(t, p, r) for p, t in enumerate(full[:-1])]
                targets += full[1:]
            tgt = torch.tensor(targets, dtype=torch.long, device=self.device)
            lp = torch.zeros(len(rows), device=self.device)
            ent = torch.zeros(len(rows), device=self.device)

            def on_rows(logits, logp, a, m):
                lp[a:a + m] = logp[:m].gather(1, tgt[a:a + m, None])[:, 0]
                ent[a:a + m] = -(torch.exp(logp) * logp).sum(dim=-1)[:m]
            self._run_rows(model, W, cache, max_step, rows, on_rows)
            lp, ent = lp.cpu().tolist(), ent.cpu().tolist()
            at = 0
            for i in wave:
                C, T = len(items[i][0]), len(items[i][1])
                results[i] = (lp[at + C - 1:at + C - 1 + T], ent[at + C - 1:at + C - 1 + T])
                at += C + T - 1
        return results

    def _generate_batch(self, model, W, calls):
        """Every sequence of `calls` (one model version, or LoRA adapters over one base: W from LoraModel.adapters, each
        call's `adapter` its φ's index), continuously batched over the cache slots (max_batch, fewer
        when memory is short): each round runs, in run_rows steps, one row per running sequence (its last token)
        and the context rows of the sequences that take the free slots, then draws the next token of each of them from
        its row's logits (sampling.sample_rows, Philox noise per sequence and token). A row's bits do not depend on the
        other rows (nor on their adapters), so a sequence's tokens do not depend on what runs beside it, and its log-probs
        (the log-softmax of the rows that drew its tokens) are Score's bit for bit."""
        out = [[None] * c.n for c in calls]
        pending = collections.deque((c, i) for c in calls for i in range(c.n))
        R, max_step = self._shape(model)
        slots = [None] * R
        cache = None
        adapters = W.get(LORA)
        if adapters is not None:  # each cache slot's adapter: its sequence's call's
            adapters.slots = [0] * R

        def finish(r, reason):
            st = slots[r]
            if reason != pb.ABORTED:  # its rows' keys and values, for its episode's next turn
                n = len(st["ctx"]) + len(st["tokens"]) - 1  # the last token drawn has not run
                self.prefix.put(st["call"].ident, list(st["ctx"]) + st["tokens"][:-1], [(k[r, :, :n], v[r, :, :n]) for k, v in cache])
            out[calls.index(st["call"])][st["i"]] = pb.GeneratedSequence(tokens=st["tokens"], logprobs=st["lps"],
                                                                         sample_logprobs=st["slps"], stop_reason=reason)
            slots[r] = None

        with torch.no_grad():
            while True:
                for r, st in enumerate(slots):  # Abort: the running sequences stop after their current token
                    if st is not None and st["call"].aborted.is_set():
                        finish(r, pb.ABORTED)
                rows, draws = [], []  # draws: (row, slot) whose row's logits give the slot's next token
                for r, st in enumerate(slots):
                    if st is not None:
                        rows.append((st["tokens"][-1], len(st["ctx"]) + len(st["tokens"]) - 1, r))
                        draws.append((len(rows) - 1, r))
                fresh = []
                # A group's sequences share their context (one prompt, several seeds): its rows run once, in the
                # first slot that takes it; the others copy that slot's keys and values and draw from its last row's
                # logits (a row's bits do not depend on its slot, so they are the bits of their own prefill).
                prefilled, copies, restores = {}, [], []
                for r in range(R):
                    while slots[r] is None and pending:
                        c, i = pending.popleft()
                        if c.aborted.is_set():
                            out[calls.index(c)][i] = pb.GeneratedSequence(stop_reason=pb.ABORTED)
                            continue
                        ctx, seed, sp = c.rows[i]
                        if adapters is not None:
                            adapters.slots[r] = c.adapter
                        slots[r] = {"call": c, "i": i, "ctx": ctx, "sp": sp, "tokens": [], "slps": [], "lps": [],
                                    "u": philox.uniforms(seed, philox.STREAM_SAMPLING, sp["max_tokens"]).astype(np.float32)}
                        key = (c.adapter if adapters is not None else 0, tuple(ctx))
                        if key in prefilled:
                            src, last = prefilled[key]
                            copies.append((src, r, len(ctx)))
                            draws.append((last, r))
                        else:  # rows an earlier turn of its episode ran are copied from the prefix cache
                            entry, n = self.prefix.lookup(c.ident, ctx)
                            if entry is not None:
                                restores.append((entry, r, n))
                            rows += [(t, p, r) for p, t in enumerate(ctx) if p >= n]
                            draws.append((len(rows) - 1, r))
                            prefilled[key] = (r, len(rows) - 1)
                        fresh.append(r)
                self.counters["prefill_rows_shared"] += sum(n for _, _, n in copies)
                self.counters["prefix_rows_reused"] += sum(n for _, _, n in restores)
                if not rows:
                    break
                if cache is None:
                    cache = model.new_cache(R)
                elif fresh:  # no keys of an earlier sequence stay in a slot
                    idx = torch.tensor(fresh, device=self.device)
                    for k, v in cache:
                        k.index_fill_(0, idx, 0)
                        v.index_fill_(0, idx, 0)
                for entry, r, n in restores:  # before the run: its context's later rows attend to them
                    for (k, v), (ek, ev) in zip(cache, entry.kv):
                        k[r, :, :n] = ek[:, :n]
                        v[r, :, :n] = ev[:, :n]
                at = sorted({row for row, _ in draws})  # the rows whose logits some slot draws from
                logits = torch.zeros(len(at), model.spec["vocabSize"], device=self.device)
                logp = torch.zeros_like(logits)

                def on_rows(lg, lp, a, m):
                    n0, n1 = bisect.bisect_left(at, a), bisect.bisect_left(at, a + m)
                    if n0 == n1:  # a step of context rows only (a long context): no slot draws from it
                        return
                    idx = torch.tensor(at[n0:n1], dtype=torch.long, device=self.device) - a
                    logits[n0:n1], logp[n0:n1] = lg[idx], lp[idx]
                self._run_rows(model, W, cache, max_step, rows, on_rows)
                for src, dst, n in copies:
                    for k, v in cache:
                        k[dst, :, :n] = k[src, :, :n]
                        v[dst, :, :n] = v[src, :, :n]
                of = torch.tensor([bisect.bisect_left(at, row) for row, _ in draws], device=self.device)
                self._draw(logits[of], logp[of], [slots[r] for _, r in draws])
                for _, r in draws:
                    st, sp = slots[r], slots[r]["sp"]
                    if st["tokens"][-1] in sp["stop"]:
                        finish(r, pb.STOP_TOKEN)
                    elif len(st["tokens"]) >= sp["max_tokens"]:
                        finish(r, pb.MAX_TOKENS)
        return out

    def _draw(self, logits, logp, states):
        """Append the next token, its sample log-prob and its log-prob to each sequence state: sample_rows per setting."""
        groups = collections.defaultdict(list)
        for n, st in enumerate(states):
            sp = st["sp"]
            groups[(sp["temperature"], sp["top_k"], sp["top_p"])].append(n)
        for (temperature, top_k, top_p), ns in groups.items():
            idx = torch.tensor(ns, device=logits.device)
            u = torch.tensor([states[n]["u"][len(states[n]["tokens"])] for n in ns], dtype=torch.float32, device=logits.device)
            tok, slp = sample_rows(logits[idx], u, temperature, top_k, top_p)
            lp = logp[idx].gather(1, tok[:, None])[:, 0]
            for n, t, s, p in zip(ns, tok.cpu().tolist(), slp.cpu().tolist(), lp.cpu().tolist()):
                states[n]["tokens"].append(t)
                states[n]["slps"].append(s)
                states[n]["lps"].append(p)
