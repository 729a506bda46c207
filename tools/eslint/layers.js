'use strict';
// The layer table and the lint rule that enforces it (troupe/layers in eslint.config.mjs).
//
// A file may import only from its own layer or lower ones. Type-only imports count too: a
// type pulls its module's vocabulary down with it. The few type-only imports that must point
// upwards are listed in EXCEPTIONS, each with its reason. Imports of packages are not checked.
const path = require('node:path');

const repoRoot = path.resolve(__dirname, '..', '..');

/**
 * Low to high; folders (and top-level files) in one entry form one layer (they may import each
 * other). The library is infra up to gpu-workers; stack/ brings up the local stack's processes
 * (Temporal, PostgreSQL, the dashboard service), processes/ wires the process entry points,
 * control/ drives runs; index.ts and client.ts are the package's public entry points.
 */
const LAYERS = [
  ['infra'],
  ['rl'],
  ['schema'],
  ['engines/families'],
  ['engines/protocol', 'engines/checkpoints'],
  ['engines/onnx', 'engines/conformance', 'engines/pytorch'],
  ['agents'],
  ['gateway'],
  ['activities'],
  ['workflows'],
  ['dashboard'],
  ['gpu-workers'],
  ['stack'],
  ['processes'],
  ['control'],
  ['index.ts', 'client.ts'],
  ['cli'],
  ['examples'],
  ['testing'],
  ['bench'],
  ['tools'],
  ['test'],
];

/** Files that belong to no layer: the repository's own tool configuration, imported by nothing. */
const UNLAYERED = ['eslint.config.mjs'];

/** Type-only imports allowed to point upwards: importer, imported file, names, why. */
const EXCEPTIONS = [
  {
    from: 'schema/run-config.ts',
    to: 'agents/team.ts',
    names: ['AnyTeam'],
    why: 'a run config is checked against the team it names (checkAgainstTeam, poolsOf); the team type is defined by the user API',
  },
];

/** A repo-relative path without its extension, so 'agents/team' matches 'agents/team.ts'. */
const stem = (rel) => rel.replace(/\.(ts|js|mjs|cjs|d\.ts)$/, '').replace(/\/index$/, '');

/** An entry of LAYERS that names a file ('client.ts'), not a folder. */
const isFile = (entry) => /\.(ts|js|mjs|cjs)$/.test(entry);

/** 'infra', 'engines/{onnx,conformance,pytorch}', '{index.ts,client.ts}'. */
function layerName(i) {
  const entries = LAYERS[i];
  if (entries.length === 1) return entries[0];
  const parents = new Set(entries.map((f) => (f.includes('/') ? f.split('/')[0] : '')));
  if (parents.size === 1 && !parents.has('')) return `${entries[0].split('/')[0]}/{${entries.map((f) => f.split('/')[1]).join(',')}}`;
  return `{${entries.join(',')}}`;
}

/** The layer index of a repo-relative path ('infra/db.ts' → 0, 'client' → the entry points'), or undefined if it is in none. */
function layerOf(rel) {
  const segments = rel.split('/');
  // '' is the repository root itself: an import of the package's folder loads index.ts
  const fileStem = rel === '' ? 'index' : stem(rel);
  for (let i = 0; i < LAYERS.length; i++) {
    for (const entry of LAYERS[i]) {
      if (isFile(entry)) {
        if (fileStem === stem(entry)) return i;
        continue;
      }
      const f = entry.split('/');
      if (f.every((s, k) => segments[k] === s) && segments.length >= f.length) return i;
    }
  }
  return undefined;
}

/** The names an import brings in when it brings in types only, else undefined. */
function typeOnlyNames(node) {
  if (node.type === 'ImportDeclaration' || node.type === 'ExportNamedDeclaration') {
    const kind = node.type === 'ImportDeclaration' ? node.importKind : node.exportKind;
    const specs = node.specifiers ?? [];
    const names = specs.map((s) => (s.imported ?? s.local ?? s.exported).name);
    if (kind === 'type') return names;
    if (specs.length > 0 && specs.every((s) => (s.importKind ?? s.exportKind) === 'type')) return names;
    return undefined;
  }
  if (node.type === 'ExportAllDeclaration' && node.exportKind === 'type') return ['*'];
  if (node.type === 'TSImportType') return [node.qualifier ? (node.qualifier.name ?? '?') : '*'];
  return undefined;
}

