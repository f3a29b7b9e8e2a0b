// Unit tests of the Markdown renderer's plain-formatting check
// (src/plainhtml.ts): what passes it is shown without DOMPurify, so
// anything that could carry script or a URL must fail it. Bundled with
// esbuild on the fly like vlist.test.mjs. Run: npm test.

import { build } from 'esbuild';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Marked } from 'marked';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dir = await mkdtemp(join(tmpdir(), 'deepcode-web-plainhtml-'));
after(() => rm(dir, { recursive: true, force: true }));

const out = await build({ absWorkingDir: root, entryPoints: ['src/plainhtml.ts'], bundle: true, format: 'esm', platform: 'neutral', write: false, logLevel: 'warning' });
const file = join(dir, 'plainhtml.mjs');
await writeFile(file, out.outputFiles[0].text);
const { plainFormatting } = await import(pathToFileURL(file).href);

// As markdown.ts configures it (its raw-HTML and code renderers aside).
const marked = new Marked({ gfm: true, breaks: true, async: false });
const md = (text) => marked.parse(text).trim();

test('prose with emphasis, inline code, lists, quotes and headings is plain', () => {
  for (const text of [
    'item 7 **of** the long thread with `code` in it',
    'one\ntwo\n\nthree',
    '# Title\n\n- a\n- *b*\n\n1. c\n\n> quoted ~~gone~~',
    'a < b && c > d, "quoted" and \'single\'',
    '| a | b |\n|---|---|\n| 1 | 2 |',
    '---',
    '',
  ]) {
    assert.equal(plainFormatting(md(text)), true, `${JSON.stringify(text)} → ${md(text)}`);
  }
});

test('links, images, code blocks, attributes and any other tag are not plain', () => {
  for (const text of ['[x](javascript:alert(1))', '<https://example.com>', '![i](x.png)', '```\ncode\n```', '- [ ] task', '| a |\n|:-:|\n| 1 |', '3. starts at three']) {
    assert.equal(plainFormatting(md(text)), false, `${JSON.stringify(text)} → ${md(text)}`);
  }
  for (const html of [
    '<p onclick="x()">a</p>',
    '<p >a</p>',
    '<p/>',
    '<P>a</P>',
    '<script>alert(1)</script>',
    '<img src=x onerror=alert(1)>',
    '<svg><p>a</p></svg>',
    '<a href="#">a</a>',
    '<strong>a</strong><',
    '<style>p{}</style>',
    '<pre>a</pre>',
    '<p>a</p><iframe>',
    '<code>a</code><br/>',
    '<!-- c -->',
  ]) {
    assert.equal(plainFormatting(html), false, html);
  }
  assert.equal(plainFormatting('<p>a &lt;script&gt;</p><hr><br>'), true, 'escaped markup is text');
});
