"""Test-only fault injection, off unless the engine process has

    TROUPE_ENGINE_FAULTS=hold-update:<pattern>[,hold-update:<pattern>...]

(the variable the built-in engine reads, engines/onnx/faults.ts; the pool worker passes its
environment to the engine it spawns). A pattern matches an Update whose request id contains it
(with a trailing `$`: ends with it); training updates have ids `<run>/<model>/step<N>`.

`hold-update:<pattern>`: the Update computes its new weights, then holds them HOLD_UPDATE_S seconds
before committing and answering, every attempt. A test SIGKILLs the engine inside that window, so the
kill lands mid-update (the weights computed, nothing committed or answered) on every machine. The
update itself is the real one; only its answer is late.
"""
import re

KINDS = ("hold-update",)
HOLD_UPDATE_S = 4.0


class Faults:
    def __init__(self, patterns):
        self.patterns = patterns  # [(kind, text, at_end)]
        self.armed = [f"{k}:{t}{'$' if e else ''}" for k, t, e in patterns]

    def _matches(self, kind, request_id):
        return any(k == kind and (request_id.endswith(t) if e else t in request_id) for k, t, e in self.patterns)

    def hold_update(self, request_id):
        return self._matches("hold-update", request_id)


def parse_faults(spec):
    """Faults of TROUPE_ENGINE_FAULTS; ValueError naming the entry this engine does not know."""
    patterns = []
    for entry in [s.strip() for s in (spec or "").split(",") if s.strip()]:
        m = re.match(r"^([a-z-]+):(.+)$", entry)
        if not m or m.group(1) not in KINDS:
            raise ValueError(f'TROUPE_ENGINE_FAULTS: unknown fault "{entry}" for the PyTorch engine '
                             f"(known: {', '.join(k + ':<request-id pattern>' for k in KINDS)})")
        text = m.group(2)
        patterns.append((m.group(1), text[:-1] if text.endswith("$") else text, text.endswith("$")))
    return Faults(patterns)
