// Unit tests of the runtime's pure parts (ThreadEventStream, ThreadModel),
// bundled from src/ with esbuild on the fly. Run: npm test (node --test).

import { build } from 'esbuild';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dir = await mkdtemp(join(tmpdir(), 'deepcode-web-test-'));
after(() => rm(dir, { recursive: true, force: true }));

async function load(entry) {
  const out = await build({ absWorkingDir: root, entryPoints: [entry], bundle: true, format: 'esm', platform: 'neutral', write: false, logLevel: 'warning' });
  const file = join(dir, entry.replace(/\W/g, '_') + '.mjs');
  await writeFile(file, out.outputFiles[0].text);
  return import(pathToFileURL(file).href);
}

const { ThreadEventStream, ReplayError } = await load('src/stream.ts');
const { ThreadModel } = await load('src/model.ts');

const T = 'thr_aaaaaaaaaaaaaaaa';
const ev = (sequence, threadId = T) => ({ threadId, sequence, type: 'x', at: '', payload: {} });
const tick = () => new Promise((resolve) => setTimeout(resolve, 0));

/** A fake durable log with event/replay's semantics; pages of `page` events. */
function fakeLog(head, page = 3) {
  const log = { head, calls: [], hold: null };
  log.replay = async (p) => {
    log.calls.push({ ...p });
    if (log.hold) await log.hold;
    const cutoff = Math.min(log.head, p.through ?? Infinity);
    const events = [];
    for (let s = p.after + 1; s <= cutoff && events.length < page; s++) events.push(ev(s));
    const nextAfter = events.length ? events[events.length - 1].sequence : p.after;
    return { events, nextAfter, hasMore: nextAfter < cutoff, headSequence: log.head };
  };
  return log;
}

function stream(log) {
  const applied = [];
  const errors = [];
  const s = new ThreadEventStream(T, log.replay, { apply: (e) => applied.push(e.sequence), error: (e, fatal) => errors.push({ e, fatal }) });
  return { s, applied, errors };
}

async function settle(s) {
  for (let i = 0; i < 100 && s.recovering; i++) await tick();
  await tick();
}

test('live events at cursor+1 apply at once; older ones are ignored', async () => {
  const log = fakeLog(0);
  const { s, applied } = stream(log);
  s.live(ev(1));
  s.live(ev(2));
  s.live(ev(2));
  s.live(ev(1));
  s.live(ev(3, 'thr_bbbbbbbbbbbbbbbb'));
  assert.deepEqual(applied, [1, 2]);
  assert.equal(log.calls.length, 0);
});

test('a gap replays from the cursor with the first page’s head as the fixed cutoff', async () => {
  const log = fakeLog(8, 3);
  const { s, applied } = stream(log);
  s.live(ev(1));
  s.live(ev(5)); // 2..4 missed
  log.head = 8;
  await settle(s);
  assert.deepEqual(applied, [1, 2, 3, 4, 5, 6, 7, 8]);
  assert.equal(log.calls[0].after, 1);
  assert.equal(log.calls[0].through, undefined);
  assert.ok(log.calls.slice(1).every((c) => c.through === 8), JSON.stringify(log.calls));
});

test('commits during a round do not extend it; a gap during recovery asks for one more round', async () => {
  const log = fakeLog(4, 2);
  const inner = log.replay;
  const { s, applied } = stream({
    replay: async (p) => {
      const page = await inner(p);
      if (log.calls.length === 1) {
        log.head = 6; // committed after the round's cutoff (4) was captured
        s.live(ev(6)); // and noticed live: a gap
      }
      return page;
    },
  });
  s.recover();
  await settle(s);
  assert.deepEqual(applied, [1, 2, 3, 4, 5, 6]);
  assert.deepEqual(
    log.calls.map((c) => [c.after, c.through]),
    [
      [0, undefined],
      [2, 4], // the first round stops at its cutoff
      [4, undefined], // the recheck: a new round
    ],
  );
});

test('an event applied live during recovery is not applied again', async () => {
  const log = fakeLog(3, 10);
  const { s, applied } = stream(log);
  let release;
  log.hold = new Promise((r) => (release = r));
  s.recover();
  await tick();
  s.live(ev(1));
  log.hold = null;
  release();
  await settle(s);
  assert.deepEqual(applied, [1, 2, 3]);
});

