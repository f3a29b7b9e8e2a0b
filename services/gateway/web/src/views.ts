// Views (preact + htm). They read the Controller and call its actions.

import { html } from 'htm/preact';
import { Component } from 'preact';
import { useEffect, useLayoutEffect, useReducer, useRef, useState } from 'preact/hooks';
import type { Controller, EnterMode, Notice } from './controller';
import { highlightUnder } from './highlight';
import { durationLabel, statusLabel, timeLabel } from './labels';
import { cachedMarkdown, renderMarkdown, renderMarkdownLater, renderMarkdownNow } from './markdown';
import type { ItemView as Item, Row, ThreadModel, TurnView as Turn } from './model';
import type { ConnectionState } from './runtime';
import type { Approval, Thread } from './types';
import { offsets, rangeAt, RowHeights, rowAt, segments } from './vlist';

type Props = { ctl: Controller };

/** Pixels of transcript drawn beyond each edge of the view (the rest are spacers). */
const OVERSCAN = 800;
/** First height guesses (px) by row kind, before any row of the kind was measured. */
const GUESS: Record<string, number> = { turn: 40, end: 28, approval: 64, agentMessage: 52, userMessage: 52, commandExecution: 90, fileChange: 56 };
/**
 * While the thread's history is replayed (opening it, catching up after a
 * reconnection), its rows are drawn at most this often (ms), and at once
 * when the replay ends: each page of events would otherwise draw a window
 * of rows the next page moves past, a long task each for nothing shown.
 */
const CATCH_UP_DRAW_MS = 1000;
/** Lines of a message from the user shown before "show all". */
const MESSAGE_LINES = 40;
/** Command output lines shown before "show all". */
const OUTPUT_LINES = 12;
/** Diffs longer than this many lines start collapsed. */
const DIFF_LINES = 40;

function useController(ctl: Controller): void {
  const [, bump] = useReducer((n: number, _: void) => n + 1, 0);
  useEffect(() => ctl.subscribe(() => bump()), [ctl]);
}

function useTheme(ctl: Controller): void {
  useEffect(() => {
    const root = document.documentElement;
    if (ctl.theme === 'system') delete root.dataset.theme;
    else root.dataset.theme = ctl.theme;
  }, [ctl.theme]);
}

