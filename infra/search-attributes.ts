// Troupe's custom search attributes. Workflow-safe: imports only @temporalio/common,
// so workflow code may import the typed keys and call upsertSearchAttributes with them.
//
//   import { TroupeRunId } from './search-attributes';
//   upsertSearchAttributes([{ key: TroupeRunId, value: runId }]);   // in a workflow
//
// The dev server registers them at start (`--search-attribute Name=Type`); a
// production cluster needs `temporal operator search-attribute create` once per name.
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

export const TroupeRunId = defineSearchAttributeKey('TroupeRunId', SearchAttributeType.KEYWORD);
export const TroupeTeam = defineSearchAttributeKey('TroupeTeam', SearchAttributeType.KEYWORD);
export const TroupeStep = defineSearchAttributeKey('TroupeStep', SearchAttributeType.INT);
export const TroupeEvalSuccess = defineSearchAttributeKey('TroupeEvalSuccess', SearchAttributeType.DOUBLE);
export const TroupeStatus = defineSearchAttributeKey('TroupeStatus', SearchAttributeType.KEYWORD);

/** All of them, as typed keys (what TestWorkflowEnvironment.createLocal takes). */
export const TROUPE_SEARCH_ATTRIBUTE_KEYS = [TroupeRunId, TroupeTeam, TroupeStep, TroupeEvalSuccess, TroupeStatus] as const;

/** Name → CLI type, as `temporal server start-dev --search-attribute Name=Type` and `temporal operator` spell it. */
export const TROUPE_SEARCH_ATTRIBUTES = {
  TroupeRunId: 'Keyword',
  TroupeTeam: 'Keyword',
  TroupeStep: 'Int',
  TroupeEvalSuccess: 'Double',
  TroupeStatus: 'Keyword',
} as const;

export type TroupeSearchAttributeName = keyof typeof TROUPE_SEARCH_ATTRIBUTES;
