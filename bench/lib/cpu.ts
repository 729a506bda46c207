/**
 * CPU seconds used by the processes of a benchmark, from /proc (Linux only;
 * elsewhere every reading is 0). Groups: this Node process (driver, Temporal
 * workers, the episode code, the Postgres client), the engine child, the
 * Temporal dev server (a descendant of this process), and the Postgres
 * backends serving our database (the server may be shared with other users;
 * its background writers are not counted).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';

const TICKS = 100; // USER_HZ on Linux

interface Proc {
  pid: number;
  ppid: number;
  comm: string;
  seconds: number;
}

function readProc(pid: number): Proc | undefined {
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const close = s.lastIndexOf(')');
    const comm = s.slice(s.indexOf('(') + 1, close);
    const f = s.slice(close + 2).split(' ');
    // fields after comm: state(0) ppid(1) ... utime(11) stime(12)
    return { pid, ppid: Number(f[1]), comm, seconds: (Number(f[11]) + Number(f[12])) / TICKS };
  } catch {
    return undefined;
  }
}

function allProcs(): Proc[] {
  let names: string[];
  try {
    names = fs.readdirSync('/proc');
  } catch {
    return [];
  }
  return names
    .filter((n) => /^\d+$/.test(n))
    .map((n) => readProc(Number(n)))
    .filter((p): p is Proc => p !== undefined);
}

export interface CpuSample {
  main: number;
  engine: number;
  temporal: number;
  postgres: number;
  /** the whole machine: busy seconds over all cores (from /proc/stat) */
  machine: number;
}

/** Busy CPU seconds of the whole machine, over all cores (from /proc/stat). */
export function machineBusy(): number {
  try {
    const line = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
    const v = line.split(/\s+/).slice(1).map(Number);
    // user nice system idle iowait irq softirq steal
    return (v[0]! + v[1]! + v[2]! + v[5]! + v[6]! + v[7]!) / TICKS;
  } catch {
    return 0;
  }
}

function cmdline(pid: number): string {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return '';
  }
}

/** CPU seconds (user + system) of every process now, by pid. */
export function processSeconds(): Map<number, { ppid: number; comm: string; seconds: number }> {
  return new Map(allProcs().map((p) => [p.pid, { ppid: p.ppid, comm: p.comm, seconds: p.seconds }]));
}

/** The command line of a process, arguments joined by spaces ('' once it is gone). */
export function commandLine(pid: number): string {
  return cmdline(pid).split('\0').join(' ');
}

export function cpuSample(enginePid: number | undefined, database: string): CpuSample {
  const procs = allProcs();
  const byPid = new Map(procs.map((p) => [p.pid, p]));
  const isDescendant = (p: Proc) => {
    for (let q: Proc | undefined = p, n = 0; q && n < 50; q = byPid.get(q.ppid), n++) if (q.ppid === process.pid) return true;
    return false;
  };
  const out: CpuSample = { main: byPid.get(process.pid)?.seconds ?? 0, engine: 0, temporal: 0, postgres: 0, machine: machineBusy() };
  for (const p of procs) {
    if (p.pid === enginePid) out.engine += p.seconds;
    else if (p.comm === 'postgres' && cmdline(p.pid).includes(` ${database} `)) out.postgres += p.seconds;
    else if (p.comm.startsWith('temporal') && isDescendant(p)) out.temporal += p.seconds;
  }
  return out;
}

export function cpuDelta(a: CpuSample, b: CpuSample): CpuSample {
  return {
    main: b.main - a.main,
    engine: b.engine - a.engine,
    temporal: b.temporal - a.temporal,
    postgres: b.postgres - a.postgres,
    machine: b.machine - a.machine,
  };
}

/** `node vX, N cores, load a b c`: the machine a bench's numbers came from, for its header line. */
export function machineLine(): string {
  return `node ${process.version}, ${os.cpus().length} cores, load ${os
    .loadavg()
    .map((x) => x.toFixed(2))
    .join(' ')}`;
}
