// The terminal panel (loaded on demand): the selected thread's terminals,
// run by termhost in the thread's workspace, drawn with xterm.js.
//
// Recovery is by byte offset. termhost keeps each terminal's recent output
// as text with positions (bytes of its UTF-8); the panel keeps a cursor,
// the end of what it has written. A live terminal.output at the cursor is
// written; one that overlaps is cut at the cursor; one past it (a gap) and
// every reconnection read the rest back with terminal/read from the cursor.
// A new page (reload, a new link after a gateway restart) starts an empty
// screen, so it reads the whole retained window once. Nothing is written
// twice and nothing is skipped.

import { FitAddon } from '@xterm/addon-fit';
import { Terminal } from '@xterm/xterm';
import { html } from 'htm/preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import type { Controller } from './controller';
import { humanError } from './labels';
import { RpcError } from './rpc';
import type { TerminalInfo } from './types';

type Props = { ctl: Controller };

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** The part of data (which starts at byte offset `from`) from byte `at` on. */
function tailFrom(data: string, from: number, at: number): string {
  if (at <= from) return data;
  return decoder.decode(encoder.encode(data).subarray(at - from));
}

function describe(method: string, err: unknown): string {
  const code = err instanceof RpcError ? err.code : 'SERVICE_UNAVAILABLE';
  return humanError(method, code).text;
}