/** The theme in effect: the saved choice, else the system's. */
function effectiveTheme(ctl: Controller): 'light' | 'dark' {
  if (ctl.theme !== 'system') return ctl.theme;
  return window.matchMedia?.('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
}

export function App({ ctl }: Props) {
  useController(ctl);
  useTheme(ctl);
  const state = ctl.rt.state;
  return html`
    <div class="app">
      <${StatusBar} ctl=${ctl} />
      ${blocked(state)
        ? html`<main class="blocked-wrap"><${Blocked} state=${state} /></main>`
        : html`<div class="main">
            <aside id="sidebar" class=${ctl.drawerOpen ? 'sidebar open' : 'sidebar'} aria-label="Threads">
              <${NewThreadForm} ctl=${ctl} />
              <${ThreadList} ctl=${ctl} />
            </aside>
            ${ctl.drawerOpen ? html`<div class="scrim" data-testid="scrim" onClick=${() => ctl.toggleDrawer(false)}></div>` : null}
            <main class="thread" data-testid="thread-pane">
              ${ctl.model
                ? html`<${ThreadView} key=${ctl.model.threadId} ctl=${ctl} />`
                : html`<div class="empty"><h2>No thread open</h2><p>Choose a thread from the list, or start a new one.</p></div>`}
            </main>
          </div>`}
      <${Notices} ctl=${ctl} />
    </div>
  `;
}

function blocked(s: ConnectionState): boolean {
  return s.kind === 'signedOut' || s.kind === 'stale' || s.kind === 'failed';
}

function connectionLabel(s: ConnectionState): string {
  switch (s.kind) {
    case 'connecting':
      return 'Connecting…';
    case 'connected':
      return 'Connected';
    case 'reconnecting':
      return s.attempt > 1 ? `Reconnecting (try ${s.attempt})…` : 'Reconnecting…';
    case 'signedOut':
      return 'Signed out';
    case 'stale':
      return 'Out of date';
    case 'failed':
      return 'Unavailable';
  }
}

function phaseLabel(phase: string): string {
  switch (phase) {
    case 'running':
      return 'Ready';
    case 'draining':
      return 'Pausing for a restart';
    case 'stopping':
      return 'Stopping';
    default:
      return statusLabel(phase);
  }
}

function StatusBar({ ctl }: Props) {
  const s = ctl.rt.state;
  const dark = effectiveTheme(ctl) === 'dark';
  return html`
    <header class="statusbar">
      ${blocked(s)
        ? null
        : html`<button class="icon menu" aria-label=${ctl.drawerOpen ? 'Close the thread list' : 'Open the thread list'} aria-expanded=${ctl.drawerOpen} aria-controls="sidebar" data-testid="menu" onClick=${() => ctl.toggleDrawer()}>☰</button>`}
      <span class="brand">deepcode</span>
      <span class="conn" data-testid="connection" data-state=${s.kind} role="status">${connectionLabel(s)}</span>
      <span class="phase" data-testid="phase" data-phase=${ctl.rt.phase}>${phaseLabel(ctl.rt.phase)}</span>
      ${ctl.rt.phase === 'draining' ? html`<span class="hint">New work waits; approvals and stopping turns still work.</span>` : null}
      <span class="spacer"></span>
      <button class="icon" data-testid="theme" aria-label=${dark ? 'Use the light theme' : 'Use the dark theme'} title=${dark ? 'Light theme' : 'Dark theme'} onClick=${() => ctl.setTheme(dark ? 'light' : 'dark')}>${dark ? '☀' : '☾'}</button>
      ${s.kind === 'signedOut' ? null : html`<button class="link" onClick=${() => void ctl.logout()}>Log out</button>`}
    </header>
  `;
}

function Blocked({ state }: { state: ConnectionState }) {
  if (state.kind === 'stale') {
    return html`<div class="blocked" data-testid="blocked" data-state="stale">
      <h2>This page is out of date</h2>
      <p>deepcode was updated. Reload to get the new version; nothing you did is lost.</p>
      <button onClick=${() => location.reload()}>Reload</button>
    </div>`;
  }
  if (state.kind === 'failed') {
    return html`<div class="blocked" data-testid="blocked" data-state="failed"><h2>This service cannot be used from here</h2><p>${state.message}</p></div>`;
  }
  return html`<div class="blocked" data-testid="blocked" data-state="signedOut">
    <h2>Your browser session has ended</h2>
    <p>deepcode restarted, you logged out, or the session expired. Your threads are safe. For a new link, run <code>deepcode web</code> on this computer.</p>
  </div>`;
}

function NewThreadForm({ ctl }: Props) {
  const [workspace, setWorkspace] = useState('');
  const [profile, setProfile] = useState('');
  const [title, setTitle] = useState('');
  const [trust, setTrust] = useState(false);
  const [busy, setBusy] = useState(false);
  const profiles = ctl.profiles;
  const chosen = profile || profiles.find((p) => p.default)?.name || profiles[0]?.name || 'shell';
  const known = ctl.workspaces.find((w) => w.path === workspace.trim());
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    const ok = await ctl.createThread({ workspace, profile: chosen, title, trust });
    setBusy(false);
    if (ok) setTitle('');
  };
  return html`
    <form class="new-thread" data-testid="new-thread" onSubmit=${submit}>
      <h2 class="side-head">New thread</h2>
      <label>Folder
        <input name="workspace" required placeholder="/path/to/project" autocomplete="off" list="workspaces" value=${workspace} onInput=${(e: Event) => setWorkspace(inputValue(e))} />
      </label>
      <datalist id="workspaces">${ctl.workspaces.map((w) => html`<option key=${w.path} value=${w.path}>${w.trusted ? 'trusted' : 'not trusted'}</option>`)}</datalist>
      <label>Agent
        ${profiles.length > 0
          ? html`<select name="profile" value=${chosen} onChange=${(e: Event) => setProfile((e.target as HTMLSelectElement).value)}>
              ${profiles.map((p) => html`<option key=${p.name} value=${p.name}>${p.name}${p.provider && p.provider !== p.name ? ` (${p.provider}${p.model ? ', ' + p.model : ''})` : ''}</option>`)}
            </select>`
          : html`<input name="profile" value=${chosen} onInput=${(e: Event) => setProfile(inputValue(e))} />`}
      </label>
      <label>Title <span class="optional">(optional)</span> <input name="title" value=${title} onInput=${(e: Event) => setTitle(inputValue(e))} /></label>
      ${known?.trusted
        ? html`<p class="note">This folder is trusted.</p>`
        : html`<label class="check"><input type="checkbox" name="trust" checked=${trust} onChange=${(e: Event) => setTrust((e.target as HTMLInputElement).checked)} /> Trust this folder (agents may run commands in it)</label>`}
      <button type="submit" disabled=${busy || !ctl.rt.connected}>Start thread</button>
    </form>
  `;
}

function threadStatus(t: Thread): { label: string; kind: string } | null {
  if (t.status && t.status !== 'idle') return { label: statusLabel(t.status), kind: t.status };
  if (t.lastTurnStatus === 'failed' || t.lastTurnStatus === 'interrupted') return { label: statusLabel(t.lastTurnStatus), kind: t.lastTurnStatus };
  return null;
}

function relativeTime(iso: string): string {
  const ms = Date.now() - new Date(iso).getTime();
  if (!Number.isFinite(ms)) return '';
  if (ms < 60_000) return 'just now';
  if (ms < 3_600_000) return `${Math.floor(ms / 60_000)} min ago`;
  if (ms < 86_400_000) return `${Math.floor(ms / 3_600_000)} h ago`;
  return new Date(iso).toLocaleDateString();
}

function basename(path: string): string {
  const parts = path.split(/[\\/]/).filter(Boolean);
  return parts[parts.length - 1] ?? path;
}

type EntryProps = Props & { thread: Thread; snippet?: string; selected: boolean; minute: number };

/**
 * A thread in the list, drawn again only when its thread, snippet or
 * selection changed, or a minute passed (its "updated … ago"): the page
 * redraws on every change, and the list holds a hundred threads and more.
 */
class ThreadEntry extends Component<EntryProps> {
  override shouldComponentUpdate(next: EntryProps): boolean {
    const p = this.props;
    return next.thread !== p.thread || next.snippet !== p.snippet || next.selected !== p.selected || next.minute !== p.minute;
  }

  override render(p: EntryProps) {
    return threadEntry(p);
  }
}

