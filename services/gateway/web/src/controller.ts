// Controller: the page's state and actions, between the runtime and the
// views. Views read its fields and call its methods; it notifies them
// (batched) when something changed.

import { logout } from './auth';
import { newMessageId } from './ids';
import { humanError, type ErrorAction } from './labels';
import { ThreadModel } from './model';
import { RpcError } from './rpc';
import { Offline, ResultUnknown, type BrowserRuntime } from './runtime';
import { ThreadEventStream } from './stream';
import type { Approval, Profile, SearchHit, Thread, ThreadEvent, ThreadStartParams, TurnSteerParams, TurnSubmitParams, Workspace } from './types';

export type NoticeKind = 'error' | 'unknown' | 'info';

export interface Notice {
  id: number;
  kind: NoticeKind;
  text: string;
  /** The error code behind it (for tests and support), never shown as the message. */
  code?: string;
  action?: { label: string; run: () => void };
}

export type Theme = 'light' | 'dark' | 'system';
/** What plain Enter does in the composer. */
export type EnterMode = 'send' | 'newline';

/** Notices shown at once; older ones leave first. */
const MAX_NOTICES = 3;
/** How long a notice stays (ms); errors with an action stay longer. */
const NOTICE_MS = 6000;
const ACTION_NOTICE_MS = 15000;

export interface NewThread {
  workspace: string;
  profile: string;
  title: string;
  trust: boolean;
}

const SELECTED_KEY = 'deepcode.selectedThread';
const THEME_KEY = 'deepcode.theme';
const ENTER_KEY = 'deepcode.enter';
const TERMINAL_KEY = 'deepcode.terminalOpen';
/** Threads read per thread/list page. */
const THREAD_PAGE = 100;

export class Controller {
  threads: Thread[] = [];
  /** Where the next page of the thread list starts; undefined when the list is complete. */
  threadsCursor: string | undefined;
  loadingThreads = false;
  model: ThreadModel | null = null;
  selectedItem: string | null = null;
  recovering = false;
  streamError: string | null = null;
  notices: Notice[] = [];
  /** The search box's text; results replace the list while it is not empty. */
  query = '';
  searchHits: SearchHit[] | null = null;
  workspaces: Workspace[] = [];
  profiles: Profile[] = [];
  theme: Theme = 'system';
  enterMode: EnterMode = 'send';
  /** The sidebar drawer on narrow screens. */
  drawerOpen = false;
  terminalOpen = false;

  private readonly listeners = new Set<() => void>();
  private scheduled = false;
  private noticeId = 0;
  private disposeSync: (() => void) | undefined;
  private refreshTimer: ReturnType<typeof setTimeout> | undefined;
  /** The key of a keyed submission whose outcome is not known yet: resending the same request reuses it. */
  private unsettled: { signature: string; messageId: string } | undefined;

  private readonly noticeTimers = new Map<number, ReturnType<typeof setTimeout>>();
  private searchSeq = 0;

  constructor(
    readonly rt: BrowserRuntime,
    private readonly storage: Storage | null,
    private readonly prefs: Storage | null = null,
  ) {
    const theme = prefs?.getItem(THEME_KEY);
    if (theme === 'light' || theme === 'dark') this.theme = theme;
    if (prefs?.getItem(ENTER_KEY) === 'newline') this.enterMode = 'newline';
    this.terminalOpen = storage?.getItem(TERMINAL_KEY) === '1';
    rt.onState((s) => {
      // Nothing more can be read: stop following the thread.
      if (s.kind === 'signedOut' || s.kind === 'stale' || s.kind === 'failed') this.disposeSync?.();
      this.changed();
    });
    rt.onReady(() => {
      void this.refreshThreads();
      void this.loadPickers();
    });
    rt.on('thread.event', (p) => this.sawEvent(p));
    const saved = storage?.getItem(SELECTED_KEY);
    if (saved) this.select(saved);
  }

  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Notifies the views once for a burst of changes. */
  changed(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setTimeout(() => {
      this.scheduled = false;
      for (const l of [...this.listeners]) l();
    }, 16);
  }

