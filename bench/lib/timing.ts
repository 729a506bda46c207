/**
 * The benchmarks' timing loop: median wall and CPU time of repeated runs after
 * one warm-up, and number formatting. CPU time is this process's (user +
 * system): on a shared machine it is the steadier of the two for work that
 * runs on one thread in this process, and no use for work done elsewhere
 * (an engine child, a gRPC peer).
 */

export interface Timing {
  /** median wall time, ms */
  wall: number;
  /** median CPU time of this process, ms */
  cpu: number;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;

/** Median wall and CPU time (ms) of `reps` runs after one warm-up. */
export async function time(reps: number, fn: () => Promise<unknown>): Promise<Timing> {
  await fn();
  const wall: number[] = [];
  const cpu: number[] = [];
  for (let i = 0; i < reps; i++) {
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    await fn();
    wall.push(performance.now() - t0);
    const c = process.cpuUsage(c0);
    cpu.push((c.user + c.system) / 1000);
  }
  return { wall: median(wall), cpu: median(cpu) };
}

export function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}
