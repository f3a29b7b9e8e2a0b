// Browser test of a turn by deepcode's own agent runtime (the "deepcode"
// profile, speaking to a loopback fake model server), driven by
// services/gateway/browser_native_test.go: the default profile is the
// native one, its reasoning, a tool call (a shell command the profile's
// "auto" policy runs) and its answer are rendered, and the turn completes.
//
// Environment: DEEPCODE_URL (a fresh link), DEEPCODE_WORKSPACE, DEEPCODE_CHROMIUM.
// Exit status 0 means every check passed.

import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const TIMEOUT = 30_000;
const url = process.env.DEEPCODE_URL;
const workspace = process.env.DEEPCODE_WORKSPACE;
if (!url || !workspace) throw new Error('DEEPCODE_URL and DEEPCODE_WORKSPACE: run this through go test ./services/gateway -run BrowserNative');

let checks = 0;
function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
  checks++;
  console.log(`ok ${checks} - ${what}`);
}

const profile = await mkdtemp(join(tmpdir(), 'deepcode-chromium-'));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.DEEPCODE_CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking',
    '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1'],
});
try {
  const page = await context.newPage();
  page.on('pageerror', (err) => console.log(`page error: ${err.message}`));
  await page.goto(url);
  await page.waitForSelector('[data-testid=connection][data-state=connected]', { timeout: TIMEOUT });
  await page.waitForSelector('[data-testid=new-thread] select[name=profile] option[value=deepcode]', { state: 'attached', timeout: TIMEOUT });
  const chosen = await page.inputValue('[data-testid=new-thread] select[name=profile]');
  check(chosen === 'deepcode', `the native profile is the default one (${chosen})`);
  await page.fill('[data-testid=new-thread] input[name=workspace]', workspace);
  await page.fill('[data-testid=new-thread] input[name=title]', 'native turn');
  await page.click('[data-testid=new-thread] button[type=submit]');
  await page.click('[data-testid=notice][data-code=WORKSPACE_UNTRUSTED] [data-testid=notice-action]', { timeout: TIMEOUT });
  await page.waitForSelector('[data-testid=thread-view]', { timeout: TIMEOUT });

  await page.fill('[data-testid=prompt]', 'think looking at the workspace first\ntool shell {"command":"echo native-tool-ran"}\nsay the **native** runtime answered');
  await page.press('[data-testid=prompt]', 'Enter');
  await page.waitForFunction(() => {
    const turns = document.querySelectorAll('[data-testid=turn]');
    return turns.length > 0 && turns[turns.length - 1].getAttribute('data-status') === 'completed';
  }, null, { timeout: TIMEOUT });
  check(true, 'the native turn completed');
  const text = await page.locator('[data-testid=thread-view]').innerText();
  check(/the native runtime answered/.test(text), 'the model\'s answer is rendered');
  check(await page.locator('[data-testid=item][data-kind=agentMessage] strong').count() > 0, 'its Markdown is rendered (bold)');
  check(/native-tool-ran/.test(text) || (await page.locator('[data-testid=item][data-kind=commandExecution]').count()) > 0, 'the shell tool call is shown');
  if (process.env.DEEPCODE_WEB_SHOTS) {
    for (const width of [390, 1280]) {
      await page.setViewportSize({ width, height: width === 390 ? 844 : 800 });
      await page.waitForTimeout(150);
      await page.screenshot({ path: join(process.env.DEEPCODE_WEB_SHOTS, `20-native-turn-${width}.png`) });
    }
  }
  console.log(`native: ${checks} checks passed`);
} finally {
  await context.close();
  await rm(profile, { recursive: true, force: true });
}