  get selectedThread(): Thread | undefined {
    return this.threads.find((t) => t.id === this.model?.threadId);
  }

  /** Reads the first page of the thread list again. */
  async refreshThreads(): Promise<void> {
    try {
      const res = await this.rt.call('thread/list', { limit: THREAD_PAGE });
      this.threads = res.threads ?? [];
      this.threadsCursor = res.nextCursor || undefined;
      this.changed();
    } catch (err) {
      this.report('thread/list', err);
    }
  }

  /** Appends the next page of the thread list. */
  async moreThreads(): Promise<void> {
    const cursor = this.threadsCursor;
    if (!cursor || this.loadingThreads) return;
    this.loadingThreads = true;
    this.changed();
    try {
      const res = await this.rt.call('thread/list', { limit: THREAD_PAGE, cursor });
      const seen = new Set(this.threads.map((t) => t.id));
      this.threads = [...this.threads, ...(res.threads ?? []).filter((t) => !seen.has(t.id))];
      this.threadsCursor = res.nextCursor || undefined;
    } catch (err) {
      this.report('thread/list', err);
    } finally {
      this.loadingThreads = false;
      this.changed();
    }
  }

  /**
   * Selects a thread and rebuilds its view from its history. The live
   * listener is installed before the first replay; every (re)connection
   * replays from the cursor.
   */
  select(threadId: string | null): void {
    this.disposeSync?.();
    this.disposeSync = undefined;
    this.model = null;
    this.selectedItem = null;
    this.streamError = null;
    this.recovering = false;
    if (threadId === null) {
      this.storage?.removeItem(SELECTED_KEY);
      this.changed();
      return;
    }
    this.storage?.setItem(SELECTED_KEY, threadId);
    this.drawerOpen = false;
    const model = new ThreadModel(threadId);
    this.model = model;
    const stream = new ThreadEventStream(threadId, (p) => this.rt.call('event/replay', p), {
      apply: (ev) => {
        model.apply(ev);
        this.changed();
      },
      recovering: (on) => {
        this.recovering = on;
        if (on) this.streamError = null;
        this.changed();
      },
      error: (err, fatal) => {
        if (err instanceof RpcError && err.code === 'NOT_FOUND') {
          this.select(null); // the thread is gone (or belongs to another database)
          return;
        }
        const code = err instanceof RpcError ? err.code : 'SERVICE_UNAVAILABLE';
        this.streamError = `${humanError('event/replay', code).text}${fatal ? '' : ' Retrying…'}`;
        this.changed();
      },
    });
    const offLive = this.rt.on('thread.event', (p) => stream.live(p));
    const offReady = this.rt.onReady(() => stream.recover());
    if (this.rt.connected) stream.recover();
    this.disposeSync = () => {
      offLive();
      offReady();
      stream.stop();
    };
    this.changed();
  }

  selectItem(itemId: string): void {
    this.selectedItem = this.selectedItem === itemId ? null : itemId;
    this.changed();
  }

  async createThread(p: NewThread): Promise<boolean> {
    try {
      const params: ThreadStartParams = { workspace: p.workspace.trim(), profile: p.profile.trim() || 'shell', trust: p.trust };
      if (p.title.trim() !== '') params.title = p.title.trim();
      const res = await this.rt.call('thread/start', params);
      this.threads = [res.thread, ...this.threads.filter((t) => t.id !== res.thread.id)];
      this.select(res.thread.id);
      this.drawerOpen = false;
      void this.loadPickers();
      return true;
    } catch (err) {
      this.report('thread/start', err, () => void this.createThread(p), () => void this.createThread({ ...p, trust: true }));
      return false;
    }
  }

