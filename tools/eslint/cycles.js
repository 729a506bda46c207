'use strict';
// troupe/no-cycle: refuses a static import that closes a cycle of modules.
//
// The graph is read once per TypeScript program (which typescript-eslint has already
// built for the type-aware rules), so the whole check costs one pass over the program's
// import statements plus Tarjan's strongly connected components: linear in the graph.
// eslint-plugin-import-x's no-cycle walks the graph again from every file (~80 s here).
//
// Edges are the imports that run when a module loads: `import`, `export … from` and
// `import x = require()`, except type-only ones (erased before run time). A lazy `require()`
// or `import()` inside a function does not load at module load, so it may point back.
const path = require('node:path');

const EXTENSIONS = ['.ts', '.tsx', '.d.ts', '/index.ts', '.js'];

/** @type {WeakMap<object, Map<string, {sccSize: number, scc: number}>>} */
const sccsByProgram = new WeakMap();

/** The program file a relative specifier names, or undefined (packages, files outside the program). */
function resolveIn(program, fromFile, specifier) {
  if (!specifier.startsWith('.')) return undefined;
  const base = path.resolve(path.dirname(fromFile), specifier);
  if (program.getSourceFile(base)) return base;
  for (const ext of EXTENSIONS) if (program.getSourceFile(base + ext)) return base + ext;
  return undefined;
}

/** The specifiers of a TypeScript source file's load-time imports. */
function loadTimeSpecifiers(ts, sourceFile) {
  const out = [];
  for (const st of sourceFile.statements) {
    if (ts.isImportDeclaration(st)) {
      const clause = st.importClause;
      if (clause && clause.isTypeOnly) continue;
      const named = clause && clause.namedBindings && ts.isNamedImports(clause.namedBindings) ? clause.namedBindings.elements : undefined;
      if (clause && !clause.name && named && named.length > 0 && named.every((e) => e.isTypeOnly)) continue;
      out.push({ specifier: st.moduleSpecifier.text, pos: st.moduleSpecifier.getStart(sourceFile) });
    } else if (ts.isExportDeclaration(st) && st.moduleSpecifier) {
      if (st.isTypeOnly) continue;
      const named = st.exportClause && ts.isNamedExports(st.exportClause) ? st.exportClause.elements : undefined;
      if (named && named.length > 0 && named.every((e) => e.isTypeOnly)) continue;
      out.push({ specifier: st.moduleSpecifier.text, pos: st.moduleSpecifier.getStart(sourceFile) });
    } else if (ts.isImportEqualsDeclaration(st) && !st.isTypeOnly && ts.isExternalModuleReference(st.moduleReference)) {
      const e = st.moduleReference.expression;
      if (ts.isStringLiteral(e)) out.push({ specifier: e.text, pos: e.getStart(sourceFile) });
    }
  }
  return out;
}

/** Each program file's strongly connected component (Tarjan, iterative) and its size. */
function sccsOf(ts, program) {
  const cached = sccsByProgram.get(program);
  if (cached) return cached;
  const edges = new Map();
  for (const sf of program.getSourceFiles()) {
    if (sf.isDeclarationFile || sf.fileName.includes('/node_modules/')) continue;
    const to = [];
    for (const { specifier } of loadTimeSpecifiers(ts, sf)) {
      const target = resolveIn(program, sf.fileName, specifier);
      if (target) to.push(path.normalize(target));
    }
    edges.set(path.normalize(sf.fileName), to);
  }
  const index = new Map();
  const low = new Map();
  const onStack = new Set();
  const stack = [];
  const result = new Map();
  let next = 0;
  let sccId = 0;
  for (const root of edges.keys()) {
    if (index.has(root)) continue;
    const work = [[root, 0]];
    index.set(root, next);
    low.set(root, next++);
    stack.push(root);
    onStack.add(root);
    while (work.length) {
      const frame = work[work.length - 1];
      const [v, i] = frame;
      const succ = edges.get(v) ?? [];
      if (i < succ.length) {
        frame[1]++;
        const w = succ[i];
        if (!edges.has(w)) continue;
        if (!index.has(w)) {
          index.set(w, next);
          low.set(w, next++);
          stack.push(w);
          onStack.add(w);
          work.push([w, 0]);
        } else if (onStack.has(w)) {
          low.set(v, Math.min(low.get(v), index.get(w)));
        }
        continue;
      }
      work.pop();
      if (work.length) {
        const parent = work[work.length - 1][0];
        low.set(parent, Math.min(low.get(parent), low.get(v)));
      }
      if (low.get(v) === index.get(v)) {
        const members = [];
        let w;
        do {
          w = stack.pop();
          onStack.delete(w);
          members.push(w);
        } while (w !== v);
        const selfLoop = (edges.get(v) ?? []).includes(v);
        for (const m of members) result.set(m, { scc: sccId, sccSize: members.length + (members.length === 1 && selfLoop ? 1 : 0), members });
        sccId++;
      }
    }
  }
  sccsByProgram.set(program, result);
  return result;
}

/** @type {import('eslint').Rule.RuleModule} */
const rule = {
  meta: {
    type: 'problem',
    docs: { description: 'Refuse load-time imports that close a cycle of modules' },
    schema: [],
    messages: {
      cycle:
        'Import cycle: {{from}} imports {{to}}, which leads back here ({{count}} modules in the cycle: {{members}}). Break it: move what both need into a lower module, or import a type with `import type`.',
    },
  },
  create(context) {
    const services = context.sourceCode.parserServices;
    if (!services || !services.program) return {};
    const ts = require('typescript');
    const program = services.program;
    const file = path.normalize(context.filename);
    const sf = program.getSourceFile(file);
    if (!sf) return {};
    const sccs = sccsOf(ts, program);
    const mine = sccs.get(file);
    if (!mine || mine.sccSize < 2) return {};
    const root = context.cwd;
    const rel = (f) => path.relative(root, f).split(path.sep).join('/');
    return {
      Program() {
        for (const { specifier, pos } of loadTimeSpecifiers(ts, sf)) {
          const target = resolveIn(program, file, specifier);
          if (!target || sccs.get(path.normalize(target))?.scc !== mine.scc) continue;
          const shown = mine.members.map(rel).sort();
          context.report({
            loc: context.sourceCode.getLocFromIndex(pos),
            messageId: 'cycle',
            data: {
              from: rel(file),
              to: rel(target),
              count: String(shown.length),
              members: shown.length > 6 ? `${shown.slice(0, 6).join(', ')}, …` : shown.join(', '),
            },
          });
        }
      },
    };
  },
};

module.exports = { rule };
