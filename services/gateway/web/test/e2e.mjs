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
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { gzipSync } from 'node:zlib';
import { fileURLToPath } from 'node:url';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

const TIMEOUT = 20_000;
// DEEPCODE_WEB_SHOTS: a folder for screenshots of each view at 390 and 1280 px (make web-shots).
const shotsDir = process.env.DEEPCODE_WEB_SHOTS || '';
const webRoot = fileURLToPath(new URL('..', import.meta.url));
const figures = {};
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

/** The page of the budgets (the long thread), for what a failure prints. */
let budgetPage = null;
let checks = 0;
const started = Date.now();
function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
  checks++;
  console.log(`ok ${checks} - ${what} [${((Date.now() - started) / 1000).toFixed(1)} s]`);
}

// ---- page helpers ----------------------------------------------------------

/** Screenshots of the page as it is, at 390 and at 1280 px wide. */
async function shot(page, name) {
  if (!shotsDir) return;
  await mkdir(shotsDir, { recursive: true });
  const before = page.viewportSize();
  for (const width of [390, 1280]) {
    await page.setViewportSize({ width, height: width === 390 ? 844 : 800 });
    await page.waitForTimeout(150);
    await page.screenshot({ path: join(shotsDir, `${name}-${width}.png`) });
  }
  await page.setViewportSize(before ?? { width: 1280, height: 800 });
  await page.waitForTimeout(100);
}

/**
 * Starts a Chromium performance trace of the page; returns the function
 * that ends it and answers the renderer main threads' tasks, each as
 * {ms, cpuMs}: wall-clock time and the main thread's CPU time in it. CPU
 * time is what a budget can be held to on a machine shared with other
 * work: wall-clock time there includes waiting for a core. With a file
 * (DEEPCODE_WEB_TRACE), the trace is written to it too, for the DevTools
 * Performance panel.
 */
async function startTrace(page) {
  const cdp = await page.context().newCDPSession(page);
  const categories = ['devtools.timeline', 'disabled-by-default-devtools.timeline', 'v8.execute', 'toplevel'];
  await cdp.send('Tracing.start', { transferMode: 'ReturnAsStream', traceConfig: { includedCategories: categories } });
  return async (file) => {
    const done = new Promise((resolve) => cdp.once('Tracing.tracingComplete', resolve));
    await cdp.send('Tracing.end');
    const { stream } = await done;
    let text = '';
    for (;;) {
      const chunk = await cdp.send('IO.read', { handle: stream });
      text += chunk.base64Encoded ? Buffer.from(chunk.data, 'base64').toString('utf8') : chunk.data;
      if (chunk.eof) break;
    }
    await cdp.send('IO.close', { handle: stream });
    await cdp.detach();
    if (file) await writeFile(file, text);
    const parsed = JSON.parse(text);
    const events = Array.isArray(parsed) ? parsed : parsed.traceEvents;
    const mains = new Set(events.filter((e) => e.name === 'thread_name' && e.args?.name === 'CrRendererMain').map((e) => `${e.pid}:${e.tid}`));
    const tasks = events
      .filter((e) => e.ph === 'X' && (e.name === 'RunTask' || e.name === 'ThreadControllerImpl::RunTask') && mains.has(`${e.pid}:${e.tid}`))
      .sort((a, b) => a.ts - b.ts || b.dur - a.dur);
    // Top-level tasks only, per thread (RunTask nests ThreadControllerImpl::RunTask).
    const out = [];
    const until = new Map();
    for (const e of tasks) {
      const thread = `${e.pid}:${e.tid}`;
      if (e.ts < (until.get(thread) ?? -1)) continue;
      until.set(thread, e.ts + e.dur);
      out.push({ ms: e.dur / 1000, cpuMs: (e.tdur ?? e.dur) / 1000 });
    }
    return out;
  };
}

let axeSource;
/** axe-core's serious and critical violations on the page as it is. */
async function axeCheck(page, view) {
  axeSource ??= await readFile(join(webRoot, 'node_modules/axe-core/axe.min.js'), 'utf8');
  await page.evaluate(axeSource); // through the DevTools protocol: the page's CSP does not apply
  const violations = await page.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ['violations'] });
    return r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => `${v.id}: ${v.nodes.map((n) => n.target.join(' ')).slice(0, 3).join(', ')}`);
  });
  check(violations.length === 0, `axe-core: no serious or critical violations on the ${view} view (${violations.join('; ')})`);
}

/** Whether the page scrolls sideways (it must not, at any width). */
const overflows = (page) => page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth + 1);

