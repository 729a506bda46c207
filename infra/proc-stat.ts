/**
 * A live process as Linux's /proc/<pid>/stat shows it: its state, parent and CPU time so far
 * (user + system, every thread). Undefined where the process is gone or there is no /proc.
 */
import * as fs from 'node:fs';

/** Clock ticks per second of /proc's CPU times (sysconf(_SC_CLK_TCK): 100 on Linux). */
const TICKS_PER_SECOND = 100;

export function procStat(pid: number): { state: string; ppid: number; cpuSeconds: number } | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // after the command's ')' (which may itself hold spaces and parentheses): field 3 (state) on
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { state: fields[0]!, ppid: Number(fields[1]), cpuSeconds: (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND };
  } catch {
    return undefined;
  }
}
