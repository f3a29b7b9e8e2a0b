// Controller: the page's state and actions, between the runtime and the
// views. Views read its fields and call its methods; it notifies them
// (batched) when something changed.

import { logout } from './auth';
import { newMessageId } from './ids';
import { ThreadModel } from './model';
import { RpcError } from './rpc';
import { Offline, ResultUnknown, type BrowserRuntime } from './runtime';
import { ThreadEventStream } from './stream';
import type { Approval, ReplayResult, Thread, ThreadEvent } from './types';

export type NoticeKind = 'error' | 'unknown' | 'info';

export interface Notice {
  id: number;
  kind: NoticeKind;
  text: string;
}

export interface NewThread {
  workspace: string;
  profile: string;
  title: string;
  trust: boolean;
}

const SELECTED_KEY = 'deepcode.selectedThread';
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

  private readonly listeners = new Set<() => void>();
  private scheduled = false;
  private noticeId = 0;
  private disposeSync: (() => void) | undefined;
  private refreshTimer: ReturnType<typeof setTimeout> | undefined;
  /** The key of a keyed submission whose outcome is not known yet: resending the same request reuses it. */
  private unsettled: { signature: string; messageId: string } | undefined;

  constructor(
    readonly rt: BrowserRuntime,
    private readonly storage: Storage | null,
  ) {
    rt.onState((s) => {
      // Nothing more can be read: stop following the thread.
      if (s.kind === 'signedOut' || s.kind === 'stale' || s.kind === 'failed') this.disposeSync?.();
      this.changed();
    });
    rt.onReady(() => void this.refreshThreads());
    rt.on('thread.event', (p) => this.sawEvent(p as ThreadEvent));
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
      const res = await this.rt.call<{ threads: Thread[]; nextCursor?: string }>('thread/list', { limit: THREAD_PAGE });
      this.threads = res.threads;
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
      const res = await this.rt.call<{ threads: Thread[]; nextCursor?: string }>('thread/list', { limit: THREAD_PAGE, cursor });
      const seen = new Set(this.threads.map((t) => t.id));
      this.threads = [...this.threads, ...res.threads.filter((t) => !seen.has(t.id))];
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
    const model = new ThreadModel(threadId);
    this.model = model;
    const stream = new ThreadEventStream(threadId, (p) => this.rt.call<ReplayResult>('event/replay', p), {
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
        this.streamError = `${describe(err)}${fatal ? '' : ' — retrying'}`;
        this.changed();
      },
    });
    const offLive = this.rt.on('thread.event', (p) => stream.live(p as ThreadEvent));
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
      const params: Record<string, unknown> = { workspace: p.workspace.trim(), profile: p.profile.trim() || 'shell', trust: p.trust };
      if (p.title.trim() !== '') params.title = p.title.trim();
      const res = await this.rt.call<{ thread: Thread }>('thread/start', params);
      this.threads = [res.thread, ...this.threads.filter((t) => t.id !== res.thread.id)];
      this.select(res.thread.id);
      return true;
    } catch (err) {
      this.report('thread/start', err);
      return false;
    }
  }

  /** Starts a turn, or queues one behind the active turn; with steer, adds the text to the running turn. */
  async send(text: string, steer: boolean): Promise<boolean> {
    const model = this.model;
    if (!model || text.trim() === '') return false;
    const threadId = model.threadId;
    const active = model.activeTurn;
    let method = active ? 'turn/enqueue' : 'turn/start';
    const params: Record<string, unknown> = { threadId, input: { text } };
    if (steer) {
      if (!active) {
        this.notice('error', 'No turn is running to steer.');
        return false;
      }
      method = 'turn/steer';
      params.expectedTurnId = active.id;
    }
    params.messageId = this.keyFor(method, params);
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
    this.notices = this.notices.filter((n) => n.id !== id);
    this.changed();
  }

  notice(kind: NoticeKind, text: string): void {
    this.notices = [...this.notices.slice(-4), { id: ++this.noticeId, kind, text }];
    this.changed();
  }

  private keyFor(method: string, params: Record<string, unknown>): string {
    const signature = JSON.stringify([method, params]);
    if (this.unsettled?.signature !== signature) this.unsettled = { signature, messageId: newMessageId() };
    return this.unsettled.messageId;
  }

  private report(what: string, err: unknown): void {
    if (err instanceof ResultUnknown) {
      this.notice('unknown', `RESULT_UNKNOWN: ${err.message}`);
    } else if (err instanceof Offline) {
      if (this.rt.state.kind === 'signedOut' || this.rt.state.kind === 'stale') return;
      this.notice('error', `${what}: not connected, so nothing was sent. Try again once connected.`);
    } else {
      this.notice('error', `${what}: ${describe(err)}`);
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
