/**
 * A small typed helper for writing ONNX graphs by hand with `onnx-proto`.
 *
 * Every value is a string name; `op()` appends a node and returns its output
 * name(s). Constants are emitted as `Constant` nodes so the same helper works in
 * the main graph and in `Loop` bodies (which may also read outer-scope names).
 */
import { onnx } from 'onnx-proto';

export type DType = 'float32' | 'float64' | 'int64' | 'int32' | 'bool';
export type FloatType = 'float32' | 'float64';
export type Dim = number | string;

const DTYPE_CODE: Record<DType, number> = {
  float32: onnx.TensorProto.DataType.FLOAT,
  float64: onnx.TensorProto.DataType.DOUBLE,
  int64: onnx.TensorProto.DataType.INT64,
  int32: onnx.TensorProto.DataType.INT32,
  bool: onnx.TensorProto.DataType.BOOL,
};

export function dtypeCode(t: DType): number {
  return DTYPE_CODE[t];
}

/** Attribute values carry their ONNX type explicitly (onnx-proto requires it). */
export type Attr =
  | { kind: 'int'; value: number }
  | { kind: 'float'; value: number }
  | { kind: 'ints'; value: number[] }
  | { kind: 'string'; value: string }
  | { kind: 'graph'; value: onnx.IGraphProto };

export const int = (value: number): Attr => ({ kind: 'int', value });
export const float = (value: number): Attr => ({ kind: 'float', value });
export const ints = (value: number[]): Attr => ({ kind: 'ints', value });
export const str = (value: string): Attr => ({ kind: 'string', value });
export const graphAttr = (value: onnx.IGraphProto): Attr => ({ kind: 'graph', value });

function encodeAttr(name: string, a: Attr): onnx.IAttributeProto {
  const T = onnx.AttributeProto.AttributeType;
  switch (a.kind) {
    case 'int':
      return { name, type: T.INT, i: a.value };
    case 'float':
      return { name, type: T.FLOAT, f: a.value };
    case 'ints':
      return { name, type: T.INTS, ints: a.value };
    case 'string':
      return { name, type: T.STRING, s: new TextEncoder().encode(a.value) };
    case 'graph':
      return { name, type: T.GRAPH, g: a.value };
  }
}

function valueInfo(name: string, dtype: DType, shape?: Dim[]): onnx.IValueInfoProto {
  const tensorType: onnx.TypeProto.ITensor = { elemType: DTYPE_CODE[dtype] };
  if (shape) {
    tensorType.shape = {
      dim: shape.map((d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d })),
    };
  }
  return { name, type: { tensorType } };
}

/** Raw little-endian bytes of a typed constant (used for Constant node tensors). */
function tensorProto(dtype: DType, dims: number[], values: ArrayLike<number>): onnx.ITensorProto {
  const n = values.length;
  let raw: Uint8Array;
  switch (dtype) {
    case 'float32':
      raw = new Uint8Array(Float32Array.from(values).buffer);
      break;
    case 'float64':
      raw = new Uint8Array(Float64Array.from(values).buffer);
      break;
    case 'int64': {
      const a = new BigInt64Array(n);
      for (let i = 0; i < n; i++) a[i] = BigInt(values[i]!);
      raw = new Uint8Array(a.buffer);
      break;
    }
    case 'int32':
      raw = new Uint8Array(Int32Array.from(values).buffer);
      break;
    case 'bool':
      raw = Uint8Array.from(values, (v) => (v ? 1 : 0));
      break;
  }
  return { dims, dataType: DTYPE_CODE[dtype], rawData: raw };
}

/** Shared name counter so nested graphs never collide with outer-scope names. */
class NameSource {
  private n = 0;
  next(hint: string): string {
    return `${hint}_${this.n++}`;
  }
}

/** N output names: a tuple when N is a literal, else string[]. */
export type Outputs<N extends number, R extends string[] = []> = number extends N ? string[] : R['length'] extends N ? R : Outputs<N, [...R, string]>;

export class Graph {
  readonly nodes: onnx.INodeProto[] = [];
  readonly inputs: onnx.IValueInfoProto[] = [];
  readonly outputs: onnx.IValueInfoProto[] = [];
  private readonly names: NameSource;

  constructor(
    readonly name: string,
    parent?: Graph,
  ) {
    this.names = parent ? parent.names : new NameSource();
  }

  /** A nested graph (Loop/If body) sharing this graph's name space. */
  subgraph(name: string): Graph {
    return new Graph(name, this);
  }

  fresh(hint: string): string {
    return this.names.next(hint);
  }

