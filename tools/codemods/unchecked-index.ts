// Codemod for `noUncheckedIndexedAccess`: where the type check under that flag says an index read
// may be undefined (`xs[i].length`, `f(m[k])`, `const x = xs[0]; x.y`, `return xs[0]`, `out.tokens`
// on a Record), writes the `!` the
// code already assumes (`xs[i]!.length`), then checks again, until nothing more can be fixed.
// What is left (destructuring, narrowing lost across a callback, ...) is listed for a human.
//
//   node --import tsx tools/codemods/unchecked-index.ts [--dry-run] [tsconfig.json]
//
// It sets the flag itself, so it runs before or after tsconfig.json turns it on.
import * as fs from 'node:fs';
import * as path from 'node:path';
import ts from 'typescript';

const MAX_ROUNDS = 8;

function loadConfig(configPath: string): ts.ParsedCommandLine {
  const parsed = ts.getParsedCommandLineOfConfigFile(
    configPath,
    { noUncheckedIndexedAccess: true },
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (d) => {
        throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
      },
    },
  );
  if (!parsed) throw new Error(`cannot read ${configPath}`);
  return parsed;
}

/** The innermost node whose span is exactly [start, end), else the innermost one containing it. */
function nodeAt(sf: ts.SourceFile, start: number, end: number): ts.Node | undefined {
  let found: ts.Node | undefined;
  const visit = (node: ts.Node): void => {
    const s = node.getStart(sf);
    if (s > start || node.getEnd() < end) return;
    found = node;
    ts.forEachChild(node, visit);
  };
  ts.forEachChild(sf, visit);
  // Prefer the outermost node with exactly the span (e.g. the element access, not its last token).
  let exact = found;
  while (exact && exact.parent && exact.parent.getStart(sf) === start && exact.parent.getEnd() === end) exact = exact.parent;
  return exact;
}

const unwrap = (n: ts.Node): ts.Node => (ts.isParenthesizedExpression(n) ? unwrap(n.expression) : n);

/** An element access, or a property read through an index signature (`out.tokens` on a Record). */
function isIndexRead(n: ts.Node, checker: ts.TypeChecker): n is ts.ElementAccessExpression | ts.PropertyAccessExpression {
  return ts.isElementAccessExpression(n) || (ts.isPropertyAccessExpression(n) && checker.getSymbolAtLocation(n.name) === undefined);
}

/** The index read to assert non-undefined for a diagnostic's node, if there is one. */
function indexReadFor(node: ts.Node, checker: ts.TypeChecker): ts.Expression | undefined {
  let n = unwrap(node);
  // TS2322 points at `return`, at a property's or a typed variable's name, or at an assignment's target.
  if (ts.isReturnStatement(n) && n.expression) n = unwrap(n.expression);
  else if (ts.isReturnStatement(n.parent) && n === n.parent.getFirstToken()) n = unwrap(n.parent.expression ?? n);
  else if (ts.isPropertyAssignment(n.parent) && n === n.parent.name) n = unwrap(n.parent.initializer);
  else if (ts.isVariableDeclaration(n.parent) && n === n.parent.name && n.parent.type && n.parent.initializer) n = unwrap(n.parent.initializer);
  else if (ts.isBinaryExpression(n.parent) && n === n.parent.left && n.parent.operatorToken.kind === ts.SyntaxKind.EqualsToken) n = unwrap(n.parent.right);
  if (isIndexRead(n, checker)) return n;
  // `const x = xs[i];` (no type annotation) then `x` used as defined: assert at the initializer.
  if (ts.isIdentifier(n)) {
    const decl = checker.getSymbolAtLocation(n)?.valueDeclaration;
    if (decl && ts.isVariableDeclaration(decl) && !decl.type && ts.isIdentifier(decl.name) && decl.initializer) {
      const init = unwrap(decl.initializer);
      if (isIndexRead(init, checker)) return init;
    }
  }
  return undefined;
}

const mentionsUndefined = (d: ts.Diagnostic): boolean => /\bundefined\b/.test(ts.flattenDiagnosticMessageText(d.messageText, '\n'));

function main(): number {
  const args = process.argv.slice(2);
  const dryRun = args.includes('--dry-run');
  const configPath = path.resolve(args.find((a) => !a.startsWith('--')) ?? 'tsconfig.json');
  const root = path.dirname(configPath);
  const rel = (f: string) => path.relative(root, f);
  let fixedTotal = 0;
  let left: ts.Diagnostic[] = [];
  let program: ts.Program | undefined;
  for (let round = 1; round <= MAX_ROUNDS; round++) {
    const config = loadConfig(configPath);
    program = ts.createProgram({ rootNames: config.fileNames, options: config.options, oldProgram: program });
    const checker = program.getTypeChecker();
    const diagnostics = ts.getPreEmitDiagnostics(program).filter((d) => d.file && !d.file.fileName.includes('/node_modules/'));
    const edits = new Map<string, Set<number>>();
    left = [];
    for (const d of diagnostics) {
      const sf = d.file!;
      const access =
        mentionsUndefined(d) && d.start !== undefined
          ? (() => {
              const node = nodeAt(sf, d.start, d.start + (d.length ?? 0));
              return node ? indexReadFor(node, checker) : undefined;
            })()
          : undefined;
      if (!access) {
        left.push(d);
        continue;
      }
      const at = access.getEnd();
      const file = access.getSourceFile().fileName;
      if (!edits.has(file)) edits.set(file, new Set());
      edits.get(file)!.add(at);
    }
    const count = [...edits.values()].reduce((n, s) => n + s.size, 0);
    process.stderr.write(`unchecked-index: round ${round}: ${diagnostics.length} error(s), ${count} \`!\` to write in ${edits.size} file(s)\n`);
    if (count === 0 || dryRun) break;
    for (const [file, positions] of edits) {
      let text = fs.readFileSync(file, 'utf8');
      for (const at of [...positions].sort((a, b) => b - a)) text = `${text.slice(0, at)}!${text.slice(at)}`;
      fs.writeFileSync(file, text);
    }
    fixedTotal += count;
  }
  for (const d of left) {
    const { line, character } = d.file!.getLineAndCharacterOfPosition(d.start ?? 0);
    process.stdout.write(`${rel(d.file!.fileName)}:${line + 1}:${character + 1} TS${d.code} ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}\n`);
  }
  process.stderr.write(`unchecked-index: wrote ${fixedTotal} \`!\`; ${left.length} error(s) left for a human${left.length ? ' (listed above)' : ''}\n`);
  return left.length === 0 ? 0 : 1;
}

process.exit(main());