export function TerminalPanel({ ctl }: Props) {
  const threadId = ctl.model!.threadId;
  const [terms, setTerms] = useState<TerminalInfo[]>([]);
  const [active, setActive] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  const refresh = async (select?: string) => {
    try {
      const res = await ctl.rt.call('terminal/list', { threadId });
      const terminals = res.terminals ?? [];
      setTerms(terminals);
      setError(null);
      setActive((cur) => select ?? (cur && terminals.some((t) => t.terminalId === cur) ? cur : (terminals.find((t) => !t.exited)?.terminalId ?? null)));
    } catch (err) {
      setError(describe('terminal/list', err));
    }
  };
  useEffect(() => {
    void refresh();
    const off = ctl.rt.on('terminal.exit', (p) => {
      if (p.threadId === threadId) void refresh();
    });
    const offReady = ctl.rt.onReady(() => void refresh());
    return () => {
      off();
      offReady();
    };
  }, [threadId]);

  const create = async () => {
    setBusy(true);
    try {
      const res = await ctl.rt.call('terminal/create', { threadId, cols: 80, rows: 24 });
      await refresh(res.terminalId);
    } catch (err) {
      setError(describe('terminal/create', err));
    } finally {
      setBusy(false);
    }
  };
  const close = async (id: string) => {
    try {
      await ctl.rt.call('terminal/close', { threadId, terminalId: id });
    } catch (err) {
      setError(describe('terminal/close', err));
    }
    await refresh();
  };

  return html`
    <section class="terminal-panel" data-testid="terminal-panel" aria-label="Terminals">
      <div class="term-tabs">
        ${terms.map(
          (t, i) => html`<span key=${t.terminalId} class="term-tab">
            <button aria-pressed=${t.terminalId === active} class=${t.terminalId === active ? 'small' : 'secondary small'} data-testid="terminal-tab" data-terminal-id=${t.terminalId} onClick=${() => setActive(t.terminalId)}>
              Terminal ${i + 1}${t.exited ? ` (ended${t.exitCode !== undefined ? ', ' + t.exitCode : ''})` : ''}
            </button>
            ${t.exited ? null : html`<button class="icon small" aria-label=${`Close terminal ${i + 1}`} data-testid="terminal-close" onClick=${() => void close(t.terminalId)}>×</button>`}
          </span>`,
        )}
        <button class="secondary small" data-testid="terminal-new" disabled=${busy || !ctl.rt.connected} onClick=${() => void create()}>New terminal</button>
        <span class="spacer"></span>
        <button class="icon small" aria-label="Hide the terminal panel" onClick=${() => ctl.toggleTerminal(false)}>▾</button>
      </div>
      ${error ? html`<p class="stream-error" role="alert">${error}</p>` : null}
      ${active
        ? html`<${TermView} key=${active} ctl=${ctl} threadId=${threadId} terminalId=${active} exited=${terms.find((t) => t.terminalId === active)?.exited ?? false} />`
        : html`<p class="note">No terminal open. A terminal runs in this thread's folder and keeps running when you close the page.</p>`}
    </section>
  `;
}

function TermView({ ctl, threadId, terminalId, exited }: Props & { threadId: string; terminalId: string; exited: boolean }) {
  const host = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const el = host.current!;
    const term = new Terminal({ convertEol: false, cursorBlink: true, fontSize: 13, scrollback: 5000, fontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, monospace' });
    const fit = new FitAddon();
    term.loadAddon(fit);
    const styles = adoptStyles(el);
    term.open(el);
    el.dataset.terminalId = terminalId;

    let cursor = 0;
    let stopped = false;
    let chain: Promise<void> = Promise.resolve();
    const serial = (f: () => Promise<void> | void) => {
      chain = chain.then(f).catch(() => undefined);
    };
    const write = (data: string, next: number) => {
      term.write(data);
      cursor = next;
      el.dataset.offset = String(cursor); // for tests: what the screen holds
    };
    /** Reads from the cursor to the head. */
    const catchUp = async () => {
      for (let rounds = 0; rounds < 1000 && !stopped; rounds++) {
        const r = await ctl.rt.call('terminal/read', { threadId, terminalId, offset: cursor, limit: 65536 });
        if (stopped) return;
        if (r.truncated && r.offset > cursor) term.write('\r\n[older output was dropped]\r\n');
        write(r.data, r.nextOffset);
        if (!r.hasMore) return;
      }
    };
    const offOut = ctl.rt.on('terminal.output', (n) => {
      if (n.terminalId !== terminalId) return;
      serial(async () => {
        if (n.nextOffset <= cursor) return; // already shown
        if (n.offset > cursor) return catchUp(); // a gap: read it back
        write(tailFrom(n.data, n.offset, cursor), n.nextOffset);
      });
    });
    const offReady = ctl.rt.onReady(() => serial(catchUp));

    const onData = term.onData((data) => {
      if (exited) return;
      void ctl.rt.call('terminal/input', { threadId, terminalId, data }).catch(() => undefined);
    });
    let size = '';
    const resize = () => {
      try {
        fit.fit();
      } catch {
        return;
      }
      const next = `${term.cols}x${term.rows}`;
      if (next === size || exited) return;
      size = next;
      void ctl.rt.call('terminal/resize', { threadId, terminalId, cols: term.cols, rows: term.rows }).catch(() => undefined);
    };
    const ro = new ResizeObserver(() => resize());
    ro.observe(el);
    // The screen takes the panel's size before the history is written, so
    // it wraps as it did when the output was made.
    resize();
    serial(catchUp);
    term.focus();
    return () => {
      stopped = true;
      ro.disconnect();
      onData.dispose();
      offOut();
      offReady();
      term.dispose();
      styles.disconnect();
    };
  }, [terminalId]);
  return html`<div class="term" ref=${host} data-testid="terminal"></div>`;
}

/**
 * xterm.js writes its dynamic rules into <style> elements, which the page's
 * Content-Security-Policy (style-src 'self') does not apply. The same rules
 * are copied into a constructed style sheet, which CSP allows, whenever they
 * change.
 */
function adoptStyles(root: HTMLElement): { disconnect(): void } {
  if (!('adoptedStyleSheets' in document) || typeof CSSStyleSheet === 'undefined') return { disconnect() {} };
  const sheet = new CSSStyleSheet();
  document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
  let queued = false;
  const sync = () => {
    queued = false;
    const text = [...root.querySelectorAll('style')].map((s) => s.textContent ?? '').join('\n');
    try {
      sheet.replaceSync(text);
    } catch {
      // a rule the browser does not take: keep the previous ones
    }
  };
  const mo = new MutationObserver(() => {
    if (!queued) {
      queued = true;
      queueMicrotask(sync);
    }
  });
  mo.observe(root, { subtree: true, childList: true, characterData: true });
  return {
    disconnect() {
      mo.disconnect();
      document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => s !== sheet);
    },
  };
}
