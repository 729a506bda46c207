/**
 * The benchmarks' timing loop: median wall and CPU time of repeated runs after
 * one warm-up, and number formatting. CPU time is this process's (user +
 * system): on a shared machine it is the steadier of the two for work that
 * runs on one thread in this process, and no use for work done elsewhere
 * (an engine child, a gRPC peer).
 */
import * as fs from 'node:fs';

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

/** A `kB` field of /proc/<pid>/status in bytes (VmHWM: peak RSS; VmRSS: RSS now); 0 when absent. */
export function procStatusBytes(pid: number | string, field: 'VmHWM' | 'VmRSS'): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : 0;
}

/** CPU ms (user + system) process `pid` has used (Linux /proc): an engine child's, steadier than wall time on a loaded machine. */
export function processCpuMs(pid: number): number {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return ((Number(f[11]) + Number(f[12])) * 1000) / 100; // utime, stime in clock ticks (USER_HZ 100)
}

/** Median wall ms and median CPU ms of process `pid` (an engine serving the calls) over `reps` runs after one warm-up. */
export async function timeProcess(pid: number, reps: number, fn: () => Promise<unknown>): Promise<Timing> {
  await fn();
  const wall: number[] = [];
  const cpu: number[] = [];
  for (let i = 0; i < reps; i++) {
    const c0 = processCpuMs(pid);
    const t0 = performance.now();
    await fn();
    wall.push(performance.now() - t0);
    cpu.push(processCpuMs(pid) - c0);
  }
  return { wall: median(wall), cpu: median(cpu) };
}

export function fmt(n: number, digits = 0): string {
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
}