/** Whether the element's box is inside the transcript's visible area. */
function inTranscriptView(page, selector) {
  return page.evaluate((sel) => {
    const els = document.querySelectorAll(sel);
    const el = els[els.length - 1];
    const sc = document.querySelector('[data-testid=transcript]');
    if (!el || !sc) return false;
    const a = el.getBoundingClientRect();
    const b = sc.getBoundingClientRect();
    return a.bottom > b.top && a.top < b.bottom;
  }, selector);
}

const distanceFromBottom = (page) =>
  page.evaluate(() => {
    const sc = document.querySelector('[data-testid=transcript]');
    return sc.scrollHeight - sc.scrollTop - sc.clientHeight;
  });

/** The visible text of the open terminal. */
const terminalText = (page) => page.evaluate(() => document.querySelector('[data-testid=terminal] .xterm-rows')?.innerText ?? '');

function occurrences(text, word) {
  return text.split(word).length - 1;
}

async function waitNotice(page, code) {
  const sel = `[data-testid=notice][data-code=${code}]`;
  await page.waitForSelector(sel, { timeout: TIMEOUT });
  const text = (await page.textContent(`${sel} .notice-text`)).trim();
  check(!/[a-z]+\/[a-z]+|--[a-z]|[A-Z]{3,}_[A-Z]+/.test(text), `the ${code} notice is written for people, without method names, flags or codes ("${text}")`);
  return text;
}

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

async function waitLastTurn(page, status, timeout = TIMEOUT) {
  await page.waitForFunction(
    (s) => {
      const turns = document.querySelectorAll('[data-testid=turn]');
      return turns.length > 0 && turns[turns.length - 1].getAttribute('data-status') === s;
    },
    status,
    { timeout },
  );
}

/** The id of the latest turn shown (its header stays in the windowed transcript). */
const lastTurnId = (page) =>
  page.evaluate(() => {
    const turns = document.querySelectorAll('[data-testid=turn]');
    return turns.length > 0 ? turns[turns.length - 1].getAttribute('data-turn-id') : null;
  });

async function sendPrompt(page, text) {
  const before = await lastTurnId(page);
  await page.fill('[data-testid=prompt]', text);
  await page.click('[data-testid=send]');
  // The composer empties once the service accepted the turn; then its turn shows.
  await page.waitForFunction(() => document.querySelector('[data-testid=prompt]')?.value === '', null, { timeout: TIMEOUT });
  await page.waitForFunction(
    (id) => {
      const turns = document.querySelectorAll('[data-testid=turn]');
      return turns.length > 0 && turns[turns.length - 1].getAttribute('data-turn-id') !== id;
    },
    before,
    { timeout: TIMEOUT },
  );
}