function threadEntry({ ctl, thread, snippet, selected }: EntryProps) {
  const st = threadStatus(thread);
  return html`<li>
    <button
      class=${selected ? 'thread-entry selected' : 'thread-entry'}
      aria-current=${selected ? 'true' : undefined}
      data-testid="thread"
      data-thread-id=${thread.id}
      data-status=${thread.status}
      title=${`${thread.workspace} · updated ${timeLabel(thread.updatedAt)}`}
      onClick=${() => ctl.select(thread.id)}
    >
      <span class="title">${thread.title || basename(thread.workspace)}</span>
      <span class="meta">
        ${st ? html`<span class=${'pill pill-' + st.kind} data-testid="thread-status">${st.label}</span>` : null}
        <span>${basename(thread.workspace)}</span> · <span>${relativeTime(thread.updatedAt)}</span>
      </span>
      ${snippet ? html`<span class="snippet">${snippet}</span>` : null}
    </button>
  </li>`;
}

/** Threads drawn in the task that first draws the list; LIST_STEP more in each task after it. */
const LIST_FIRST = 30;
const LIST_STEP = 35;

function ThreadList({ ctl }: Props) {
  const hits = ctl.searchHits;
  const current = ctl.model?.threadId;
  const minute = Math.floor(Date.now() / 60_000);
  // A page of a hundred threads drawn at once (with the thread it opens)
  // is a long task: draw the first ones, the rest in the tasks after.
  const [shown, setShown] = useState(LIST_FIRST);
  const count = hits?.length ?? ctl.threads.length;
  useEffect(() => {
    if (shown >= count) return;
    const t = setTimeout(() => setShown((n) => n + LIST_STEP), 0);
    return () => clearTimeout(t);
  }, [shown, count]);
  return html`
    <nav class="threads" aria-label="Thread list">
      <div class="side-row">
        <h2 class="side-head">Threads</h2>
        <button class="link" onClick=${() => void ctl.refreshThreads()} disabled=${!ctl.rt.connected}>Refresh</button>
      </div>
      <input type="search" class="search" data-testid="search" aria-label="Search threads" placeholder="Search titles and messages" value=${ctl.query} onInput=${(e: Event) => void ctl.search(inputValue(e))} />
      ${hits !== null
        ? html`<ul data-testid="search-results">
            ${hits.length === 0 ? html`<li class="none">No thread matches.</li>` : null}
            ${hits.slice(0, shown).map((h) => html`<${ThreadEntry} key=${h.thread.id} ctl=${ctl} thread=${h.thread} snippet=${h.field === 'text' ? h.snippet : undefined} selected=${h.thread.id === current} minute=${minute} />`)}
          </ul>`
        : html`<ul>
            ${ctl.threads.length === 0 ? html`<li class="none">No threads yet.</li>` : null}
            ${ctl.threads.slice(0, shown).map((t) => html`<${ThreadEntry} key=${t.id} ctl=${ctl} thread=${t} selected=${t.id === current} minute=${minute} />`)}
          </ul>`}
      ${hits === null && ctl.threadsCursor
        ? html`<button class="link" data-testid="more-threads" onClick=${() => void ctl.moreThreads()} disabled=${ctl.loadingThreads || !ctl.rt.connected}>
            ${ctl.loadingThreads ? 'Loading…' : 'More threads'}
          </button>`
        : null}
    </nav>
  `;
}

function ThreadHeader({ ctl }: Props) {
  const model = ctl.model!;
  const info = ctl.selectedThread;
  const [editing, setEditing] = useState(false);
  const [draft, setDraft] = useState('');
  const title = info?.title || (info ? basename(info.workspace) : 'Thread');
  const save = async (e: Event) => {
    e.preventDefault();
    if (await ctl.rename(model.threadId, draft)) setEditing(false);
  };
  return html`
    <header class="thread-head">
      ${editing
        ? html`<form class="rename" data-testid="rename-form" onSubmit=${save}>
            <input aria-label="Thread title" data-testid="rename-input" value=${draft} maxlength="256" onInput=${(e: Event) => setDraft(inputValue(e))} onKeyDown=${(e: KeyboardEvent) => e.key === 'Escape' && setEditing(false)} ref=${(el: HTMLInputElement | null) => el?.focus()} />
            <button type="submit">Save</button>
            <button type="button" class="secondary" onClick=${() => setEditing(false)}>Cancel</button>
          </form>`
        : html`<h1 class="thread-title" title=${info?.workspace ?? ''}>${title}</h1>
            <span class="meta">${info ? `${info.workspace} · ${info.profile}` : ''}</span>`}
      ${ctl.recovering ? html`<span class="recovering" data-testid="recovering" role="status">Catching up…</span>` : null}
      <span class="spacer"></span>
      ${editing
        ? null
        : html`<div class="head-actions">
            <button class="secondary small" data-testid="rename" disabled=${!ctl.rt.connected} onClick=${() => { setDraft(info?.title ?? ''); setEditing(true); }}>Rename</button>
            <button class="secondary small" data-testid="archive" disabled=${!ctl.rt.connected} onClick=${() => void ctl.archive(model.threadId)}>Archive</button>
            <button class=${ctl.terminalOpen ? 'small' : 'secondary small'} data-testid="terminal-toggle" aria-pressed=${ctl.terminalOpen} onClick=${() => ctl.toggleTerminal()}>Terminal</button>
          </div>`}
    </header>
  `;
}