  /** Reads the recent workspaces and the profiles for the pickers. */
  async loadPickers(): Promise<void> {
    try {
      const [w, p] = await Promise.all([
        this.rt.call('workspace/list', { limit: 20 }),
        this.rt.call('profile/list', {}),
      ]);
      this.workspaces = w.workspaces ?? [];
      this.profiles = p.profiles ?? [];
      this.changed();
    } catch {
      // An older service without these methods: the fields stay free text.
    }
  }

  async rename(threadId: string, title: string): Promise<boolean> {
    try {
      const res = await this.rt.call('thread/rename', { threadId, title: title.trim() });
      this.threads = this.threads.map((t) => (t.id === threadId ? res.thread : t));
      this.changed();
      return true;
    } catch (err) {
      this.report('thread/rename', err);
      return false;
    }
  }

  /** Archives (or brings back) a thread; archived threads leave the list. */
  async archive(threadId: string, archived = true): Promise<void> {
    try {
      await this.rt.call('thread/archive', { threadId, archived });
      this.threads = this.threads.filter((t) => t.id !== threadId);
      if (this.model?.threadId === threadId) this.select(null);
      this.notice('info', archived ? 'Thread archived.' : 'Thread restored.', undefined, archived ? { label: 'Undo', run: () => void this.archive(threadId, false).then(() => this.refreshThreads()) } : undefined);
    } catch (err) {
      this.report('thread/archive', err);
    }
  }

  /** Searches threads by title and text; an empty query shows the list again. */
  async search(query: string): Promise<void> {
    this.query = query;
    const seq = ++this.searchSeq;
    if (query.trim() === '') {
      this.searchHits = null;
      this.changed();
      return;
    }
    this.changed();
    try {
      const res = await this.rt.call('thread/search', { query: query.trim(), limit: 50 });
      if (seq !== this.searchSeq) return; // a newer query is on its way
      this.searchHits = res.hits;
      this.changed();
    } catch (err) {
      if (seq === this.searchSeq) this.report('thread/search', err);
    }
  }

  setTheme(theme: Theme): void {
    this.theme = theme;
    if (theme === 'system') this.prefs?.removeItem(THEME_KEY);
    else this.prefs?.setItem(THEME_KEY, theme);
    this.changed();
  }

  setEnterMode(mode: EnterMode): void {
    this.enterMode = mode;
    this.prefs?.setItem(ENTER_KEY, mode);
    this.changed();
  }

  toggleDrawer(open?: boolean): void {
    this.drawerOpen = open ?? !this.drawerOpen;
    this.changed();
  }

  toggleTerminal(open?: boolean): void {
    this.terminalOpen = open ?? !this.terminalOpen;
    if (this.terminalOpen) this.storage?.setItem(TERMINAL_KEY, '1');
    else this.storage?.removeItem(TERMINAL_KEY);
    this.changed();
  }

  /** Starts a turn, or queues one behind the active turn; with steer, adds the text to the running turn. */
  async send(text: string, steer: boolean): Promise<boolean> {
    const model = this.model;
    if (!model || text.trim() === '') return false;
    const threadId = model.threadId;
    const active = model.activeTurn;
    let method: 'turn/start' | 'turn/enqueue' | 'turn/steer' = active ? 'turn/enqueue' : 'turn/start';
    const submit = { threadId, input: { text } };
    let unkeyed: Omit<TurnSubmitParams, 'messageId'> | Omit<TurnSteerParams, 'messageId'> = submit;
    if (steer) {
      if (!active) {
        this.notice('error', 'No turn is running, so there is nothing to steer. Send the message instead.');
        return false;
      }
      method = 'turn/steer';
      unkeyed = { ...submit, expectedTurnId: active.id };
    }
    const params: TurnSubmitParams | TurnSteerParams = { ...unkeyed, messageId: this.keyFor(method, unkeyed) };
    try {
      await this.rt.call(method, params);
    } catch (err) {
      if (method === 'turn/start' && err instanceof RpcError && err.code === 'CONFLICT') {
        // Another client started a turn meanwhile: queue behind it.
        this.unsettled = undefined;
        return this.send(text, false);
      }
      if (!(err instanceof ResultUnknown || err instanceof Offline)) this.unsettled = undefined;
      this.report(method, err);
      return false;
    }
    this.unsettled = undefined;
    return true;
  }