async function until(cond, what) {
  const deadline = Date.now() + TIMEOUT;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/**
 * What the whole transcript shows: each agent message's text and each
 * turn's id. It is windowed (only rows near the view are in the page), so
 * this scrolls it from the top to the bottom, reading each row once by its
 * id; an id in the page twice at once counts twice. Ends at the bottom.
 */
function readTranscript(page) {
  return page.evaluate(async () => {
    const sc = document.querySelector('[data-testid=transcript]');
    const frame = () => new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
    const texts = new Map();
    const turns = new Set();
    const extra = [];
    sc.scrollTop = 0;
    for (let step = 0; step < 1000; step++) {
      // Wait until the rows at the view are drawn.
      for (let f = 0; f < 30; f++) {
        await frame();
        const v = sc.getBoundingClientRect();
        const drawn = [...sc.querySelectorAll('[data-row]')].some((e) => {
          const r = e.getBoundingClientRect();
          return r.bottom > v.top && r.top < v.bottom;
        });
        if (drawn && f > 0) break;
      }
      const now = new Map();
      for (const e of sc.querySelectorAll('[data-testid=item][data-kind=agentMessage]')) {
        const text = e.querySelector('.item-text')?.textContent;
        if (now.has(e.dataset.itemId)) extra.push(text);
        now.set(e.dataset.itemId, text);
      }
      for (const [id, text] of now) texts.set(id, text);
      const heads = [...sc.querySelectorAll('[data-testid=turn]')].map((e) => e.dataset.turnId);
      if (new Set(heads).size !== heads.length) extra.push('(a turn shown twice)');
      for (const id of heads) turns.add(id);
      if (sc.scrollTop + sc.clientHeight >= sc.scrollHeight - 2) break;
      sc.scrollTop += sc.clientHeight / 3;
    }
    sc.scrollTop = sc.scrollHeight;
    await frame();
    return { texts: [...texts.values(), ...extra], turns: turns.size, turnIds: [...turns] };
  });
}

/** How many times each text is shown in the whole transcript. */
async function countEach(page, texts) {
  const { texts: all } = await readTranscript(page);
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

  await page.setViewportSize({ width: 1280, height: 800 });
  await shot(page, '01-empty');
  await axeCheck(page, 'empty');

  // 3. A thread in an untrusted workspace: the error says so in words and
  //    offers to trust it; the profile comes from the service's profiles.
  await page.waitForSelector('[data-testid=new-thread] select[name=profile] option[value=script]', { state: 'attached', timeout: TIMEOUT });
  await page.fill('[data-testid=new-thread] input[name=workspace]', workspace);
  await page.selectOption('[data-testid=new-thread] select[name=profile]', 'script');
  await page.fill('[data-testid=new-thread] input[name=title]', 'browser e2e');
  await page.click('[data-testid=new-thread] button[type=submit]');
  const untrusted = await waitNotice(page, 'WORKSPACE_UNTRUSTED');
  check(untrusted.includes('not trusted'), `an untrusted workspace is explained ("${untrusted}")`);
  await shot(page, '02-error-untrusted');
  await page.click('[data-testid=notice][data-code=WORKSPACE_UNTRUSTED] [data-testid=notice-action]');
  await page.waitForSelector('[data-testid=thread-view]', { timeout: TIMEOUT });
  await page.waitForSelector('[data-testid=thread] >> text=browser e2e', { timeout: TIMEOUT });
  check(true, '"Trust this workspace" started the thread with the script profile');

  // 4. A turn's output is rendered; plain Enter sends.
  await page.fill('[data-testid=prompt]', 'say hello from the browser');
  await page.press('[data-testid=prompt]', 'Enter');
  await waitAgentText(page, 'hello from the browser');
  await waitLastTurn(page, 'completed');
  check((await page.inputValue('[data-testid=prompt]')) === '', 'plain Enter sent the message, and a turn ran and its agent message is rendered');
  await page.fill('[data-testid=prompt]', 'first line');
  await page.press('[data-testid=prompt]', 'Shift+Enter');
  await page.type('[data-testid=prompt]', 'second line');
  check((await page.inputValue('[data-testid=prompt]')) === 'first line\nsecond line', 'Shift+Enter inserts a new line');
  await page.fill('[data-testid=prompt]', '');

  // Markdown is rendered; HTML, event handlers and javascript: links in agent output do not run.
  let dialogs = 0;
  page.on('dialog', (d) => {
    dialogs++;
    void d.dismiss();
  });
  await sendPrompt(
    page,
    'say **bold move** and `npm test` and [click](javascript:window.__xss=1) and [docs](https://example.com/x) <img src=x onerror="window.__xss=2"> <script>window.__xss=3</script> <b onclick="window.__xss=4">raw</b>',
  );
  await waitLastTurn(page, 'completed');
  const md = await page.evaluate(() => {
    const items = document.querySelectorAll('[data-testid=item][data-kind=agentMessage] .md');
    const el = items[items.length - 1];
    return {
      strong: el.querySelector('strong')?.textContent,
      code: el.querySelector('code')?.textContent,
      hrefs: [...el.querySelectorAll('a')].map((a) => a.getAttribute('href') ?? ''),
      rels: [...el.querySelectorAll('a[href]')].map((a) => a.rel),
      tags: [...el.querySelectorAll('img, script, iframe, [onclick], [onerror]')].length,
      text: el.textContent,
      xss: window.__xss,
    };
  });
  check(md.strong === 'bold move' && md.code === 'npm test', `Markdown is rendered (${JSON.stringify(md)})`);
  check(md.tags === 0 && md.xss === undefined && dialogs === 0, `raw HTML, onerror and onclick in agent output do not run (${JSON.stringify(md)})`);
  check(!md.hrefs.some((h) => /^javascript:/i.test(h)) && md.hrefs.includes('https://example.com/x') && md.rels.every((r) => r.includes('noopener')), `javascript: links are dropped, others open safely (${md.hrefs})`);
  check(md.text.includes('<img src=x') && md.text.includes('<script>'), 'raw HTML is shown as text');
  const opened = context.waitForEvent('page', { timeout: TIMEOUT });
  await page.click('[data-testid=item][data-kind=agentMessage] a[href^="https:"]');
  const tab = await opened;
  check((await tab.evaluate(() => window.opener)) === null, 'a link opens in a new tab without the opener');
  await tab.close();
  await page.bringToFront();
  check((await page.evaluate(() => window.__xss)) === undefined, 'clicking the links ran nothing');

  // A file change shows its diff with added and removed counts.
  await sendPrompt(page, 'write notes.md hello world\nappend notes.md a second line');
  await waitLastTurn(page, 'completed');
  await page.waitForSelector('[data-testid=diff] .dl-add >> text=a second line', { timeout: TIMEOUT });
  const counts = await page.$$eval('[data-testid=diff-counts]', (els) => els.map((e) => e.textContent.trim()));
  check(counts.length >= 2 && counts[counts.length - 1].startsWith('+1'), `the append's diff shows its added line and counts (${counts})`);

  // 5. Follow mode while a turn streams, scrolling up stops it, "jump to
  //    latest", and a pending approval comes into view and takes the focus.
  // (Clicking the link scrolled the transcript to show it: that is the
  // user scrolling, so the view stopped following. Back to the bottom.)
  if (await page.isVisible('[data-testid=jump-latest]')) await page.click('[data-testid=jump-latest]');
  const lines = Array.from({ length: 40 }, (_, i) => `say streamed line ${i + 1} of the follow test\nsleep 60ms`).join('\n');
  await sendPrompt(page, `${lines}\nsleep 1500ms\napprove deploy\nsay approved!`);
  await waitAgentText(page, 'streamed line 12 of the follow test');
  let followed = 0;
  const samples = [];
  for (let i = 0; i < 8; i++) {
    await page.waitForTimeout(120);
    if (await inTranscriptView(page, '[data-testid=item]')) followed++;
    samples.push(await page.evaluate(() => {
      const sc = document.querySelector('[data-testid=transcript]');
      return `${sc.scrollTop}/${sc.scrollHeight}/${sc.clientHeight}`;
    }));
  }
  check(followed === 8, `while the turn streams the last item stays in view (${followed}/8 samples: ${samples})`);
  check((await distanceFromBottom(page)) < 48, 'the transcript is scrolled to the bottom');
  await page.hover('[data-testid=transcript]');
  await page.mouse.wheel(0, -1500);
  await page.waitForSelector('[data-testid=jump-latest]', { timeout: TIMEOUT });
  const upAt = await page.evaluate(() => document.querySelector('[data-testid=transcript]').scrollTop);
  await page.waitForTimeout(500);
  const upLater = await page.evaluate(() => document.querySelector('[data-testid=transcript]').scrollTop);
  check(Math.abs(upLater - upAt) < 4 && (await distanceFromBottom(page)) > 100, `after scrolling up the view stays put while output arrives (${upAt} → ${upLater}) and offers "jump to latest"`);
  await shot(page, '04-scrolled-up');
  const approval = page.locator('[data-testid=approval]', { hasText: 'deploy' });
  await approval.waitFor({ timeout: TIMEOUT });
  await page.waitForFunction(() => document.activeElement?.getAttribute('data-decision') === 'approve', null, { timeout: TIMEOUT });
  check(await inTranscriptView(page, '[data-testid=approval]'), 'the pending approval came into view and its Approve button has the focus');
  await shot(page, '05-approval');
  await page.keyboard.press('Enter'); // approve from the keyboard
  await waitAgentText(page, 'approved!');
  await waitLastTurn(page, 'completed');
  check((await page.locator('[data-testid=approval-resolved][data-decision=approved]').count()) === 1, 'the approval was approved from the keyboard and the turn went on');
  const order = await page.evaluate(() => {
    const rows = [...document.querySelectorAll('[data-testid=approval-resolved], [data-testid=item][data-kind=agentMessage]')];
    const at = rows.findIndex((r) => r.matches('[data-testid=approval-resolved]'));
    return { at, next: rows[at + 1]?.textContent ?? '', prev: rows[at - 1]?.textContent ?? '' };
  });
  check(order.next.includes('approved!') && order.prev.includes('line 40'), `the decided approval stays where it was asked, between the messages before and after it (${JSON.stringify(order)})`);
  if (!(await inTranscriptView(page, '[data-testid=item]'))) await page.click('[data-testid=jump-latest]');
  await page.waitForFunction(() => !document.querySelector('[data-testid=jump-latest]'), null, { timeout: TIMEOUT });
  check((await distanceFromBottom(page)) < 48, '"jump to latest" returns to the bottom');
  await shot(page, '03-transcript');
  await axeCheck(page, 'transcript');

  // Layout: no sideways scrolling; at 390 px the transcript takes the width and the list is a drawer.
  for (const width of [320, 390, 1280]) {
    await page.setViewportSize({ width, height: 800 });
    await page.waitForTimeout(150);
    check(!(await overflows(page)), `no horizontal overflow at ${width} px`);
  }
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(150);
  const col = await page.evaluate(() => document.querySelector('[data-testid=transcript]').getBoundingClientRect().width / window.innerWidth);
  check(col >= 0.9, `at 390 px the transcript column is ${(col * 100).toFixed(0)} % of the viewport`);
  check(!(await page.isVisible('#sidebar')), 'at 390 px the thread list is hidden in a drawer');
  await page.click('[data-testid=menu]');
  await page.waitForSelector('#sidebar.open', { timeout: TIMEOUT });
  check(await page.isVisible('[data-testid=thread] >> text=browser e2e'), 'the menu button opens the drawer with the threads');
  await shot(page, '06-drawer');
  await axeCheck(page, 'drawer');
  await page.click('[data-testid=thread] >> text=browser e2e');
  await page.waitForSelector('#sidebar:not(.open)', { state: 'attached', timeout: TIMEOUT });
  check(true, 'choosing a thread closes the drawer');
  await page.setViewportSize({ width: 1280, height: 800 });

  // Dark mode: from prefers-color-scheme, and a toggle that persists.
  const bg = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  await page.emulateMedia({ colorScheme: 'light' });
  const light = await bg();
  await page.emulateMedia({ colorScheme: 'dark' });
  const dark = await bg();
  check(light !== dark, `prefers-color-scheme: dark changes the background (${light} → ${dark})`);
  await shot(page, '07-dark');
  await axeCheck(page, 'dark transcript');
  const bgIs = (want) => page.waitForFunction((w) => getComputedStyle(document.body).backgroundColor === w, want, { timeout: TIMEOUT }).then(() => true, () => false);
  await page.emulateMedia({ colorScheme: 'light' });
  await page.click('[data-testid=theme]');
  check(await bgIs(dark), 'the theme toggle switches to dark');
  await page.reload();
  await waitConnected(page);
  check(await bgIs(dark), 'the chosen theme persists across a reload');
  await page.click('[data-testid=theme]');
  check(await bgIs(light), 'and back to light');
  await page.waitForSelector('[data-testid=thread-view]', { timeout: TIMEOUT });

  // Rename, search, archive.
  await page.click('[data-testid=rename]');
  await page.fill('[data-testid=rename-input]', 'browser e2e');
  await page.press('[data-testid=rename-input]', 'Enter');
  await page.waitForSelector('[data-testid=rename-form]', { state: 'detached', timeout: TIMEOUT });
  check((await page.textContent('.thread-title')) === 'browser e2e', 'rename saves the title');
  await page.fill('[data-testid=search]', 'follow test');
  await page.waitForSelector('[data-testid=search-results] [data-testid=thread] >> text=browser e2e', { timeout: TIMEOUT });
  check(await page.isVisible('[data-testid=search-results] .snippet >> text=follow test'), 'search by message text finds the thread, with a snippet');
  await page.fill('[data-testid=search]', 'no such words anywhere');
  await page.waitForSelector('[data-testid=search-results] >> text=No thread matches.', { timeout: TIMEOUT });
  await shot(page, '08-search');
  await page.fill('[data-testid=search]', '');
  await page.waitForSelector('[data-testid=search-results]', { state: 'detached', timeout: TIMEOUT });
  check(true, 'a search with no match says so; clearing it shows the list again');
  await page.fill('[data-testid=new-thread] input[name=workspace]', workspace);
  await page.fill('[data-testid=new-thread] input[name=title]', 'to archive');
  await page.click('[data-testid=new-thread] button[type=submit]');
  await page.waitForSelector('.thread-title >> text=to archive', { timeout: TIMEOUT });
  await page.click('[data-testid=rename]');
  await page.fill('[data-testid=rename-input]', 'renamed to archive');
  await page.click('[data-testid=rename-form] button[type=submit]');
  await page.waitForSelector('[data-testid=thread] >> text=renamed to archive', { timeout: TIMEOUT });
  check(true, 'a rename shows in the thread list');
  await page.click('[data-testid=archive]');
  await page.waitForSelector('[data-testid=thread] >> text=renamed to archive', { state: 'detached', timeout: TIMEOUT });
  check(true, 'archive removes the thread from the list');
  await page.click('[data-testid=notice] [data-testid=notice-action] >> text=Undo');
  await page.waitForSelector('[data-testid=thread] >> text=renamed to archive', { timeout: TIMEOUT });
  check(true, 'undo brings it back');
  await page.click('[data-testid=thread] >> text=browser e2e');
  await page.waitForSelector('.thread-title >> text=browser e2e', { timeout: TIMEOUT });

  // The terminal panel: a command's output.
  await page.click('[data-testid=terminal-toggle]');
  await page.click('[data-testid=terminal-new]');
  await page.waitForSelector('[data-testid=terminal] .xterm-rows', { timeout: TIMEOUT });
  await page.click('[data-testid=terminal]');
  await page.keyboard.type('echo mark-$((6*7))\n');
  await page.waitForFunction(() => (document.querySelector('[data-testid=terminal] .xterm-rows')?.innerText ?? '').includes('mark-42'), null, { timeout: TIMEOUT });
  check(occurrences(await terminalText(page), 'mark-42') === 1, 'the terminal shows the command\'s output');
  // (No screenshot yet: resizing the panel makes the shell redraw its
  // prompt for that width, and the replay after the reload draws that
  // redraw at the new width over the output line.)
  await page.reload();
  await waitConnected(page);
  await page.waitForFunction(() => (document.querySelector('[data-testid=terminal] .xterm-rows')?.innerText ?? '').includes('mark-42'), null, { timeout: 5000 }).catch(async (err) => {
    const raw = await page.evaluate(
      ([threadId, terminalId]) =>
        new Promise((resolve) => {
          const ws = new WebSocket(`ws://${location.host}/api/rpc`);
          ws.onopen = () => ws.send(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '1.0', clientInfo: { name: 'probe', version: '0' } } }));
          ws.onmessage = (m) => {
            const msg = JSON.parse(m.data);
            if (msg.id === 1) ws.send(JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'terminal/read', params: { threadId, terminalId, offset: 0 } }));
            if (msg.id === 2) resolve(JSON.stringify(msg.result ?? msg.error));
          };
        }),
      [await page.getAttribute('[data-testid=thread-view]', 'data-thread-id'), await page.getAttribute('[data-testid=terminal]', 'data-terminal-id')],
    );
    console.log(`terminal/read: ${raw}\nscreen offset ${await page.getAttribute('[data-testid=terminal]', 'data-offset')}`);
    throw err;
  });
  await page.waitForTimeout(300);
  check(occurrences(await terminalText(page), 'mark-42') === 1, `after a page reload the terminal shows its output once (${occurrences(await terminalText(page), 'mark-42')})`);
  await axeCheck(page, 'terminal');
  await page.click('[data-testid=terminal-toggle]');

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
  const turnsBefore = await readTranscript(routed);
  loseAnswerOf = 'turn/start';
  await sendPrompt(routed, 'say keyed once');
  await waitAgentText(routed, 'keyed once');
  await waitLastTurn(routed, 'completed');
  const starts = sent.filter((s) => s.method === 'turn/start' && s.params.input.text === 'say keyed once');
  check(starts.length === 2 && starts[0].params.messageId === starts[1].params.messageId, 'a keyed turn/start was resent once, with the same messageId');
  const turnsAfter = await readTranscript(routed);
  check(turnsAfter.turns === turnsBefore.turns + 1, `the resent turn/start made one turn (${turnsBefore.turnIds} → ${turnsAfter.turnIds})`);
  check((await countEach(routed, ['keyed once']))['keyed once'] === 1, 'its output is shown once');

  // Never: approval/respond whose answer is lost is RESULT_UNKNOWN, not resent.
  await sendPrompt(routed, 'approve release\nsay released');
  const release = routed.locator('[data-testid=approval]', { hasText: 'release' });
  await release.waitFor({ timeout: TIMEOUT });
  loseAnswerOf = 'approval/respond';
  await release.getByRole('button', { name: 'Approve' }).click();
  const notice = await waitNotice(routed, 'RESULT_UNKNOWN');
  check(notice.includes('not known'), `a lost approval/respond answer is reported as unknown, in words (${notice})`);
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
  await page.click('[data-testid=terminal-toggle]');
  await page.waitForFunction(() => (document.querySelector('[data-testid=terminal] .xterm-rows')?.innerText ?? '').includes('mark-42'), null, { timeout: TIMEOUT });
  await page.click('[data-testid=terminal]');
  await page.keyboard.type('echo after-$((40+2))\n');
  await page.waitForFunction(() => (document.querySelector('[data-testid=terminal] .xterm-rows')?.innerText ?? '').includes('after-42'), null, { timeout: TIMEOUT });
  const tt = await terminalText(page);
  check(occurrences(tt, 'mark-42') === 1 && occurrences(tt, 'after-42') === 1, 'after a gateway restart the terminal still runs, its output shown once, and takes input');
  await shot(page, '09-terminal'); // after the check: a resize makes the shell redraw over the replayed lines
  await page.click('[data-testid=terminal-close]');
  await page.waitForSelector('[data-testid=terminal-tab] >> text=ended', { timeout: TIMEOUT });
  check(true, 'closing the terminal ends it');
  await page.click('[data-testid=terminal-toggle]');

  // 8. A long thread list is read page by page.
  const { total } = await ask('threads');
  await page.click('nav.threads .side-row button');
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
  await page.fill('[data-testid=prompt]', 'say during the drain');
  await page.click('[data-testid=send]');
  const draining = await waitNotice(page, 'SERVICE_DRAINING');
  check(draining.includes('restart'), `a message sent during a drain is refused in words (${draining})`);
  await page.fill('[data-testid=prompt]', '');
  await ask('resume');
  await late.waitForSelector('[data-testid=phase][data-phase=running]', { timeout: TIMEOUT });
  await page.waitForSelector('[data-testid=phase][data-phase=running]', { timeout: TIMEOUT });
  check(true, 'resume reaches both pages');
  await late.close();

  // Budgets. Initial JavaScript: what the page loads before anything is used.
  const budget = await context.newPage();
  budgetPage = budget;
  watch(budget, 'budget');
  const scripts = [];
  budget.on('response', (r) => {
    if (r.url().endsWith('.js')) scripts.push(r.url());
  });
  await budget.addInitScript(() => {
    window.__long = [];
    new PerformanceObserver((l) => window.__long.push(...l.getEntries().map((e) => e.duration))).observe({ type: 'longtask', buffered: true });
    window.__painted = 0;
    new MutationObserver(() => {
      if (!window.__painted && document.querySelector('[data-testid=thread]')) window.__painted = performance.now();
    }).observe(document, { subtree: true, childList: true });
  });
  await budget.goto(`${origin}/`);
  await budget.waitForSelector('[data-testid=thread]', { timeout: TIMEOUT });
  await budget.waitForTimeout(300);
  let gz = 0;
  for (const u of scripts) gz += gzipSync(await readFile(join(webRoot, 'dist/assets', u.slice(u.lastIndexOf('/') + 1)))).length;
  figures.initialJsGzipKiB = +(gz / 1024).toFixed(1);
  figures.initialScripts = scripts.length;
  figures.threadListPaintedMs = Math.round(await budget.evaluate(() => window.__painted));
  check(gz <= 150 * 1024, `initial JavaScript is ${figures.initialJsGzipKiB} KiB gzipped in ${scripts.length} file(s) (budget 150 KiB); the thread list painted at ${figures.threadListPaintedMs} ms`);
  const all = (await readdir(join(webRoot, 'dist/assets'))).filter((f) => f.endsWith('.js'));
  check(all.length > scripts.length, `the terminal, highlighter and diff view are separate chunks (${all.length} files, ${scripts.length} loaded at first)`);
  // A 2,000-item thread renders and scrolls without long tasks: a
  // measurement (minutes under -race on a loaded machine), run when
  // DEEPCODE_WEB_LONG_THREAD=1 (make web-shots sets it).
  if (process.env.DEEPCODE_WEB_LONG_THREAD === '1') {
    await budget.fill('[data-testid=new-thread] input[name=workspace]', workspace);
    await budget.fill('[data-testid=new-thread] input[name=title]', 'long thread');
    await budget.waitForSelector('[data-testid=new-thread] select[name=profile] option[value=script]', { state: 'attached', timeout: TIMEOUT });
    await budget.selectOption('[data-testid=new-thread] select[name=profile]', 'script');
    await budget.click('[data-testid=new-thread] button[type=submit]');
    await budget.waitForSelector('.thread-title >> text=long thread', { timeout: TIMEOUT });
    for (const half of [0, 1]) {
      const prompt = Array.from({ length: 999 }, (_, i) => `say item ${half * 1000 + i} **of** the long thread with \`code\` in it`).join('\n');
      // The transcript is virtualized: a turn's header may not be in the
      // DOM once its items fill the view, so the turn's end is its last
      // item shown (the view follows the output).
      await budget.fill('[data-testid=prompt]', prompt);
      await budget.click('[data-testid=send]');
      await budget.waitForFunction(() => document.querySelector('[data-testid=prompt]')?.value === '', null, { timeout: TIMEOUT });
      await budget.waitForFunction(
        (t) => [...document.querySelectorAll('[data-testid=item][data-kind=agentMessage] .item-text')].some((e) => e.textContent === t),
        `item ${half * 1000 + 998} of the long thread with code in it`,
        { timeout: 10 * TIMEOUT },
      );
    }
    const longId = await budget.getAttribute('[data-testid=thread-view]', 'data-thread-id');
    // Long tasks (over 50 ms) are counted two ways: by the page's
    // PerformanceObserver (wall-clock, what a user on this machine felt)
    // and from a trace, by the main thread's CPU time in each task. On a
    // machine busy with other work a task's wall-clock time is a multiple
    // of its CPU time, so the check holds the CPU time to the 50 ms budget
    // and reports the wall-clock figures; DEEPCODE_WEB_STRICT_TASKS=1 (an
    // idle machine) holds the wall-clock ones to it too.
    const strict = process.env.DEEPCODE_WEB_STRICT_TASKS === '1';
    const trace = process.env.DEEPCODE_WEB_TRACE || '';
    const cpuLong = (tasks) => tasks.filter((t) => t.cpuMs > 50).map((t) => Math.round(t.cpuMs));
    const maxOf = (xs) => Math.round(Math.max(0, ...xs));
    await budget.evaluate(() => window.__long.splice(0));
    let stopTrace = await startTrace(budget);
    const r0 = Date.now();
    await budget.reload();
    await budget.waitForSelector(`[data-testid=thread-view][data-thread-id="${longId}"]`, { timeout: TIMEOUT });
    await waitAgentText(budget, 'item 1998 of the long thread with code in it');
    figures.longThreadOpenMs = Date.now() - r0;
    check((await distanceFromBottom(budget)) < 48, 'the 2,000-item thread opens at its latest item');
    await budget.waitForTimeout(500); // the rows around the view and the deferred Markdown
    const openTasks = await stopTrace(trace && trace.replace(/(\.json)?$/, '-open.json'));
    const openLong = await budget.evaluate(() => window.__long.splice(0));
    figures.longThreadOpenLongTasks = openLong.length;
    figures.longThreadOpenLongTaskMs = openLong.map(Math.round);
    figures.longThreadOpenMaxTaskMs = maxOf(openLong);
    figures.longThreadOpenMaxTaskCpuMs = maxOf(openTasks.map((t) => t.cpuMs));
    stopTrace = await startTrace(budget);
    const t0 = Date.now();
    for (let i = 0; i < 30; i++) {
      await budget.evaluate(() => (document.querySelector('[data-testid=transcript]').scrollTop -= 2500));
      await budget.waitForTimeout(50);
    }
    figures.longThreadScrollMs = Date.now() - t0;
    await budget.waitForTimeout(300);
    const scrollTasks = await stopTrace(trace && trace.replace(/(\.json)?$/, '-scroll.json'));
    const longTasks = await budget.evaluate(() => window.__long.splice(0));
    figures.longThreadLongTasks = longTasks.length;
    figures.longThreadLongTaskMs = longTasks.map(Math.round);
    figures.longThreadMaxTaskMs = maxOf(longTasks);
    figures.longThreadScrollMaxTaskCpuMs = maxOf(scrollTasks.map((t) => t.cpuMs));
    figures.longThreadRowsInDom = await budget.locator('[data-testid=item]').count();
    figures.loadAverage = (await readFile('/proc/loadavg', 'utf8').catch(() => '')).split(' ').slice(0, 3).join(' ');
    console.log(`figures: ${JSON.stringify(figures)}`);
    check(figures.longThreadRowsInDom < 2000, `a 2,000-item thread keeps ${figures.longThreadRowsInDom} items in the page (windowed)`);
    check(
      cpuLong(openTasks).length === 0 && cpuLong(scrollTasks).length === 0,
      `opening and scrolling the 2,000-item thread: no task over 50 ms of CPU (longest ${figures.longThreadOpenMaxTaskCpuMs} ms opening, ${figures.longThreadScrollMaxTaskCpuMs} ms scrolling; over 50: ${JSON.stringify([cpuLong(openTasks), cpuLong(scrollTasks)])})`,
    );
    const wall = `long tasks by the clock: ${openLong.length} opening (${figures.longThreadOpenLongTaskMs.join(', ') || 'none'} ms), ${longTasks.length} scrolling (${figures.longThreadLongTaskMs.join(', ') || 'none'} ms), load average ${figures.loadAverage}`;
    if (strict) check(openLong.length === 0 && longTasks.length === 0, wall);
    else console.log(`${wall} (reported; DEEPCODE_WEB_STRICT_TASKS=1 checks them)`);
    await budget.click('[data-testid=jump-latest]');
    await budget.waitForFunction(() => {
      const sc = document.querySelector('[data-testid=transcript]');
      return sc.scrollHeight - sc.scrollTop - sc.clientHeight < 48;
    }, null, { timeout: TIMEOUT });
    await waitAgentText(budget, 'item 1998 of the long thread with code in it');
    check(true, '"jump to latest" brings the 2,000-item thread back to its latest item');
  } else {
    console.log(`figures: ${JSON.stringify(figures)}`);
  }
  await budget.close();

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
    if (shotsDir) await page.screenshot({ path: join(shotsDir, 'failure.png') }).catch(() => undefined);
  }
  if (budgetPage && !budgetPage.isClosed()) {
    const rows = await budgetPage
      .evaluate(() => [...document.querySelectorAll('[data-testid=transcript] [data-row]')].slice(-5).map((e) => `${e.dataset.row}: ${e.textContent.slice(0, 120)}`).join('\n'))
      .catch(() => '(no page)');
    const head = await budgetPage
      .evaluate(() => `${document.querySelector('.thread-head')?.textContent ?? ''}; turns ${[...document.querySelectorAll('[data-testid=turn]')].map((e) => e.dataset.status)}; ${document.querySelector('[data-testid=connection]')?.textContent ?? ''}`)
      .catch(() => '');
    console.log(`--- the budget page's last rows (${head}) ---\n${rows}\n---`);
  }
  process.exitCode = 1;
} finally {
  other.close();
  await context.close();
  await rm(profile, { recursive: true, force: true });
}
// stdin stays open (the Go side answers on it): leave explicitly.
process.exit(process.exitCode ?? 0);