test('one recovery at a time', async () => {
  const log = fakeLog(2, 10);
  const { s } = stream(log);
  let release;
  log.hold = new Promise((r) => (release = r));
  s.recover();
  s.recover();
  s.recover();
  await tick();
  assert.equal(log.calls.length, 1);
  log.hold = null;
  release();
  await settle(s);
  assert.equal(log.calls.length, 2); // the round, and one recheck
});

test('a replay that skips a sequence or names another thread is rejected', async () => {
  for (const bad of [
    async (p) => ({ events: [ev(p.after + 2)], nextAfter: p.after + 2, hasMore: false, headSequence: 5 }),
    async (p) => ({ events: [ev(p.after + 1, 'thr_bbbbbbbbbbbbbbbb')], nextAfter: p.after + 1, hasMore: false, headSequence: 5 }),
    async (p) => ({ events: [], nextAfter: p.after, hasMore: true, headSequence: 5 }),
  ]) {
    const { s, applied, errors } = stream({ replay: bad });
    s.recover();
    await settle(s);
    assert.deepEqual(applied, []);
    assert.equal(errors.length, 1);
    assert.ok(errors[0].e instanceof ReplayError);
    assert.equal(errors[0].fatal, true);
  }
});

test('a stopped stream ignores late answers', async () => {
  const log = fakeLog(3, 10);
  const { s, applied } = stream(log);
  let release;
  log.hold = new Promise((r) => (release = r));
  s.recover();
  await tick();
  s.stop();
  log.hold = null;
  release();
  await settle(s);
  s.live(ev(1));
  assert.deepEqual(applied, []);
});

test('the model builds turns and items from events, snapshots winning over deltas', () => {
  const m = new ThreadModel(T);
  const turn = { id: 'turn_a', threadId: T, ordinal: 1, status: 'queued', messageId: 'm', profile: 'script', createdAt: '' };
  const item = (status, text) => ({ id: 'item_a', threadId: T, turnId: 'turn_a', kind: 'agentMessage', status, payload: text === undefined ? {} : { text }, createdAt: '', updatedAt: '' });
  m.apply({ ...ev(1), type: 'turn.queued', payload: { turn } });
  m.apply({ ...ev(2), type: 'turn.started', payload: { turnId: 'turn_a' } });
  m.apply({ ...ev(3), type: 'item.started', payload: { item: item('inProgress') } });
  m.apply({ ...ev(4), type: 'item.delta', payload: { turnId: 'turn_a', itemId: 'item_a', delta: { text: 'hel' } } });
  assert.equal(m.items.get('item_a').text, 'hel');
  m.apply({ ...ev(5), type: 'item.completed', payload: { item: item('completed', 'hello') } });
  m.apply({ ...ev(6), type: 'item.delta', payload: { turnId: 'turn_a', itemId: 'item_a', delta: { text: '!!' } } });
  assert.equal(m.items.get('item_a').text, 'hello');
  const approval = { id: 'appr_a', threadId: T, turnId: 'turn_a', revision: 1, status: 'pending', kind: 'script', summary: 'deploy', details: {}, createdAt: '' };
  m.apply({ ...ev(7), type: 'approval.requested', payload: { approval } });
  assert.equal(m.turns.get('turn_a').status, 'waitingApproval');
  assert.equal(m.activeTurn.id, 'turn_a');
  m.apply({ ...ev(8), type: 'approval.resolved', payload: { approvalId: 'appr_a', decision: 'approved', revision: 2 } });
  assert.equal(m.pending.size, 0);
  assert.equal(m.resolved.get('appr_a').decision, 'approved');
  assert.equal(m.turns.get('turn_a').status, 'running');
  m.apply({ ...ev(9), type: 'turn.completed', payload: { turn: { ...turn, status: 'completed' } } });
  m.apply({ ...ev(10), type: 'turn.started', payload: { turnId: 'turn_a' } });
  assert.equal(m.turns.get('turn_a').status, 'completed');
  assert.equal(m.activeTurn, undefined);
});
