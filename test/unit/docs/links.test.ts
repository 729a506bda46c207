/**
 * Every relative link in the repository's markdown (README.md, docs/, the folders' READMEs,
 * bench/results/) must reach an existing file or folder, and a `#anchor` into a markdown file
 * must name one of its headings as GitHub slugs them. A failure names the file, the line and
 * the link. External links (https:, mailto:) are not fetched.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { repoRoot } from '../../../infra/paths';

/** GitHub's heading anchor: inline markup dropped, lowercased, punctuation removed, spaces to hyphens. */
export function slug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // links and images keep their text
    .replace(/<[^>]+>/g, '') // inline HTML tags
    .replace(/`/g, '');
  return text
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

/** The anchors of a markdown text's headings, with GitHub's -1, -2 suffixes for repeats. */
export function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  // the raw line: a heading's code spans are part of its anchor (`lab` in "Both tools in one team: `lab`")
  for (const { raw } of lines(markdown)) {
    const h = /^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(raw);
    if (!h) continue;
    const base = slug(h[1]!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** Lines outside fenced code blocks, as written and with inline code spans blanked (links there are code, not links). */
function lines(markdown: string): { line: number; text: string; raw: string }[] {
  const out: { line: number; text: string; raw: string }[] = [];
  let fence: string | undefined;
  for (const [i, raw] of markdown.split('\n').entries()) {
    const f = /^ {0,3}(`{3,}|~{3,})/.exec(raw);
    if (f) {
      if (!fence) fence = f[1]![0]!.repeat(f[1]!.length);
      else if (raw.trim().startsWith(fence)) fence = undefined;
      continue;
    }
    if (!fence) out.push({ line: i + 1, text: raw.replace(/(`+)[^`]*?\1/g, (m) => ' '.repeat(m.length)), raw });
  }
  return out;
}

/** Links of a markdown text: inline links and images, and reference definitions. */
export function links(markdown: string): { line: number; target: string }[] {
  const out: { line: number; target: string }[] = [];
  for (const { line, text } of lines(markdown)) {
    for (const m of text.matchAll(/!?\[(?:[^\][]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) out.push({ line, target: m[1]! });
    const def = /^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$/.exec(text);
    if (def) out.push({ line, target: def[1]! });
  }
  return out;
}

/** Why a link from `file` (relative to root) does not resolve, or undefined when it does. */
export function brokenReason(root: string, file: string, target: string): string | undefined {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return undefined; // https:, mailto:, ...
  const hash = target.indexOf('#');
  const rel = decodeURIComponent(hash < 0 ? target : target.slice(0, hash));
  const anchor = hash < 0 ? undefined : decodeURIComponent(target.slice(hash + 1));
  const dest = rel === '' ? path.join(root, file) : path.resolve(path.join(root, path.dirname(file)), rel.startsWith('/') ? path.join(root, rel) : rel);
  if (!fs.existsSync(dest)) return `${path.relative(root, dest)} does not exist`;
  if (anchor === undefined || !dest.endsWith('.md') || fs.statSync(dest).isDirectory()) return undefined;
  return anchors(fs.readFileSync(dest, 'utf8')).has(anchor.toLowerCase()) ? undefined : `${path.relative(root, dest)} has no heading #${anchor}`;
}

/** Markdown files git tracks, and new ones it does not ignore. */
function markdownFiles(): string[] {
  const out = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', '--', '*.md'], { cwd: repoRoot, encoding: 'utf8' });
  return [...new Set(out.split('\n').filter((f) => f && fs.existsSync(path.join(repoRoot, f))))].sort();
}

describe('the link checker', () => {
  it('slugs headings as GitHub does', () => {
    assert.equal(slug('Writing a team'), 'writing-a-team');
    assert.equal(slug('Asynchronous RL (`staleness`)'), 'asynchronous-rl-staleness');
    assert.equal(slug('6. Payload encryption'), '6-payload-encryption');
    assert.equal(slug('Batch invariance (a caller gets exactly what it gets alone)'), 'batch-invariance-a-caller-gets-exactly-what-it-gets-alone');
    assert.equal(slug('Memory (`memory.ts`)'), 'memory-memoryts');
    assert.equal(slug('Rollout–training mismatch'), 'rollouttraining-mismatch');
    assert.deepEqual([...anchors('# A\n## A\n```\n# not a heading\n```\n## A\n')], ['a', 'a-1', 'a-2']);
    assert.deepEqual([...anchors('## Both tools in one team: `lab`\n')], ['both-tools-in-one-team-lab']);
  });

  it('finds links outside code, and refuses missing files and headings', () => {
    const text = '[a](x.md#b) ![i](img.png) `[no](code.md)`\n```\n[no](fence.md)\n```\n[ref]: ../y.md\n[web](https://example.com)';
    assert.deepEqual(links(text), [
      { line: 1, target: 'x.md#b' },
      { line: 1, target: 'img.png' },
      { line: 5, target: '../y.md' },
      { line: 6, target: 'https://example.com' },
    ]);
    assert.equal(brokenReason(repoRoot, 'README.md', 'https://example.com/nowhere'), undefined);
    assert.equal(brokenReason(repoRoot, 'README.md', 'docs/no-such-page.md'), 'docs/no-such-page.md does not exist');
    assert.equal(brokenReason(repoRoot, 'docs/x.md', '../README.md#no-such-heading'), 'README.md has no heading #no-such-heading');
    assert.equal(brokenReason(repoRoot, 'docs/x.md', '../README.md#quick-start'), undefined);
  });
});

describe('every relative link in the markdown resolves', () => {
  const files = markdownFiles();
  it('finds the README and the docs', () => {
    assert.ok(files.includes('README.md') && files.some((f) => f.startsWith('docs/')), files.join(', '));
  });
  for (const file of files) {
    it(file, () => {
      const text = fs.readFileSync(path.join(repoRoot, file), 'utf8');
      const broken = links(text).flatMap(({ line, target }) => {
        const why = brokenReason(repoRoot, file, target);
        return why ? [`${file}:${line}: (${target}): ${why}`] : [];
      });
      assert.deepEqual(broken, [], `broken links:\n${broken.join('\n')}`);
    });
  }
});
