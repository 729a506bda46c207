/**
 * The tiny-lm forward pass as ONNX nodes. Every graph (generate, score, update)
 * calls this one function, so a token's log-prob is computed by the same op
 * sequence everywhere (Score reproduces Generate's log-probs bit for bit, and
 * the first inner update step sees ratio = 1 exactly).
 */
import { type Graph, int } from '../graph/builder';
import { paramLayout, type TinyLmSpec } from '../../families/tiny-lm/spec';

export interface Params {
  emb: string;
  w: string[];
  b: string[];
  wo: string;
  bo: string;
}

/** Cut the flat θ vector into named, shaped parameter tensors (Slice + Reshape). */
export function sliceParams(g: Graph, spec: TinyLmSpec, theta: string): Params {
  const layout = paramLayout(spec);
  const byName = new Map<string, string>();
  const axis0 = g.constant('int64', [0]);
  for (const slot of layout.slots) {
    const flat = g.op('Slice', [theta, g.constant('int64', [slot.offset]), g.constant('int64', [slot.offset + slot.size]), axis0]);
    byName.set(slot.name, g.op('Reshape', [flat, g.constant('int64', slot.shape)], {}, slot.name));
  }
  const get = (n: string) => byName.get(n)!;
  return {
    emb: get('emb'),
    w: Array.from({ length: spec.layers }, (_, l) => get(`w${l}`)),
    b: Array.from({ length: spec.layers }, (_, l) => get(`b${l}`)),
    wo: get('wo'),
    bo: get('bo'),
  };
}

export interface ForwardValues {
  /** concatenated window embeddings [N, W·E] */
  x: string;
  /** activations after each hidden layer [N, H] (h[l] feeds layer l+1) */
  h: string[];
  /** act(pre) of each layer [N, H] (needed for act' in the backward pass) */
  a: string[];
  logits: string;
  /** log-softmax over the vocabulary [N, V], the policy at temperature 1 */
  logp: string;
}

export function activation(g: Graph, spec: TinyLmSpec, pre: string): string {
  return g.op(spec.activation === 'tanh' ? 'Tanh' : 'Relu', [pre]);
}

/** windows: int64 [N, W] token ids (pad id = V). Works for float32 and float64 θ alike. */
export function forward(g: Graph, spec: TinyLmSpec, p: Params, windows: string): ForwardValues {
  const W = spec.contextWindow;
  const E = spec.embedDim;
  const gathered = g.op('Gather', [p.emb, windows], { axis: int(0) }); // [N, W, E]
  const x = g.op('Reshape', [gathered, g.constant('int64', [-1, W * E])], {}, 'x');
  const h: string[] = [];
  const a: string[] = [];
  let cur = x;
  for (let l = 0; l < spec.layers; l++) {
    const pre = g.op('Add', [g.op('MatMul', [cur, p.w[l]!]), p.b[l]!]);
    const act = activation(g, spec, pre);
    a.push(act);
    cur = l === 0 ? act : g.op('Add', [cur, act]);
    h.push(cur);
  }
  const logits = g.op('Add', [g.op('MatMul', [cur, p.wo]), p.bo], {}, 'logits');
  const logp = g.op('LogSoftmax', [logits], { axis: int(-1) }, 'logp');
  return { x, h, a, logits, logp };
}
