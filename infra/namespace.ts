// Whether a Temporal namespace is ready for Troupe: it exists, and every search attribute
// Troupe writes (infra/search-attributes.ts) is registered on it with the right type. A run
// on a namespace without them hangs at its first workflow task (BadSearchAttributes), so
// `up`, `doctor` and the workers check first and say what to run.
//
//   const problems = await namespaceProblems(connection, 'troupe', '10.0.0.5:7233');
//   // [] when ready; else one { what, fix } per problem, `fix` a command line to run
import type { Connection } from '@temporalio/client';
import type { NativeConnection } from '@temporalio/worker';
import { temporal } from '@temporalio/proto';
import { TroupeError } from './errors';
import { TROUPE_SEARCH_ATTRIBUTES, type TroupeSearchAttributeName } from './search-attributes';

const IndexedValueType = temporal.api.enums.v1.IndexedValueType;

/** The server's type of each CLI type name Troupe uses. */
const INDEXED_TYPE: Record<(typeof TROUPE_SEARCH_ATTRIBUTES)[TroupeSearchAttributeName], number> = {
  Keyword: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
  Int: IndexedValueType.INDEXED_VALUE_TYPE_INT,
  Double: IndexedValueType.INDEXED_VALUE_TYPE_DOUBLE,
};

/** A server type as the CLI spells it (INDEXED_VALUE_TYPE_KEYWORD → Keyword). */
function typeName(type: number): string {
  const name = IndexedValueType[type] ?? String(type);
  return name
    .replace(/^INDEXED_VALUE_TYPE_/, '')
    .toLowerCase()
    .replace(/(^|_)(\w)/g, (_, _s, c: string) => c.toUpperCase());
}

export interface NamespaceProblem {
  what: string;
  /** A command line that fixes it. */
  fix: string;
}

const NOT_FOUND = 5;

/** A client's or a worker's connection: both reach the services asked here. */
type AnyConnection =
  Pick<Connection, 'workflowService' | 'operatorService' | 'withDeadline'> | Pick<NativeConnection, 'workflowService' | 'operatorService' | 'withDeadline'>;

/**
 * What keeps `namespace` at `address` from serving Troupe, in the order to fix it; [] when
 * nothing does. A missing namespace hides the attributes, so it is the only problem then.
 * Other errors (the server unreachable) are thrown.
 */
export async function namespaceProblems(connection: AnyConnection, namespace: string, address: string): Promise<NamespaceProblem[]> {
  const target = `--address ${address} --namespace ${namespace}`;
  const deadline = () => Date.now() + 5000;
  try {
    await connection.withDeadline(deadline(), () => connection.workflowService.describeNamespace({ namespace }));
  } catch (e) {
    if ((e as { code?: number }).code !== NOT_FOUND) throw e;
    return [{ what: `namespace "${namespace}" does not exist`, fix: `temporal operator namespace create ${target}` }];
  }
  const res = await connection.withDeadline(deadline(), () => connection.operatorService.listSearchAttributes({ namespace }));
  const registered: Record<string, number> = { ...(res.customAttributes ?? {}) };
  const problems: NamespaceProblem[] = [];
  for (const [name, type] of Object.entries(TROUPE_SEARCH_ATTRIBUTES)) {
    const has = registered[name];
    const create = `temporal operator search-attribute create ${target} --name ${name} --type ${type}`;
    if (has === undefined) problems.push({ what: `search attribute ${name} (${type}) is not registered`, fix: create });
    else if (has !== INDEXED_TYPE[type]) {
      problems.push({
        what: `search attribute ${name} is registered as ${typeName(has)}, Troupe needs ${type}`,
        fix: `temporal operator search-attribute remove ${target} --name ${name} --yes && ${create}`,
      });
    }
  }
  return problems;
}

/** The problems as one TroupeError: what is wrong, and every command to run. */
export function namespaceError(namespace: string, problems: NamespaceProblem[]): TroupeError {
  return new TroupeError(
    `Temporal namespace "${namespace}" is not ready for Troupe: ${problems.map((p) => p.what).join('; ')}`,
    `run: ${problems.map((p) => p.fix).join(' ; ')}`,
  );
}

/** Throws namespaceError when the namespace is not ready. */
export async function assertNamespaceReady(connection: AnyConnection, namespace: string, address: string): Promise<void> {
  const problems = await namespaceProblems(connection, namespace, address);
  if (problems.length > 0) throw namespaceError(namespace, problems);
}