function ThreadView({ ctl }: Props) {
  const model = ctl.model!;
  const scroller = useRef<HTMLDivElement>(null);
  const content = useRef<HTMLDivElement>(null);
  const following = useRef(true);
  const [atBottom, setAtBottom] = useState(true);
  const [, redraw] = useReducer((n: number, _: void) => n + 1, 0);
  const heights = useRef(new RowHeights(GUESS)).current;
  const drawn = useRef<Drawn | null>(null);
  /** The row the user looks at, and how far its top is from the view's top: kept in place across a redraw. */
  const anchor = useRef<{ key: string; off: number } | null>(null);
  const seenApprovals = useRef(new Set<string>());
  const again = useRef<ReturnType<typeof setTimeout> | undefined>(undefined);
  /** Where toBottom left scrollTop. */
  const pinnedAt = useRef<number | null>(null);
  // The user scrolled up, and the scroll event is not in yet (it comes
  // with the next frame): stop following now, or this draw would pull
  // the view back down. A view still at the bottom was not scrolled: the
  // content shrank under it (rows measured smaller than guessed), which
  // lowers scrollTop too.
  const noticeScrollUp = (s: HTMLElement) => {
    if (following.current && pinnedAt.current !== null && s.scrollTop < pinnedAt.current - 48 && s.scrollHeight - s.scrollTop - s.clientHeight >= 48) following.current = false;
  };
  /** The transcript's rows as drawn last (vnodes), kept while a replay holds them. */
  const body = useRef<unknown[] | null>(null);
  /** When rows were last drawn during the current replay (or it began); null outside one. */
  const catchUp = useRef<number | null>(null);
  const holdTimer = useRef<ReturnType<typeof setTimeout> | undefined>(undefined);
  /** Whether this render kept the rows drawn last. */
  const held = useRef(false);
  const [ready, setReady] = useState(false);
  useEffect(() => {
    const t = setTimeout(() => setReady(true), 0);
    return () => clearTimeout(t);
  }, []);

  // During a replay, keep the rows drawn last until CATCH_UP_DRAW_MS after
  // the replay began or they were drawn (a timer draws them then).
  let hold = false;
  if (ctl.recovering) {
    const now = performance.now();
    catchUp.current ??= now;
    const wait = catchUp.current + CATCH_UP_DRAW_MS - now;
    if (wait > 0 && body.current !== null) {
      hold = true;
      holdTimer.current ??= setTimeout(() => {
        holdTimer.current = undefined;
        redraw();
      }, wait);
    } else {
      catchUp.current = now;
    }
  } else {
    catchUp.current = null;
    clearTimeout(holdTimer.current);
    holdTimer.current = undefined;
  }
  held.current = hold;

  if (!hold) {
    const rows = model.rows();
    const n = rows.length;
    const keys = rows.map(rowKey);
    const kinds = rows.map((r) => rowKind(model, r));
    const offs = offsets(keys.map((k, i) => heights.get(k, kinds[i])));
    const el = scroller.current;
    if (el) noticeScrollUp(el);
    const viewH = el?.clientHeight || window.innerHeight;
    let top: number;
    if (following.current || !el) {
      top = Math.max(0, offs[n] - viewH);
      anchor.current = null;
    } else {
      anchor.current = findAnchor(el, content.current, keys, offs);
      const at = anchor.current ? keys.indexOf(anchor.current.key) : -1;
      top = at >= 0 ? offs[at] - anchor.current!.off : el.scrollTop;
    }
    const win = rangeAt(offs, top - OVERSCAN, top + viewH + OVERSCAN);
    // The rows in view (and a little past it): their bodies are rendered at once.
    const vis = rangeAt(offs, top - 100, top + viewH + 100);
    drawn.current = n === 0 ? null : { first: keys[win[0]], last: keys[win[1] - 1], atStart: win[0] === 0, atEnd: win[1] === n };
    // Always in the page, wherever the view is: pending approvals (they take
    // the focus and must be reachable from the keyboard) and the latest
    // turn's header (its status is what a reader looks for).
    const pinned: number[] = [];
    let lastTurn = -1;
    rows.forEach((r, i) => {
      if (r.kind === 'turn') lastTurn = i;
      else if (r.kind === 'approval' && model.pending.has(r.id)) pinned.push(i);
    });
    if (lastTurn >= 0) pinned.push(lastTurn);
    // The first draw of a thread comes with the rest of the page (the thread
    // list, the header): its rows follow in a task of their own.
    const segs = ready ? segments(n, win, pinned) : segments(n, [0, 0], []);
    // The same vnodes again are not diffed: that is what holding costs.
    body.current = segs.map((g) =>
      g.rows
        ? rows.slice(g.from, g.to).map(
            (r, j) => html`<div key=${keys[g.from + j]} class=${g.from + j === 0 ? 'vrow first' : 'vrow'} data-row=${keys[g.from + j]} data-row-kind=${kinds[g.from + j]}>
              <${RowView} ctl=${ctl} row=${r} eager=${g.from + j >= vis[0] && g.from + j < vis[1]} />
            </div>`,
          )
        : html`<div key=${'gap:' + keys[g.from]} class="vgap" aria-hidden="true" style=${{ height: `${offs[g.to] - offs[g.from]}px` }}></div>`,
    );
  }
  const empty = model.turns.size === 0 && !ctl.recovering;

  const toBottom = () => {
    const s = scroller.current;
    if (!s) return;
    s.scrollTop = s.scrollHeight;
    pinnedAt.current = s.scrollTop;
  };
  const onScroll = () => {
    const s = scroller.current;
    if (!s) return;
    const bottom = s.scrollHeight - s.scrollTop - s.clientHeight < 48;
    if (bottom) pinnedAt.current = s.scrollTop;
    // Rows drawn or rendered below the view since it was at the bottom
    // (Markdown rendered in a later slice, before the ResizeObserver
    // pulls the view down) move the bottom away without a scroll: only a
    // scroll up stops following.
    const follow = bottom || (following.current && pinnedAt.current !== null && s.scrollTop >= pinnedAt.current - 48);
    following.current = follow;
    if (follow !== atBottom) setAtBottom(follow);
    if (!covered(s, content.current, drawn.current)) redraw();
  };
  const jump = () => {
    following.current = true;
    setAtBottom(true);
    toBottom();
    redraw();
  };

  useLayoutEffect(() => {
    const s = scroller.current;
    const c = content.current;
    if (!s || !c) return;
    for (const child of c.children) {
      const row = (child as HTMLElement).dataset.row;
      if (row) heights.set(row, (child as HTMLElement).dataset.rowKind ?? '', (child as HTMLElement).offsetHeight);
    }
    noticeScrollUp(s);
    if (following.current) {
      toBottom();
    } else if (anchor.current) {
      const a = rowElement(c, anchor.current.key);
      if (a) s.scrollTop += a.getBoundingClientRect().top - s.getBoundingClientRect().top - anchor.current.off;
    }
    // Rows smaller than guessed can leave the window short of the view's
    // edges: draw again with their measured heights, in a task of its own
    // (this one drew a window already). Not while held: the hold's timer
    // draws.
    if (!held.current && !covered(s, c, drawn.current) && again.current === undefined) {
      again.current = setTimeout(() => {
        again.current = undefined;
        redraw();
      }, 0);
    }
  });
  useEffect(
    () => () => {
      clearTimeout(again.current);
      clearTimeout(holdTimer.current);
    },
    [],
  );
  // Content that grows without a render (fonts, highlighting, images) keeps the view at the bottom too.
  useEffect(() => {
    const c = content.current;
    if (!c || typeof ResizeObserver === 'undefined') return;
    const ro = new ResizeObserver(() => {
      const s = scroller.current;
      if (s) noticeScrollUp(s);
      if (following.current) toBottom();
    });
    ro.observe(c);
    return () => ro.disconnect();
  }, []);
  // A new pending approval comes into view and takes the keyboard focus.
  useEffect(() => {
    for (const id of model.pending.keys()) {
      if (seenApprovals.current.has(id)) continue;
      // Not drawn yet (rows held during a replay): on a later draw.
      const card = scroller.current?.querySelector<HTMLElement>(`[data-approval-id="${CSS.escape(id)}"]`);
      if (!card) continue;
      seenApprovals.current.add(id);
      card.scrollIntoView({ block: 'nearest' });
      card.querySelector<HTMLButtonElement>('button[data-decision=approve]')?.focus({ preventScroll: true });
    }
  });

  return html`
    <div class="thread-view" data-testid="thread-view" data-thread-id=${model.threadId}>
      <${ThreadHeader} ctl=${ctl} />
      ${ctl.streamError
        ? html`<p class="stream-error" role="alert">${ctl.streamError} <button class="link" onClick=${() => ctl.select(model.threadId)}>Reload thread</button></p>`
        : null}
      <div class="scroll-wrap">
        <div class="scroller" ref=${scroller} onScroll=${onScroll} data-testid="transcript" tabindex="0" aria-label="Transcript">
          <div class="transcript" ref=${content} onClick=${copyCode}>
            ${empty ? html`<p class="empty-thread">Nothing here yet. Write a message below to start.</p>` : null}
            ${body.current}
          </div>
        </div>
        ${atBottom ? null : html`<button class="jump" data-testid="jump-latest" onClick=${jump}>↓ Jump to latest</button>`}
      </div>
      <${Composer} ctl=${ctl} />
      ${ctl.terminalOpen ? html`<${TerminalSlot} ctl=${ctl} />` : null}
    </div>
  `;
}

