// BrowserRuntime: the page's one business connection. It reconnects with
// bounded exponential backoff, re-initializes every connection, checks the
// frontend build id, and honours the service's retry contract
// (capabilities.requestRetry):
//
//   safe   repeated after a lost answer;
//   keyed  repeated only with the same request (and so the same messageId);
//   never  (and anything unlisted) never resent and never queued offline:
//          a lost answer is RESULT_UNKNOWN for the user to resolve.

// The version sent in initialize is the generated contract's, never a copy.
import { PROTOCOL_VERSION } from './protocol.gen';
import { AnswerLost, NotSent, RpcError, RpcSocket } from './rpc';
import type { BusinessMethod, InitializeParams, InitializeResult, Methods, NotificationName, Notifications, RetryPolicy } from './types';


export type ConnectionState =
  | { kind: 'connecting' }
  | { kind: 'connected' }
  | { kind: 'reconnecting'; attempt: number }
  /** The browser session is gone (restart, logout, expiry): a new link is needed. */
  | { kind: 'signedOut' }
  /** The service serves another build of this page: reload. */
  | { kind: 'stale'; serviceBuildId: string }
  | { kind: 'failed'; message: string };

export type SessionCheck = () => Promise<'valid' | 'invalid' | 'unreachable'>;

export interface RuntimeOptions {
  url: string;
  buildId: string;
  version: string;
  /** Whether the browser session still exists: a refused upgrade looks like any other failure to a page. */
  checkSession: SessionCheck;
  initialBackoffMs?: number;
  maxBackoffMs?: number;
}

/** A "never" method was sent and its answer lost: whether it took effect is unknown. */
export class ResultUnknown extends Error {
  readonly code = 'RESULT_UNKNOWN';
  constructor(readonly method: string) {
    super(`the connection ended before ${method} was answered: its result is unknown. It was not resent; check the current state before trying again.`);
    this.name = 'ResultUnknown';
  }
}

/** The call was not sent because the page is not connected (nothing happened). */
export class Offline extends Error {
  readonly code = 'OFFLINE';
  constructor(readonly method: string) {
    super(`not connected: ${method} was not sent`);
    this.name = 'Offline';
  }
}

/** How many times a safe or keyed call is repeated after lost answers. */
const MAX_REPEATS = 5;

/** How long a connection may take to open and initialize. */
const CONNECT_TIMEOUT_MS = 20_000;

export function backoffDelay(attempt: number, initialMs: number, maxMs: number): number {
  const exp = Math.min(maxMs, initialMs * 2 ** Math.max(0, attempt - 1));
  return Math.round(exp / 2 + (Math.random() * exp) / 2);
}

type Listener<T> = (value: T) => void;

export class BrowserRuntime {
  state: ConnectionState = { kind: 'connecting' };
  /** The service phase (service.phase notifications). */
  phase = 'running';
  instanceId = '';

  private readonly opts: Required<RuntimeOptions>;
  private socket: RpcSocket | undefined;
  private retry: Record<string, RetryPolicy> = {};
  private attempt = 0;
  private connectedOnce = false;
  private stopped = false;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private readonly notificationListeners = new Map<string, Set<Listener<unknown>>>();
  private readonly stateListeners = new Set<Listener<ConnectionState>>();
  private readonly readyListeners = new Set<Listener<boolean>>();
  private waiters: Array<{ resolve: (s: RpcSocket) => void; reject: (e: Error) => void }> = [];

  constructor(opts: RuntimeOptions) {
    this.opts = { initialBackoffMs: 250, maxBackoffMs: 10_000, ...opts };
  }

  start(): void {
    void this.connect();
  }

