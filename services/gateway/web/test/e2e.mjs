// Browser end-to-end test of the packaged web client, driven by
// services/gateway/browser_test.go (which starts a real instance and passes
// its `deepcode web` link). Headless Debian Chromium through playwright-core.
//
// Environment: DEEPCODE_URL (a fresh link), DEEPCODE_WORKSPACE (an empty
// folder), DEEPCODE_CHROMIUM (the browser). The Go side answers requests
// written on stdout as `@@ {"need": …}` with one JSON line on stdin:
//   kill-gateway  SIGKILL the gateway, wait for the supervisor's restart
//   link          a fresh `deepcode web --no-open --json` link
// Exit status 0 means every check passed.

import { createServer } from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

const TIMEOUT = 20_000;
const url = required('DEEPCODE_URL');
const workspace = required('DEEPCODE_WORKSPACE');
const origin = new URL(url).origin;
const port = new URL(url).port;

function required(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run this through go test ./services/gateway -run Browser`);
  return v;
}

// ---- the line protocol with the Go test -----------------------------------

const stdinLines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

async function ask(need) {
  process.stdout.write(`@@ ${JSON.stringify({ need })}\n`);
  const { value, done } = await stdinLines.next();
  if (done) throw new Error(`no answer to ${need}`);
  const answer = JSON.parse(value);
  if (answer.error) throw new Error(`${need}: ${answer.error}`);
  return answer;
}

let checks = 0;
const started = Date.now();
function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
  checks++;
  console.log(`ok ${checks} - ${what} [${((Date.now() - started) / 1000).toFixed(1)} s]`);
}

// ---- page helpers ----------------------------------------------------------

const agentTexts = (page) =>
  page.$$eval('[data-testid=item][data-kind=agentMessage] .item-text', (els) => els.map((e) => e.textContent));

async function waitAgentText(page, text) {
  await page.waitForFunction(
    (t) => [...document.querySelectorAll('[data-testid=item][data-kind=agentMessage] .item-text')].some((e) => e.textContent === t),
    text,
    { timeout: TIMEOUT },
  );
}

async function waitConnected(page) {
  await page.waitForSelector('[data-testid=connection][data-state=connected]', { timeout: TIMEOUT });
}

async function waitLastTurn(page, status) {
  await page.waitForFunction(
    (s) => {
      const turns = document.querySelectorAll('[data-testid=turn]');
      return turns.length > 0 && turns[turns.length - 1].getAttribute('data-status') === s;
    },
    status,
    { timeout: TIMEOUT },
  );
}

async function sendPrompt(page, text) {
  await page.fill('[data-testid=prompt]', text);
  await page.click('[data-testid=send]');
  // The composer empties once the service accepted the turn.
  await page.waitForFunction(() => document.querySelector('[data-testid=prompt]')?.value === '', null, { timeout: TIMEOUT });
}

async function until(cond, what) {
  const deadline = Date.now() + TIMEOUT;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function countEach(page, texts) {
  const all = await agentTexts(page);
  return Object.fromEntries(texts.map((t) => [t, all.filter((x) => x === t).length]));
}

/** Opens a WebSocket from the page; 'open' or how it closed. */
function probeSocket(page, wsUrl) {
  return page.evaluate(
    (u) =>
      new Promise((resolve) => {
        const ws = new WebSocket(u);
        ws.onopen = () => {
          ws.close();
          resolve('open');
        };
        ws.onclose = (e) => resolve(`closed ${e.code}`);
        setTimeout(() => resolve('timeout'), 10_000);
      }),
    wsUrl,
  );
}

function watch(page, name) {
  page.on('pageerror', (err) => console.log(`[${name}] page error: ${err.message}`));
  page.on('console', (msg) => {
    if (msg.type() === 'error' || msg.type() === 'warning') console.log(`[${name}] console ${msg.type()}: ${msg.text()}`);
  });
}

// ---- the test --------------------------------------------------------------

const profile = await mkdtemp(join(tmpdir(), 'deepcode-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.DEEPCODE_CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: [
    '--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
    '--disable-quic', '--disable-component-update', '--disable-sync',
    // Loopback only: no name resolves but localhost (Debian's build still
    // looks up Google's update and account hosts otherwise).
    '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1',
  ],
});
const other = createServer((_, res) => {
  res.writeHead(200, { 'Content-Type': 'text/html' });
  res.end('<!doctype html><title>another origin</title><p>another origin');
});
let page;
try {
  console.log(`browser launched [${((Date.now() - started) / 1000).toFixed(1)} s]`);
  page = await context.newPage();
  watch(page, 'main');

  // 1. The link signs in; the ticket leaves the address before the exchange.
  await page.addInitScript(() => {
    // Where the page was when it called fetch (test instrumentation).
    const original = window.fetch;
    window.__fetches = [];
    window.fetch = function (input, init) {
      window.__fetches.push({ url: String(input), href: location.href });
      return original.call(this, input, init);
    };
  });
  await page.goto(url);
  await waitConnected(page);
  check(!page.url().includes('#') && !page.url().includes('ticket'), `the fragment is gone from the address (${page.url()})`);
  const exchanges = (await page.evaluate(() => window.__fetches)).filter((f) => f.url === '/auth/exchange');
  check(exchanges.length === 1 && !exchanges[0].href.includes('#'), `the fragment was removed before the ticket exchange (${JSON.stringify(exchanges)})`);
  check((await page.evaluate(() => location.hash)) === '', 'location.hash is empty');

  // 2. Refusals: the session cookie is needed, and only from this origin.
  check((await probeSocket(page, `ws://127.0.0.1:${port}/api/rpc`)) === 'open', 'the page itself may open /api/rpc');
  const noCookie = await context.newPage();
  watch(noCookie, 'localhost');
  await noCookie.goto(`http://localhost:${port}/`); // same service, another origin: the host-only cookie is not sent
  await noCookie.waitForSelector('[data-testid=blocked][data-state=signedOut]', { timeout: TIMEOUT });
  check(true, 'a page without the session cookie shows "session ended"');
  check((await probeSocket(noCookie, `ws://localhost:${port}/api/rpc`)) === 'closed 1006', 'a WebSocket without the session cookie is refused');
  await noCookie.close();
  await new Promise((resolve) => other.listen(0, '127.0.0.1', resolve));
  const foreign = await context.newPage();
  await foreign.goto(`http://127.0.0.1:${other.address().port}/`); // same site: the cookie is sent, the Origin is wrong
  check((await probeSocket(foreign, `ws://127.0.0.1:${port}/api/rpc`)) === 'closed 1006', 'a WebSocket from another origin is refused, cookie or not');
  await foreign.close();

  // 3. A thread in a trusted workspace with the script profile.
  await page.fill('[data-testid=new-thread] input[name=workspace]', workspace);
  await page.fill('[data-testid=new-thread] input[name=profile]', 'script');
  await page.fill('[data-testid=new-thread] input[name=title]', 'browser e2e');
  await page.check('[data-testid=new-thread] input[name=trust]');
  await page.click('[data-testid=new-thread] button[type=submit]');
  await page.waitForSelector('[data-testid=thread-view]', { timeout: TIMEOUT });
  await page.waitForSelector('[data-testid=thread] >> text=browser e2e', { timeout: TIMEOUT });
  check(true, 'thread/start created and selected the thread');

  // 4. A turn's output is rendered.
  await sendPrompt(page, 'say hello from the browser');
  await waitAgentText(page, 'hello from the browser');
  await waitLastTurn(page, 'completed');
  check(true, 'a turn ran and its agent message is rendered');

  // 5. An approval.
  await sendPrompt(page, 'approve deploy\nsay approved!');
  const approval = page.locator('[data-testid=approval]', { hasText: 'deploy' });
  await approval.waitFor({ timeout: TIMEOUT });
  await approval.getByRole('button', { name: 'Approve' }).click();
  await waitAgentText(page, 'approved!');
  await waitLastTurn(page, 'completed');
  check((await page.locator('[data-testid=approval-resolved][data-decision=approved]').count()) === 1, 'the approval was approved and the turn went on');

  // 6. Lost notifications and a dropped socket, in the same page: gaps are
  //    recovered with event/replay and the reconnection replays from the
  //    cursor; nothing is shown twice. Lost answers follow the retry
  //    contract. A second tab of the same session, its WebSocket routed.
  const routed = await context.newPage();
  watch(routed, 'routed');
  const sockets = [];
  const sent = []; // methods the page sent, over every connection
  let dropNotifications = false;
  let loseAnswerOf = null; // a method whose answer is dropped, after which the socket closes
  await routed.routeWebSocket(/\/api\/rpc$/, (ws) => {
    const server = ws.connectToServer();
    const conn = { ws, lostIds: new Set() };
    sockets.push(conn);
    ws.onMessage((m) => {
      const msg = JSON.parse(String(m));
      if (msg.method) sent.push({ method: msg.method, params: msg.params });
      if (msg.method && msg.method === loseAnswerOf) {
        loseAnswerOf = null;
        conn.lostIds.add(msg.id);
      }
      server.send(m);
    });
    server.onMessage((m) => {
      const msg = JSON.parse(String(m));
      if (dropNotifications && msg.method === 'thread.event' && ['item.delta', 'item.started', 'turn.started'].includes(msg.params.type)) return;
      if (msg.id !== undefined && conn.lostIds.has(msg.id)) {
        void ws.close({ code: 4000, reason: 'test: answer lost' });
        void server.close();
        return;
      }
      ws.send(m);
    });
  });
  await routed.goto(`${origin}/`);
  await waitConnected(routed);
  await routed.click('[data-testid=thread] >> text=browser e2e');
  await waitAgentText(routed, 'approved!');
  check((await countEach(routed, ['hello from the browser', 'approved!']))['approved!'] === 1, 'a second tab rebuilt the thread from its history');

  dropNotifications = true;
  const replaysBefore = sent.filter((s) => s.method === 'event/replay').length;
  await sendPrompt(routed, 'say alpha\nsleep 1500ms\nsay beta\nsleep 1500ms\nsay gamma');
  await waitAgentText(routed, 'alpha');
  check(sent.filter((s) => s.method === 'event/replay').length > replaysBefore, 'missed events were recovered with event/replay');
  await sockets[sockets.length - 1].ws.close({ code: 4001, reason: 'test: network drop' });
  await until(() => sockets.length === 2, 'the page to reconnect');
  check(true, 'the page reconnected by itself');
  await waitAgentText(routed, 'gamma');
  await waitLastTurn(routed, 'completed');
  const greek = await countEach(routed, ['alpha', 'beta', 'gamma']);
  check(greek.alpha === 1 && greek.beta === 1 && greek.gamma === 1, `alpha, beta, gamma shown exactly once after gaps and a reconnect (${JSON.stringify(greek)})`);
  const replays = sent.filter((s) => s.method === 'event/replay' && s.params.threadId);
  check(replays.every((r) => r.params.after >= 0), 'every replay starts from the cursor');
  dropNotifications = false;

  // Keyed: turn/start whose answer is lost is resent after the reconnect
  // with the same messageId; the service answers duplicate; one turn.
  const turnsBefore = await routed.locator('[data-testid=turn]').count();
  loseAnswerOf = 'turn/start';
  await sendPrompt(routed, 'say keyed once');
  await waitAgentText(routed, 'keyed once');
  await waitLastTurn(routed, 'completed');
  const starts = sent.filter((s) => s.method === 'turn/start' && s.params.input.text === 'say keyed once');
  check(starts.length === 2 && starts[0].params.messageId === starts[1].params.messageId, 'a keyed turn/start was resent once, with the same messageId');
  check((await routed.locator('[data-testid=turn]').count()) === turnsBefore + 1, 'the resent turn/start made one turn');
  check((await countEach(routed, ['keyed once']))['keyed once'] === 1, 'its output is shown once');

  // Never: approval/respond whose answer is lost is RESULT_UNKNOWN, not resent.
  await sendPrompt(routed, 'approve release\nsay released');
  const release = routed.locator('[data-testid=approval]', { hasText: 'release' });
  await release.waitFor({ timeout: TIMEOUT });
  loseAnswerOf = 'approval/respond';
  await release.getByRole('button', { name: 'Approve' }).click();
  await routed.waitForSelector('[data-testid=notice][data-kind=unknown]', { timeout: TIMEOUT });
  const notice = await routed.textContent('[data-testid=notice][data-kind=unknown] span');
  check(notice.includes('RESULT_UNKNOWN') && notice.includes('approval/respond'), `a lost approval/respond answer is reported as RESULT_UNKNOWN (${notice.trim()})`);
  await waitConnected(routed);
  await waitAgentText(routed, 'released'); // the service did take it
  check(sent.filter((s) => s.method === 'approval/respond').length === 1, 'approval/respond was never resent');
  await routed.close();

  // A service serving another build of the page: reload, and no normal use.
  const stale = await context.newPage();
  const staleSent = [];
  await stale.routeWebSocket(/\/api\/rpc$/, (ws) => {
    const server = ws.connectToServer();
    ws.onMessage((m) => {
      staleSent.push(JSON.parse(String(m)).method);
      server.send(m);
    });
    server.onMessage((m) => {
      const msg = JSON.parse(String(m));
      if (msg.result?.serviceInfo) msg.result.serviceInfo.frontendBuildId = 'ffffffffffffffff';
      ws.send(JSON.stringify(msg));
    });
  });
  await stale.goto(`${origin}/`);
  await stale.waitForSelector('[data-testid=blocked][data-state=stale] >> text=Reload', { timeout: TIMEOUT });
  await stale.waitForTimeout(300);
  check(staleSent.length === 1 && staleSent[0] === 'initialize', `a page of another build shows "reload" and stops after initialize (${staleSent})`);
  await stale.close();

  // 7. Kill the gateway mid-turn. The agent goes on; the browser session
  //    ended with the gateway (sessions live in its memory), so the page
  //    says so, and a new link shows every event exactly once.
  await sendPrompt(page, 'say one\nsleep 3s\nsay two\nsleep 1s\nsay three');
  await waitAgentText(page, 'one');
  await ask('kill-gateway');
  await page.waitForSelector('[data-testid=blocked][data-state=signedOut]', { timeout: TIMEOUT });
  check(true, 'after the gateway restart the page asks for a new link');
  const { url: fresh } = await ask('link');
  await page.goto(fresh);
  await waitConnected(page);
  check(!page.url().includes('#'), 'the new link’s fragment is gone too');
  await page.waitForSelector('[data-testid=thread-view]', { timeout: TIMEOUT }); // the selected thread is kept per tab
  await waitAgentText(page, 'three');
  await waitLastTurn(page, 'completed');
  const counted = await countEach(page, ['one', 'two', 'three', 'hello from the browser', 'approved!']);
  check(Object.values(counted).every((n) => n === 1), `one, two, three (and earlier turns) shown exactly once (${JSON.stringify(counted)})`);

  // 8. A long thread list is read page by page.
  const { total } = await ask('threads');
  await page.click('nav.threads h3 button');
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=thread]').length === 100, null, { timeout: TIMEOUT });
  check(await page.locator('[data-testid=more-threads]').isVisible(), `the list shows a page of 100 of ${total} threads and offers more`);
  await page.click('[data-testid=more-threads]');
  await page.waitForFunction((n) => document.querySelectorAll('[data-testid=thread]').length === n, total, { timeout: TIMEOUT });
  check((await page.locator('[data-testid=more-threads]').count()) === 0, `"more threads" reads the rest: ${total} listed, no more offered`);

  // 9. Drain: a page that connects meanwhile is told at once; resume
  //    reaches the open page as a notification.
  await ask('drain');
  await page.waitForSelector('[data-testid=phase][data-phase=draining]', { timeout: TIMEOUT });
  const late = await context.newPage();
  await late.goto(`${origin}/`);
  await waitConnected(late);
  await late.waitForSelector('[data-testid=phase][data-phase=draining]', { timeout: TIMEOUT });
  check(true, 'a page connecting during a drain shows the draining phase from initialize');
  await ask('resume');
  await late.waitForSelector('[data-testid=phase][data-phase=running]', { timeout: TIMEOUT });
  await page.waitForSelector('[data-testid=phase][data-phase=running]', { timeout: TIMEOUT });
  check(true, 'resume reaches both pages');
  await late.close();

  // 10. Log out: the session ends and its sockets are refused.
  await page.click('button:has-text("Log out")');
  await page.waitForSelector('[data-testid=blocked][data-state=signedOut]', { timeout: TIMEOUT });
  check((await probeSocket(page, `ws://127.0.0.1:${port}/api/rpc`)) === 'closed 1006', 'after logging out the page cannot open /api/rpc');

  console.log(`e2e: ${checks} passed, 0 failed`);
} catch (err) {
  console.log(`e2e: FAILED: ${err.stack ?? err}`);
  if (page && !page.isClosed()) {
    const text = await page.evaluate(() => document.body.innerText).catch(() => '(no page)');
    console.log(`--- main page text ---\n${text}\n---`);
  }
  process.exitCode = 1;
} finally {
  other.close();
  await context.close();
  await rm(profile, { recursive: true, force: true });
}
// stdin stays open (the Go side answers on it): leave explicitly.
process.exit(process.exitCode ?? 0);