/** The height-guess class of a row: items by their kind. */
function rowKind(model: ThreadModel, r: Row): string {
  return r.kind === 'item' ? (model.items.get(r.id)?.kind ?? 'item') : r.kind;
}

function rowElement(c: HTMLElement, key: string): HTMLElement | null {
  for (const child of c.children) if ((child as HTMLElement).dataset.row === key) return child as HTMLElement;
  return null;
}

/**
 * The first drawn row at or below the view's top, and its distance from
 * it; where only a spacer is in view (a long jump), the row the spacer
 * stands in for there.
 */
function findAnchor(s: HTMLElement, c: HTMLElement | null, keys: string[], offs: Float64Array): { key: string; off: number } | null {
  const viewTop = s.getBoundingClientRect().top;
  if (c) {
    for (const child of c.children) {
      const row = (child as HTMLElement).dataset.row;
      if (!row) continue;
      const r = child.getBoundingClientRect();
      if (r.bottom <= viewTop) continue;
      if (r.top >= viewTop + s.clientHeight) break;
      if (keys.includes(row)) return { key: row, off: r.top - viewTop };
    }
  }
  if (keys.length === 0) return null;
  const i = rowAt(offs, s.scrollTop);
  if (i >= keys.length) return null;
  return { key: keys[i], off: offs[i] - s.scrollTop };
}

/** The window drawn last: its first and last rows, and whether it reaches the transcript's ends. */
interface Drawn {
  first: string;
  last: string;
  atStart: boolean;
  atEnd: boolean;
}