  /** Stops for good (no reconnect; pending waits fail), ending in state `final`. */
  stop(final: ConnectionState = { kind: 'signedOut' }): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.socket?.close(1000, 'stopped');
    this.failWaiters(new Offline('any call'));
    this.setState(final);
  }

  /** Listens to one notification method; returns the unsubscribe. */
  on<N extends NotificationName>(method: N, listener: Listener<Notifications[N]>): () => void {
    let set = this.notificationListeners.get(method);
    if (!set) this.notificationListeners.set(method, (set = new Set()));
    const l = listener as Listener<unknown>;
    set.add(l);
    return () => set.delete(l);
  }

  onState(listener: Listener<ConnectionState>): () => void {
    this.stateListeners.add(listener);
    return () => this.stateListeners.delete(listener);
  }

  /** Called after every initialized connection; true for a reconnection. */
  onReady(listener: Listener<boolean>): () => void {
    this.readyListeners.add(listener);
    return () => this.readyListeners.delete(listener);
  }

  get connected(): boolean {
    return this.state.kind === 'connected';
  }

  policy(method: string): RetryPolicy {
    return this.retry[method] ?? 'never';
  }

  /** One call under the retry contract, its params and result typed by the contract (protocol.gen.ts). */
  async call<M extends BusinessMethod>(method: M, params: Methods[M]['params']): Promise<Methods[M]['result']> {
    const policy = this.policy(method);
    // A retried keyed call must be the same request: freeze it now.
    const frozen = JSON.parse(JSON.stringify(params)) as object;
    let repeats = 0;
    for (;;) {
      let sock: RpcSocket;
      if (this.socket && this.connected) {
        sock = this.socket;
      } else if (policy === 'never') {
        throw new Offline(method); // never queued while offline
      } else {
        sock = await this.whenConnected();
      }
      try {
        return await sock.call<Methods[M]['result']>(method, frozen);
      } catch (err) {
        if (err instanceof NotSent) {
          if (policy === 'never') throw new Offline(method);
          continue; // nothing left: wait for the next connection
        }
        if (err instanceof AnswerLost) {
          if (policy === 'never' || ++repeats > MAX_REPEATS) throw new ResultUnknown(method);
          continue; // safe, or keyed with the same key and request
        }
        if (err instanceof RpcError) {
          if (err.code === 'SERVICE_DRAINING') this.setPhase('draining');
          if (policy === 'keyed' && err.code === 'INPUT_DELIVERY_PENDING' && ++repeats <= MAX_REPEATS) {
            await sleep(backoffDelay(repeats, 500, this.opts.maxBackoffMs));
            continue;
          }
        }
        throw err;
      }
    }
  }

  private whenConnected(): Promise<RpcSocket> {
    if (this.stopped) return Promise.reject(new Offline('any call'));
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  private failWaiters(err: Error): void {
    const w = this.waiters;
    this.waiters = [];
    for (const x of w) x.reject(err);
  }

  private setState(s: ConnectionState): void {
    this.state = s;
    for (const l of [...this.stateListeners]) l(s);
  }

  private setPhase(phase: string): void {
    if (this.phase === phase) return;
    this.phase = phase;
    this.setState(this.state); // listeners re-read the phase
  }

  private dispatch(method: string, params: unknown): void {
    if (method === 'service.phase') {
      const phase = (params as { phase?: unknown } | undefined)?.phase;
      if (typeof phase === 'string') this.setPhase(phase);
    }
    const set = this.notificationListeners.get(method);
    if (set) for (const l of [...set]) l(params);
  }

  private async connect(): Promise<void> {
    if (this.stopped) return;
    // The notification listener exists before initialize (which subscribes
    // this connection) and before any replay.
    let sock: RpcSocket;
    try {
      sock = new RpcSocket(this.opts.url, (m, p) => {
        if (sock === this.socket) this.dispatch(m, p);
      });
    } catch (err) {
      // A refused URL (e.g. by the page's CSP) will not get better.
      this.stop({ kind: 'failed', message: `cannot open ${this.opts.url}: ${String(err)}` });
      return;
    }
    this.socket = sock;
    void sock.closed.then(() => this.dropped(sock));
    // A listening socket whose service is down (socket activation) accepts
    // and waits: give up on a connection that does not initialize in time.
    const giveUp = setTimeout(() => sock.close(1000, 'connect timeout'), CONNECT_TIMEOUT_MS);
    try {
      await sock.opened;
      const hello: InitializeParams = {
        protocolVersion: PROTOCOL_VERSION,
        clientInfo: { name: 'deepcode-web', version: this.opts.version, surface: 'web' },
        frontendBuildId: this.opts.buildId,
      };
      const init = await sock.call<InitializeResult>('initialize', hello);
      const serviceBuild = init.serviceInfo?.frontendBuildId ?? '';
      if (serviceBuild !== this.opts.buildId) {
        this.stop({ kind: 'stale', serviceBuildId: serviceBuild });
        return;
      }
      this.retry = init.capabilities.requestRetry ?? {};
      this.instanceId = init.serviceInfo?.instanceId ?? '';
      this.attempt = 0;
      const reconnect = this.connectedOnce;
      this.connectedOnce = true;
      this.phase = init.serviceInfo?.phase || 'running';
      this.setState({ kind: 'connected' });
      const w = this.waiters;
      this.waiters = [];
      for (const x of w) x.resolve(sock);
      for (const l of [...this.readyListeners]) l(reconnect);
    } catch (err) {
      if (err instanceof RpcError && err.code === 'PROTOCOL_MISMATCH') {
        this.stop({ kind: 'failed', message: err.message });
        return;
      }
      sock.close(1000, 'initialize failed');
    } finally {
      clearTimeout(giveUp);
    }
  }

  private async dropped(sock: RpcSocket): Promise<void> {
    if (sock !== this.socket) return;
    this.socket = undefined;
    if (this.stopped) return;
    this.attempt++;
    this.setState({ kind: 'reconnecting', attempt: this.attempt });
    const session = await this.opts.checkSession();
    if (this.stopped) return;
    if (session === 'invalid') {
      this.stop({ kind: 'signedOut' });
      return;
    }
    const delay = backoffDelay(this.attempt, this.opts.initialBackoffMs, this.opts.maxBackoffMs);
    this.timer = setTimeout(() => void this.connect(), delay);
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
