// Unit tests of the transcript's windowing arithmetic (src/vlist.ts),
// bundled with esbuild on the fly like stream.test.mjs. Run: npm test.

import { build } from 'esbuild';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dir = await mkdtemp(join(tmpdir(), 'deepcode-web-vlist-'));
after(() => rm(dir, { recursive: true, force: true }));

const out = await build({ absWorkingDir: root, entryPoints: ['src/vlist.ts'], bundle: true, format: 'esm', platform: 'neutral', write: false, logLevel: 'warning' });
const file = join(dir, 'vlist.mjs');
await writeFile(file, out.outputFiles[0].text);
const { RowHeights, offsets, rowAt, rangeAt, segments } = await import(pathToFileURL(file).href);

test('heights: a guess by kind, then the mean of that kind measured, then the row measured', () => {
  const h = new RowHeights({ turn: 40 }, 50);
  assert.equal(h.get('a', 'turn'), 40);
  assert.equal(h.get('b', 'agentMessage'), 50, 'a kind without a guess takes the fallback');
  assert.equal(h.set('a', 'turn', 30), true);
  assert.equal(h.set('c', 'turn', 50), true);
  assert.equal(h.get('x', 'turn'), 40, 'an unmeasured row takes the mean of its kind');
  assert.equal(h.get('a', 'turn'), 30);
  assert.equal(h.set('a', 'turn', 30), false, 'the same height again is no change');
  assert.equal(h.set('a', 'turn', 70), true);
  assert.equal(h.get('x', 'turn'), 60, 'a re-measured row replaces its old height in the mean');
  assert.equal(h.size, 2);
});

test('heights: bad measurements are ignored', () => {
  const h = new RowHeights({}, 20);
  assert.equal(h.set('a', 'k', NaN), false);
  assert.equal(h.set('a', 'k', -1), false);
  assert.equal(h.set('a', 'k', Infinity), false);
  assert.equal(h.get('a', 'k'), 20);
  assert.equal(h.size, 0);
});

test('offsets and rowAt', () => {
  const offs = offsets([10, 20, 30]);
  assert.deepEqual([...offs], [0, 10, 30, 60]);
  assert.equal(rowAt(offs, -5), 0);
  assert.equal(rowAt(offs, 0), 0);
  assert.equal(rowAt(offs, 9.5), 0);
  assert.equal(rowAt(offs, 10), 1, 'a row ending at y is above y');
  assert.equal(rowAt(offs, 59), 2);
  assert.equal(rowAt(offs, 60), 3, 'past the end: n');
  assert.equal(rowAt(offsets([]), 0), 0);
});

test('rangeAt: the rows overlapping a band, at least one', () => {
  const offs = offsets(Array(100).fill(10));
  assert.deepEqual(rangeAt(offs, 95, 205), [9, 21]);
  assert.deepEqual(rangeAt(offs, -500, 15), [0, 2]);
  assert.deepEqual(rangeAt(offs, 5000, 6000), [99, 100], 'a band past the end keeps the last row');
  assert.deepEqual(rangeAt(offsets([]), 0, 100), [0, 0]);
  assert.deepEqual(rangeAt(offsets([0, 0, 10]), 0, 5), [2, 3], 'rows of no height above the band are not in it');
});

test('segments: the window and pinned rows as runs, spacers between', () => {
  assert.deepEqual(segments(10, [3, 6], []), [
    { from: 0, to: 3, rows: false },
    { from: 3, to: 6, rows: true },
    { from: 6, to: 10, rows: false },
  ]);
  assert.deepEqual(segments(10, [3, 6], [0, 6, 8, 8, 42, -1]), [
    { from: 0, to: 1, rows: true },
    { from: 1, to: 3, rows: false },
    { from: 3, to: 7, rows: true },
    { from: 7, to: 8, rows: false },
    { from: 8, to: 9, rows: true },
    { from: 9, to: 10, rows: false },
  ], 'adjacent runs merge; duplicate and out-of-range pins are dropped');
  assert.deepEqual(segments(4, [0, 4], [2]), [{ from: 0, to: 4, rows: true }]);
  assert.deepEqual(segments(0, [0, 0], []), []);
});