/** Whether the drawn window reaches half the overscan past both edges of the view (or the transcript's ends). */
function covered(s: HTMLElement, c: HTMLElement | null, w: Drawn | null): boolean {
  if (!c || !w) return true;
  if (w.atStart && w.atEnd) return true;
  const v = s.getBoundingClientRect();
  const margin = OVERSCAN / 2;
  if (!w.atStart) {
    const f = rowElement(c, w.first);
    if (!f || f.getBoundingClientRect().top > v.top - margin) return false;
  }
  if (!w.atEnd) {
    const l = rowElement(c, w.last);
    if (!l || l.getBoundingClientRect().bottom < v.bottom + margin) return false;
  }
  return true;
}

function rowKey(r: Row): string {
  return r.kind === 'turn' || r.kind === 'end' ? `${r.kind}:${r.turn.id}` : `${r.kind}:${r.id}`;
}

/** Copies a code block's text (the copy buttons are in sanitized Markdown, so events are delegated here). */
function copyCode(e: MouseEvent): void {
  const btn = (e.target as HTMLElement).closest?.('button[data-copy]');
  if (!btn) return;
  const code = btn.closest('.code-block')?.querySelector('pre')?.textContent ?? '';
  void navigator.clipboard?.writeText(code).then(
    () => {
      btn.textContent = 'Copied';
      setTimeout(() => (btn.textContent = 'Copy'), 1500);
    },
    () => (btn.textContent = 'Copy failed'),
  );
}

/** One transcript row; eager: it is in view, so its body is rendered now (not in an idle slice). */
function RowView({ ctl, row, eager }: Props & { row: Row; eager: boolean }) {
  const model = ctl.model!;
  switch (row.kind) {
    case 'turn':
      return html`<${TurnHead} turn=${row.turn} />`;
    case 'end':
      return html`<p class="turn-error" role="alert">${row.turn.error?.message}</p>`;
    case 'approval': {
      const a = model.approval(row.id);
      if (!a) return null;
      return model.pending.has(row.id) ? html`<${ApprovalCard} ctl=${ctl} approval=${a} />` : html`<${ResolvedCard} approval=${a as Approval & { decision: string }} />`;
    }
    case 'item': {
      const item = model.items.get(row.id);
      return item ? html`<${ItemBlock} item=${item} eager=${eager} />` : null;
    }
  }
}

function TurnHead({ turn }: { turn: Turn }) {
  const dur = durationLabel(turn.startedAt ?? turn.createdAt, turn.finishedAt);
  return html`<div class="turn" data-testid="turn" data-status=${turn.status} data-turn-id=${turn.id} title=${timeLabel(turn.startedAt ?? turn.createdAt)}>
    <span class="ordinal">Turn ${turn.ordinal === Number.MAX_SAFE_INTEGER ? '' : turn.ordinal}</span>
    <span class=${'status status-' + turn.status} data-testid="turn-status">${statusLabel(turn.status)}</span>
    ${dur ? html`<span class="duration">${dur}</span>` : null}
  </div>`;
}

function ItemBlock({ item, eager }: { item: Item; eager: boolean }) {
  return html`<div class=${`item item-${item.kind}`} data-testid="item" data-kind=${item.kind} data-status=${item.status} data-item-id=${item.id} title=${timeLabel(item.at)}>
    ${itemBody(item, eager)}
  </div>`;
}

function itemBody(item: Item, eager: boolean) {
  switch (item.kind) {
    case 'userMessage':
      return html`<${UserBlock} item=${item} />`;
    case 'agentMessage':
      return html`<span class="who">Agent</span><${Markdown} text=${item.text} live=${item.status === 'inProgress'} eager=${eager} />`;
    case 'commandExecution':
      return html`<${CommandBlock} item=${item} />`;
    case 'fileChange':
      return html`<${FileChangeBlock} item=${item} />`;
    default:
      return html`<${GenericBlock} item=${item} />`;
  }
}

/**
 * Agent text as Markdown. Eager (rows in view): rendered now, within a
 * time budget per task (renderMarkdownNow). Otherwise
 * (rows drawn ahead of the view) the plain text shows until an idle slice
 * rendered it, unless it is in the cache already.
 */
function Markdown({ text, live, eager }: { text: string; live: boolean; eager: boolean }) {
  const ref = useRef<HTMLDivElement>(null);
  const mounted = useRef(true);
  const [, bump] = useReducer((n: number, _: void) => n + 1, 0);
  let out = live ? undefined : cachedMarkdown(text);
  if (out === undefined && (live || eager)) out = live ? renderMarkdownUncached(text) : renderMarkdownNow(text);
  useEffect(() => {
    mounted.current = true;
    return () => {
      mounted.current = false;
    };
  }, []);
  useEffect(() => {
    if (out === undefined) renderMarkdownLater(text, () => mounted.current, () => bump());
    else if (!live && ref.current) highlightUnder(ref.current);
  }, [out, live, text]);
  if (out === undefined) return html`<div key="plain" class="item-text md plain">${text}</div>`;
  return html`<div key="md" class="item-text md" ref=${ref} dangerouslySetInnerHTML=${{ __html: out }}></div>`;
}

/** Streaming text changes every delta: render it without filling the cache. */
function renderMarkdownUncached(text: string): string {
  return renderMarkdown(text, false);
}

/**
 * A message from the user; a long one (a pasted file, a script of many
 * steps) shows its first lines until "show all": laid out whole, a
 * thousand lines are one long task each time the row is drawn.
 */