/** The text of a string literal (or a template literal without expressions), else undefined. */
function stringOf(node) {
  if (node && node.type === 'Literal' && typeof node.value === 'string') return node.value;
  if (node && node.type === 'TemplateLiteral' && node.expressions.length === 0) return node.quasis[0].value.cooked;
  return undefined;
}

const upwardAllowed = (fromRel, toRel, names) =>
  names !== undefined && EXCEPTIONS.some((e) => stem(e.from) === stem(fromRel) && stem(e.to) === stem(toRel) && names.every((n) => e.names.includes(n)));

const order = LAYERS.map((_, i) => layerName(i)).join(' < ');

/** @type {import('eslint').Rule.RuleModule} */
const rule = {
  meta: {
    type: 'problem',
    docs: { description: 'Refuse imports from a higher layer (the table in tools/eslint/layers.js)' },
    schema: [],
    messages: {
      upward:
        '{{from}} (layer {{fromLayer}}) imports {{to}} (layer {{toLayer}}), a higher layer: a file may import only from its own layer or lower ones ({{order}}){{typeHint}}',
      unlayered: '{{to}} is in no layer: add its folder to LAYERS in tools/eslint/layers.js',
      fileUnlayered: '{{from}} is in no layer: add its folder (or, at the top level, the file) to LAYERS in tools/eslint/layers.js',
    },
  },
  create(context) {
    const fromRel = path.relative(repoRoot, context.filename).split(path.sep).join('/');
    const fromLayer = layerOf(fromRel);
    if (fromLayer === undefined) {
      if (fromRel.startsWith('..') || path.isAbsolute(fromRel) || UNLAYERED.includes(fromRel)) return {};
      return { Program: (node) => context.report({ node, messageId: 'fileUnlayered', data: { from: fromRel } }) };
    }
    const check = (node, source) => {
      const specifier = stringOf(source);
      if (specifier === undefined || !specifier.startsWith('.')) return;
      const abs = path.resolve(path.dirname(context.filename), specifier);
      const toRel = path.relative(repoRoot, abs).split(path.sep).join('/');
      if (toRel.startsWith('..')) return;
      const toLayer = layerOf(toRel);
      if (toLayer === undefined) {
        context.report({ node: source, messageId: 'unlayered', data: { to: toRel } });
        return;
      }
      if (toLayer <= fromLayer) return;
      const names = typeOnlyNames(node);
      if (upwardAllowed(fromRel, toRel, names)) return;
      context.report({
        node: source,
        messageId: 'upward',
        data: {
          from: fromRel,
          fromLayer: layerName(fromLayer),
          to: toRel,
          toLayer: layerName(toLayer),
          order,
          typeHint: names ? ' (type-only imports too, unless listed with a reason in EXCEPTIONS)' : '',
        },
      });
    };
    const isRequire = (callee) =>
      (callee.type === 'Identifier' && callee.name === 'require') ||
      (callee.type === 'MemberExpression' && callee.object.type === 'Identifier' && callee.object.name === 'require' && callee.property.name === 'resolve');
    return {
      ImportDeclaration: (node) => check(node, node.source),
      ExportNamedDeclaration: (node) => check(node, node.source),
      ExportAllDeclaration: (node) => check(node, node.source),
      ImportExpression: (node) => check(node, node.source),
      TSImportType: (node) => check(node, node.argument.type === 'TSLiteralType' ? node.argument.literal : node.argument),
      TSExternalModuleReference: (node) => check(node, node.expression),
      CallExpression: (node) => isRequire(node.callee) && check(node, node.arguments[0]),
    };
  },
};

module.exports = { rule, LAYERS, EXCEPTIONS, UNLAYERED, layerOf, layerName, repoRoot };