  async interrupt(): Promise<void> {
    const model = this.model;
    const active = model?.activeTurn;
    if (!model || !active) return;
    try {
      await this.rt.call('turn/interrupt', { threadId: model.threadId, turnId: active.id });
    } catch (err) {
      this.report('turn/interrupt', err);
    }
  }

  async respond(a: Approval, decision: 'approve' | 'deny'): Promise<void> {
    try {
      await this.rt.call('approval/respond', { approvalId: a.id, revision: a.revision, decision });
    } catch (err) {
      this.report('approval/respond', err);
    }
  }

  async logout(): Promise<void> {
    try {
      await logout();
    } finally {
      this.rt.stop({ kind: 'signedOut' });
    }
  }

  dismiss(id: number): void {
    clearTimeout(this.noticeTimers.get(id));
    this.noticeTimers.delete(id);
    this.notices = this.notices.filter((n) => n.id !== id);
    this.changed();
  }

  /** Shows a notice; it dismisses itself, and at most MAX_NOTICES stay (the oldest leave). */
  notice(kind: NoticeKind, text: string, code?: string, action?: Notice['action']): void {
    // The same sentence again replaces the old one instead of piling up.
    const same = this.notices.find((n) => n.text === text);
    if (same) this.dismiss(same.id);
    const n: Notice = { id: ++this.noticeId, kind, text, code, action };
    const kept = [...this.notices, n];
    for (const old of kept.slice(0, Math.max(0, kept.length - MAX_NOTICES))) this.dismiss(old.id);
    this.notices = [...this.notices, n];
    this.noticeTimers.set(n.id, setTimeout(() => this.dismiss(n.id), action ? ACTION_NOTICE_MS : NOTICE_MS));
    this.changed();
  }

  private keyFor(method: string, params: object): string {
    const signature = JSON.stringify([method, params]);
    if (this.unsettled?.signature !== signature) this.unsettled = { signature, messageId: newMessageId() };
    return this.unsettled.messageId;
  }

  /** Tells the user what went wrong in their words; retry is what the "try again" kind of action does. */
  private report(what: string, err: unknown, retry?: () => void, trust?: () => void): void {
    if (err instanceof Offline && (this.rt.state.kind === 'signedOut' || this.rt.state.kind === 'stale')) return;
    const code = err instanceof ResultUnknown || err instanceof Offline || err instanceof RpcError ? err.code : 'INTERNAL';
    const h = humanError(what, code);
    const kind: NoticeKind = err instanceof ResultUnknown ? 'unknown' : 'error';
    this.notice(kind, h.text, code, this.actionFor(h.action, retry, trust));
  }

  private actionFor(action: ErrorAction | undefined, retry?: () => void, trust?: () => void): Notice['action'] {
    switch (action) {
      case 'trust':
        return trust ? { label: 'Trust this workspace', run: trust } : undefined;
      case 'retry':
        return retry ? { label: 'Try again', run: retry } : undefined;
      case 'reload':
        return this.model ? { label: 'Reload thread', run: () => this.select(this.model!.threadId) } : undefined;
      default:
        return undefined;
    }
  }

  private sawEvent(ev: ThreadEvent): void {
    // Summaries of other threads are best-effort: read the list again
    // after turns change.
    if (!ev.type.startsWith('turn.') && this.threads.some((t) => t.id === ev.threadId)) return;
    if (this.refreshTimer !== undefined) return; // one read per burst of changes
    this.refreshTimer = setTimeout(() => {
      this.refreshTimer = undefined;
      void this.refreshThreads();
    }, 300);
  }
}

export function describe(err: unknown): string {
  if (err instanceof RpcError) return `${err.message} (${err.code})`;
  if (err instanceof Error) return err.message;
  return String(err);
}
