/** Loading a team's tasks (JSONL files are read here, outside workflow code). */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseJsonlTasks, type Task } from '../agents/tasks';
import type { AnyTeam } from '../agents/team';

const cache = new Map<string, Task[]>();

export function loadTasks(team: AnyTeam): Task[] {
  const source = team.tasks;
  if (source.kind === 'generated') return source.all();
  const path = resolve(source.path);
  let tasks = cache.get(path);
  if (!tasks) {
    tasks = parseJsonlTasks(source, readFileSync(path, 'utf8'));
    cache.set(path, tasks);
  }
  return tasks;
}