  input(name: string, dtype: DType, shape?: Dim[]): string {
    this.inputs.push(valueInfo(name, dtype, shape));
    return name;
  }

  /** Declare `value` as a graph output named `name` (adds an Identity if renamed). */
  output(value: string, name: string, dtype: DType, shape?: Dim[]): string {
    if (value !== name) this.nodes.push({ opType: 'Identity', input: [value], output: [name], name: this.fresh('out') });
    this.outputs.push(valueInfo(name, dtype, shape));
    return name;
  }

  op(opType: string, inputs: string[], attrs: Record<string, Attr> = {}, hint?: string): string {
    return this.opN(opType, inputs, 1, attrs, hint)[0]!;
  }

  /** A node with `nOut` outputs; a literal `nOut` types the result as a tuple of that length. */
  opN<N extends number>(opType: string, inputs: string[], nOut: N, attrs: Record<string, Attr> = {}, hint?: string): Outputs<N> {
    const outs = Array.from({ length: nOut }, () => this.fresh(hint ?? opType.toLowerCase())) as Outputs<N>;
    this.nodes.push({
      opType,
      input: inputs,
      output: outs,
      name: this.fresh(`n_${opType}`),
      attribute: Object.entries(attrs).map(([k, v]) => encodeAttr(k, v)),
    });
    return outs;
  }

  /** Constant tensor; a scalar when `dims` is [] (the default for one value). */
  constant(dtype: DType, values: ArrayLike<number> | number, dims?: number[]): string {
    const vals = typeof values === 'number' ? [values] : values;
    const d = dims ?? (typeof values === 'number' ? [] : [vals.length]);
    const out = this.fresh('const');
    this.nodes.push({
      opType: 'Constant',
      input: [],
      output: [out],
      name: this.fresh('n_Constant'),
      attribute: [{ name: 'value', type: onnx.AttributeProto.AttributeType.TENSOR, t: tensorProto(dtype, d, vals) }],
    });
    return out;
  }

  toProto(): onnx.IGraphProto {
    return { name: this.name, node: this.nodes, input: this.inputs, output: this.outputs };
  }
}

export const OPSET = 18;

/**
 * The graph without the nodes none of its outputs depends on, in Loop/If bodies too (each against its own
 * outputs; a body's reads of outer names count as reads of the node that holds it). ORT runs every node it is
 * given, so a builder that takes part of a shared construction (a LoRA update wants the gradient of a few
 * matrices, not the chain below the first layer) drops the rest here.
 */
export function pruneUnused(graph: onnx.IGraphProto): onnx.IGraphProto {
  return pruned(graph).graph;
}

/** The pruned graph and the outer-scope names it reads. */
function pruned(graph: onnx.IGraphProto): { graph: onnx.IGraphProto; reads: Set<string> } {
  const nodes = (graph.node ?? []).map((n) => {
    const reads = new Set((n.input ?? []).filter((x) => x !== ''));
    const attribute = (n.attribute ?? []).map((a) => {
      if (!a.g) return a;
      const sub = pruned(a.g);
      sub.reads.forEach((x) => reads.add(x));
      return { ...a, g: sub.graph };
    });
    return { node: { ...n, attribute }, reads };
  });
  const needed = new Set((graph.output ?? []).map((o) => o.name!));
  const kept: onnx.INodeProto[] = [];
  for (let i = nodes.length - 1; i >= 0; i--) {
    const { node, reads } = nodes[i]!;
    if (!(node.output ?? []).some((x) => needed.has(x))) continue;
    kept.push(node);
    reads.forEach((x) => needed.add(x));
  }
  kept.reverse();
  const defined = new Set([
    ...(graph.input ?? []).map((x) => x.name!),
    ...(graph.initializer ?? []).map((x) => x.name!),
    ...kept.flatMap((n) => n.output ?? []),
  ]);
  return { graph: { ...graph, node: kept }, reads: new Set([...needed].filter((x) => !defined.has(x))) };
}

/** Serialize a main graph into a ModelProto (IR 8, default domain at OPSET); `prune`: drop unused nodes (pruneUnused). */
export function encodeModel(g: Graph, docString = '', opts: { prune?: boolean } = {}): Uint8Array {
  const model: onnx.IModelProto = {
    irVersion: 8,
    producerName: 'troupe-gpu-workers',
    docString,
    opsetImport: [{ domain: '', version: OPSET }],
    graph: opts.prune ? pruneUnused(g.toProto()) : g.toProto(),
  };
  return onnx.ModelProto.encode(onnx.ModelProto.create(model)).finish();
}