function UserBlock({ item }: { item: Item }) {
  const p = item.payload;
  const steer = p.submission === 'steer';
  const [open, setOpen] = useState(false);
  const lines = item.text.split('\n');
  const long = lines.length > MESSAGE_LINES;
  return html`<span class="who">${steer ? 'You (steering)' : 'You'}</span><div class="item-text bubble">${long && !open ? lines.slice(0, MESSAGE_LINES).join('\n') + '\n…' : item.text}</div>
    ${long ? html`<button class="link" aria-expanded=${open} onClick=${() => setOpen(!open)}>${open ? 'Show the first lines only' : `Show all ${lines.length} lines`}</button>` : null}
    ${steer && p.deliveryState ? html`<span class="badge">${statusLabel(String(p.deliveryState))}</span>` : null}`;
}

function CommandBlock({ item }: { item: Item }) {
  const p = item.payload;
  const [open, setOpen] = useState(false);
  const cmd = Array.isArray(p.command) ? (p.command as unknown[]).join(' ') : String(p.command ?? '');
  const lines = item.text.replace(/\n$/, '').split('\n');
  const long = lines.length > OUTPUT_LINES;
  const text = long && !open ? lines.slice(-OUTPUT_LINES).join('\n') : item.text;
  return html`
    <div class="cmd-head"><code class="cmd">$ ${cmd}</code>
      ${typeof p.exitCode === 'number' ? html`<span class=${p.exitCode === 0 ? 'badge ok' : 'badge bad'}>exit ${p.exitCode}</span>` : item.status === 'inProgress' ? html`<span class="badge">running</span>` : null}
    </div>
    ${item.text !== ''
      ? html`${long ? html`<button class="link" aria-expanded=${open} onClick=${() => setOpen(!open)}>${open ? 'Show the last lines only' : `Show all ${lines.length} lines`}</button>` : null}
          <pre class="item-text output" tabindex="0">${text}</pre>`
      : null}
  `;
}

function GenericBlock({ item }: { item: Item }) {
  const [open, setOpen] = useState(false);
  const p = item.payload;
  const name = typeof p.tool === 'string' ? p.tool : typeof p.name === 'string' ? p.name : item.kind;
  return html`<span class="who">Tool</span><span class="item-text">${name}</span>
    <span class="badge">${statusLabel(item.status)}</span>
    <button class="link" aria-expanded=${open} onClick=${() => setOpen(!open)}>${open ? 'Hide details' : 'Details'}</button>
    ${open ? html`<pre class="item-details">${JSON.stringify(item.payload, null, 2)}</pre>` : null}`;
}

interface DiffLine {
  sign: '+' | '-' | ' ' | '@';
  text: string;
}

function FileChangeBlock({ item }: { item: Item }) {
  const p = item.payload;
  const path = String(p.path ?? '');
  const action = String(p.action ?? 'change');
  const [lines, setLines] = useState<DiffLine[] | null>(null);
  const [open, setOpen] = useState<boolean | null>(null);
  useEffect(() => {
    let live = true;
    if (typeof p.diff === 'string' || typeof p.patch === 'string' || typeof p.before === 'string' || typeof p.after === 'string') {
      void import('./diffview').then((m) => live && setLines(m.diffLines(p)));
    }
    return () => {
      live = false;
    };
  }, [item.payload]);
  const added = lines?.filter((l) => l.sign === '+').length ?? 0;
  const removed = lines?.filter((l) => l.sign === '-').length ?? 0;
  const expanded = open ?? (lines !== null && lines.length <= DIFF_LINES);
  return html`
    <div class="file-head">
      <span class="who">File</span>
      <code class="path">${path}</code>
      <span class="badge">${actionLabel(action)}</span>
      ${lines ? html`<span class="counts" data-testid="diff-counts"><span class="add">+${added}</span> <span class="del">−${removed}</span></span>` : null}
      ${p.truncated || p.diffTruncated ? html`<span class="badge">too large to show</span>` : null}
      ${lines && lines.length > 0 ? html`<button class="link" aria-expanded=${expanded} onClick=${() => setOpen(!expanded)}>${expanded ? 'Hide changes' : 'Show changes'}</button>` : null}
    </div>
    ${expanded && lines
      ? html`<pre class="diff" data-testid="diff" tabindex="0">${lines.map((l, i) => html`<span key=${i} class=${'dl dl-' + (l.sign === '+' ? 'add' : l.sign === '-' ? 'del' : l.sign === '@' ? 'hunk' : 'ctx')}>${l.sign === '@' ? l.text : l.sign + ' ' + l.text}${'\n'}</span>`)}</pre>`
      : null}
  `;
}

function actionLabel(action: string): string {
  switch (action) {
    case 'write':
      return 'written';
    case 'append':
      return 'appended';
    case 'add':
    case 'create':
      return 'created';
    case 'delete':
      return 'deleted';
    case 'update':
    case 'edit':
      return 'edited';
    default:
      return action;
  }
}

function ApprovalCard({ ctl, approval }: Props & { approval: Approval }) {
  const [busy, setBusy] = useState(false);
  const decide = async (d: 'approve' | 'deny') => {
    setBusy(true);
    await ctl.respond(approval, d);
    setBusy(false);
  };
  return html`
    <div class="approval" data-testid="approval" data-approval-id=${approval.id} role="group" aria-label="Approval needed">
      <div class="approval-text"><span class="who">Approval needed</span><span class="summary">${approval.summary}</span></div>
      <div class="approval-actions">
        <button data-decision="approve" disabled=${busy || !ctl.rt.connected} onClick=${() => void decide('approve')}>Approve</button>
        <button data-decision="deny" class="secondary" disabled=${busy || !ctl.rt.connected} onClick=${() => void decide('deny')}>Deny</button>
      </div>
    </div>
  `;
}

