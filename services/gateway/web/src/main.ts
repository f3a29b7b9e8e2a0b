// Entry point: take the ticket out of the address, exchange it for the
// session cookie, then connect and render.

import { html } from 'htm/preact';
import { render } from 'preact';
import { checkSession, exchange, takeTicket } from './auth';
import { Controller } from './controller';
import { timeLabel } from './labels';
import { warmUp } from './markdown';
import { BrowserRuntime } from './runtime';
import { App } from './views';

export const BUILD_ID: string = __BUILD_ID__;

async function main(): Promise<void> {
  const root = document.getElementById('app');
  if (!root) return;
  // Before anything is sent: the ticket leaves the address bar and history.
  const ticket = takeTicket();
  let failure: string | undefined;
  if (ticket !== null) {
    const res = await exchange(ticket);
    // A used or expired link still works if this browser already has a session.
    if (!res.ok && (await checkSession()) !== 'valid') failure = `${res.message ?? 'the link was refused'} (${res.code ?? 'UNAUTHORIZED'})`;
  }
  const rt = new BrowserRuntime({
    url: `ws://${location.host}/api/rpc`,
    buildId: BUILD_ID,
    version: __APP_VERSION__,
    checkSession,
  });
  const ctl = new Controller(rt, sessionStorageOrNull(), localStorageOrNull());
  render(html`<${App} ctl=${ctl} />`, root);
  if (failure !== undefined) ctl.notice('error', `Sign-in failed: ${failure}`);
  rt.start();
  // While the page waits for its threads: what the first draws would
  // otherwise pay for on first use, in small tasks of its own.
  setTimeout(() => timeLabel(new Date().toISOString()), 0);
  warmUp();
  // A new link opened in this tab changes only the fragment: start over with it.
  window.addEventListener('hashchange', () => {
    if (/(^#|&)ticket=/.test(location.hash)) location.reload();
  });
}

function localStorageOrNull(): Storage | null {
  try {
    return window.localStorage;
  } catch {
    return null;
  }
}

function sessionStorageOrNull(): Storage | null {
  try {
    return window.sessionStorage;
  } catch {
    return null;
  }
}

void main();
