/**
 * The OpenAI-compatible gateway: agent code written against an OpenAI client
 * runs inside a batched episode, each call a turn of its agent. A thread (or
 * process) starts one server, the first time an episode opens its sessions,
 * where the deployment says (TROUPE_GATEWAY_*, read from this thread's environment,
 * which an episode thread inherits from its pool worker).
 */
import type { EpisodeTurns, OpenSessions } from '../agents/episode';
import { loadConfig } from '../infra/config';
import { gatewayListen } from './listen';
import { GatewayServer } from './server';

let shared: Promise<GatewayServer> | undefined;

/** EpisodeIO.openSessions for batched episodes: this thread's gateway, started on first use. */
export async function openGatewaySessions(episode: EpisodeTurns): Promise<OpenSessions> {
  shared ??= Promise.resolve().then(() => GatewayServer.start(gatewayListen(loadConfig().gateway)));
  shared.catch(() => (shared = undefined)); // a failed start is tried again by the next episode
  return (await shared).open(episode);
}

export { GatewayServer, countGatewayCallsWith } from './server';
export { gatewayListen, type GatewayListen } from './listen';
export { GatewayError } from './errors';
export { checkGateway, type GatewayFinding } from './check';