function ResolvedCard({ approval }: { approval: Approval & { decision: string } }) {
  return html`<div class="approval resolved" data-testid="approval-resolved" data-decision=${approval.decision}>
    <div class="approval-text"><span class="who">Approval</span><span class="summary">${approval.summary}</span></div><span class=${'badge ' + (approval.decision === 'approved' ? 'ok' : 'bad')}>${statusLabel(approval.decision)}</span>
  </div>`;
}

function Composer({ ctl }: Props) {
  const [text, setText] = useState('');
  const [busy, setBusy] = useState(false);
  const [confirmStop, setConfirmStop] = useState(false);
  const stopRef = useRef<HTMLButtonElement>(null);
  const active = ctl.model?.activeTurn;
  const canSend = ctl.rt.connected && !busy && text.trim() !== '';
  const send = async (steer: boolean) => {
    setBusy(true);
    const ok = await ctl.send(text, steer);
    setBusy(false);
    if (ok) setText('');
  };
  const onKey = (e: KeyboardEvent) => {
    if (e.key === 'Escape' && active) {
      e.preventDefault();
      setConfirmStop(true);
      return;
    }
    if (e.key !== 'Enter' || e.isComposing) return;
    const sends = e.ctrlKey || e.metaKey || (ctl.enterMode === 'send' && !e.shiftKey);
    if (!sends) return;
    e.preventDefault();
    if (canSend) void send(false);
  };
  useEffect(() => {
    if (confirmStop) stopRef.current?.focus();
  }, [confirmStop]);
  useEffect(() => {
    if (!active) setConfirmStop(false);
  }, [active]);
  const hint = ctl.enterMode === 'send' ? 'Enter to send, Shift+Enter for a new line' : 'Ctrl+Enter to send';
  return html`
    <div class="composer" data-testid="composer">
      ${confirmStop && active
        ? html`<div class="confirm" role="alertdialog" aria-label="Stop the running turn?" data-testid="confirm-stop">
            <span>Stop the running turn?</span>
            <button class="danger" ref=${stopRef} onClick=${() => { setConfirmStop(false); void ctl.interrupt(); }}>Stop turn</button>
            <button class="secondary" onClick=${() => setConfirmStop(false)} onKeyDown=${(e: KeyboardEvent) => e.key === 'Escape' && setConfirmStop(false)}>Keep running</button>
          </div>`
        : null}
      <textarea
        data-testid="prompt"
        aria-label="Message to the agent"
        rows="3"
        placeholder=${active ? `Queue a follow-up or steer the running turn… (${hint})` : `Ask the agent… (${hint})`}
        value=${text}
        onInput=${(e: Event) => setText((e.target as HTMLTextAreaElement).value)}
        onKeyDown=${onKey}
      ></textarea>
      <div class="actions">
        <button data-testid="send" disabled=${!canSend} onClick=${() => void send(false)}>${active ? 'Queue' : 'Send'}</button>
        ${active
          ? html`<button data-testid="steer" class="secondary" disabled=${!canSend} onClick=${() => void send(true)}>Steer</button>
              <button data-testid="interrupt" class="danger" disabled=${!ctl.rt.connected} onClick=${() => void ctl.interrupt()} title="Esc">Stop</button>`
          : null}
        <span class="spacer"></span>
        <label class="check small-print"><input type="checkbox" data-testid="enter-sends" checked=${ctl.enterMode === 'send'} onChange=${(e: Event) => ctl.setEnterMode(((e.target as HTMLInputElement).checked ? 'send' : 'newline') as EnterMode)} /> Enter sends</label>
      </div>
    </div>
  `;
}

/** The terminal panel, loaded on first use so the transcript does not pay for xterm. */
function TerminalSlot({ ctl }: Props) {
  const [Panel, setPanel] = useState<null | ((p: Props) => unknown)>(null);
  const [failed, setFailed] = useState(false);
  useEffect(() => {
    let live = true;
    import('./terminal').then(
      (m) => live && setPanel(() => m.TerminalPanel),
      () => live && setFailed(true),
    );
    return () => {
      live = false;
    };
  }, []);
  if (failed) return html`<section class="terminal-panel"><p class="stream-error">The terminal could not be loaded. Reload the page to try again.</p></section>`;
  if (!Panel) return html`<section class="terminal-panel" aria-busy="true"><p class="note">Loading the terminal…</p></section>`;
  return html`<${Panel} ctl=${ctl} />`;
}

function Notices({ ctl }: Props) {
  return html`<div class="notices" role="status" aria-live="polite">
    ${ctl.notices.map((n: Notice) => html`<div key=${n.id} class=${'notice notice-' + n.kind} data-testid="notice" data-kind=${n.kind} data-code=${n.code ?? ''}>
        <span class="notice-text">${n.text}</span>
        ${n.action ? html`<button class="small" data-testid="notice-action" onClick=${() => { ctl.dismiss(n.id); n.action!.run(); }}>${n.action.label}</button>` : null}
        <button class="icon small" aria-label="Dismiss" onClick=${() => ctl.dismiss(n.id)}>×</button>
      </div>`)}
  </div>`;
}

function inputValue(e: Event): string {
  return (e.target as HTMLInputElement).value;
}
