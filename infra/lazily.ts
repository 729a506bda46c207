/**
 * A value built on its first use. A workflow bundle's modules are evaluated afresh for every
 * workflow (the SDK's reused V8 context gives each its own module cache), and every durable
 * episode is a workflow: zod schemas built at import were a third of a workflow thread's CPU
 * (bench/orchestration.ts under --cpu-prof). Built lazily, a workflow that never validates
 * never builds them. (Sharing them through the bundler's preloadModules is not possible: the
 * SDK deep-freezes shared modules, and zod fills in schema fields on first use.)
 */
export function lazily<T>(build: () => T): () => T {
  let built: { value: T } | undefined;
  return () => (built ??= { value: build() }).value;
}
