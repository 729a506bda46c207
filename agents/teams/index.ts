/**
 * The team registry: the name a run config uses -> a factory taking the run's
 * `teamOptions`. Imported by workflow code, so every team here must be
 * workflow-safe at import time. Add your own team with one line.
 */
import type { AnyTeam } from '../team';
import { mathTeam, type MathOptions } from './math';
import { recallTeam, type RecallOptions } from './recall';
import { researchTeam, type ResearchOptions } from './research';

export const teams: Record<string, (options: Record<string, unknown>) => AnyTeam> = {
  math: (options) => mathTeam(options as MathOptions),
  research: (options) => researchTeam(options as ResearchOptions),
  recall: (options) => recallTeam(options as RecallOptions),
};

export function loadTeam(name: string, options: Record<string, unknown> = {}): AnyTeam {
  const make = teams[name];
  if (!make) throw new Error(`team: unknown team ${JSON.stringify(name)} (known: ${Object.keys(teams).join(', ')})`);
  return make(options);
}
