/**
 * The OpenAI-compatible gateway: agent code written against an OpenAI client
 * runs inside a batched episode, each call a turn of its agent. A thread (or
 * process) starts one server, the first time an episode opens its sessions.
 */
import type { EpisodeTurns, OpenSessions } from '../agents/episode';
import { GatewayServer } from './server';

let shared: Promise<GatewayServer> | undefined;

/** EpisodeIO.openSessions for batched episodes: this thread's gateway, started on first use. */
export async function openGatewaySessions(episode: EpisodeTurns): Promise<OpenSessions> {
  shared ??= GatewayServer.start();
  shared.catch(() => (shared = undefined)); // a failed start is tried again by the next episode
  return (await shared).open(episode);
}

export { GatewayServer } from './server';
export { GatewayError } from './errors';
