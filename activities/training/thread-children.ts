/**
 * Processes a worker thread started (MCP servers: agents/mcp.ts) end with the thread. Ending a
 * thread (Worker.terminate, a tool stopped past its limit, the pool closing) does not end the
 * processes it spawned, nor close their pipes, and runs none of the thread's code: the thread
 * tells this thread their pids as it starts and ends them (on a BroadcastChannel, so no call's
 * protocol changes), and when a watched thread exits, what it left running is killed here.
 */
import { BroadcastChannel, type Worker } from 'node:worker_threads';
import { THREAD_CHILDREN_CHANNEL, type ThreadChildMessage } from '../../agents/mcp';

const live = new Map<number, Set<number>>();
/** Threads that exited: a pid they reported late is killed as it arrives. */
const exited = new Set<number>();
let channel: BroadcastChannel | undefined;

function kill(pid: number) {
  try {
    process.kill(pid, 'SIGTERM');
  } catch {
    // already gone
  }
}

function listen() {
  if (channel) return;
  channel = new BroadcastChannel(THREAD_CHILDREN_CHANNEL);
  channel.onmessage = (event: unknown) => {
    const m = (event as { data: ThreadChildMessage }).data;
    if (m.live && exited.has(m.threadId)) return kill(m.pid);
    const pids = live.get(m.threadId) ?? new Set<number>();
    if (m.live) live.set(m.threadId, pids.add(m.pid));
    else pids.delete(m.pid);
  };
  channel.unref(); // listening keeps no process alive
}

/** Ends the processes `worker` reports starting once it exits, however it exits. */
export function endChildrenWith(worker: Worker): void {
  listen();
  const id = worker.threadId;
  worker.once('exit', () => {
    exited.add(id);
    for (const pid of live.get(id) ?? []) kill(pid);
    live.delete(id);
  });
}
