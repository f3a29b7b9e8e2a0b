// One JSON-RPC 2.0 connection over one WebSocket: one object per text
// message, numbered request ids, notifications handed to one listener that
// exists before the first request is sent.

/** error.data of every deepcode error. */
export interface ErrorData {
  code: string;
  retryable: boolean;
  [member: string]: unknown;
}

/** An error answer from the service. */
export class RpcError extends Error {
  readonly rpcCode: number;
  readonly data: ErrorData;
  constructor(rpcCode: number, message: string, data: ErrorData) {
    super(message);
    this.name = 'RpcError';
    this.rpcCode = rpcCode;
    this.data = data;
  }
  get code(): string {
    return this.data.code;
  }
  get retryable(): boolean {
    return this.data.retryable;
  }
}

/** The request never left: the socket was not open. Nothing happened. */
export class NotSent extends Error {
  constructor(readonly method: string) {
    super(`${method} was not sent: not connected`);
    this.name = 'NotSent';
  }
}

/** The socket closed after the request was sent and before its answer: its outcome is unknown. */
export class AnswerLost extends Error {
  constructor(readonly method: string) {
    super(`the connection ended before ${method} was answered`);
    this.name = 'AnswerLost';
  }
}

export type NotificationListener = (method: string, params: unknown) => void;

export interface Closed {
  code: number;
  reason: string;
  /** Whether the socket had opened: a refused upgrade never opens. */
  opened: boolean;
}

interface Pending {
  method: string;
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
}

interface Message {
  jsonrpc?: string;
  id?: string | number | null;
  method?: string;
  params?: unknown;
  result?: unknown;
  error?: { code: number; message: string; data?: ErrorData };
}

export class RpcSocket {
  private readonly ws: WebSocket;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private wasOpen = false;
  /** Resolves when the socket opens; rejects if it closes first. */
  readonly opened: Promise<void>;
  /** Resolves once, when the socket has closed. */
  readonly closed: Promise<Closed>;

  constructor(url: string, onNotification: NotificationListener) {
    this.ws = new WebSocket(url);
    let opened!: () => void;
    let failed!: (err: Error) => void;
    this.opened = new Promise<void>((resolve, reject) => {
      opened = resolve;
      failed = reject;
    });
    this.opened.catch(() => undefined); // observed through closed as well
    this.closed = new Promise<Closed>((resolve) => {
      this.ws.onclose = (ev) => {
        const lost = [...this.pending.values()];
        this.pending.clear();
        for (const p of lost) p.reject(new AnswerLost(p.method));
        if (!this.wasOpen) failed(new Error(`cannot connect to ${url}`));
        resolve({ code: ev.code, reason: ev.reason, opened: this.wasOpen });
      };
    });
    this.ws.onopen = () => {
      this.wasOpen = true;
      opened();
    };
    this.ws.onmessage = (ev) => this.receive(ev.data, onNotification);
  }

  get isOpen(): boolean {
    return this.ws.readyState === WebSocket.OPEN;
  }

  /** Sends one request and waits for its answer. */
  call<T>(method: string, params?: object): Promise<T> {
    if (!this.isOpen) return Promise.reject(new NotSent(method));
    const id = this.nextId++;
    const msg: Message = { jsonrpc: '2.0', id, method };
    if (params !== undefined) msg.params = params;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { method, resolve: resolve as (v: unknown) => void, reject });
      try {
        this.ws.send(JSON.stringify(msg));
      } catch {
        this.pending.delete(id);
        reject(new NotSent(method));
      }
    });
  }

  close(code = 1000, reason = ''): void {
    if (this.ws.readyState === WebSocket.CLOSED) return;
    this.ws.close(code, reason);
  }

  private receive(data: unknown, onNotification: NotificationListener): void {
    if (typeof data !== 'string') return; // the service sends text only
    let msg: Message;
    try {
      msg = JSON.parse(data) as Message;
    } catch {
      this.close(1007, 'invalid JSON');
      return;
    }
    if (msg.method !== undefined) {
      if (msg.id === undefined) {
        onNotification(msg.method, msg.params);
      } else {
        // The service does not call browsers; refuse politely.
        this.ws.send(JSON.stringify({ jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: 'no methods here' } }));
      }
      return;
    }
    if (typeof msg.id !== 'number') return;
    const p = this.pending.get(msg.id);
    if (!p) return;
    this.pending.delete(msg.id);
    if (msg.error) {
      const data = msg.error.data ?? { code: 'INTERNAL', retryable: false };
      p.reject(new RpcError(msg.error.code, msg.error.message, data));
    } else {
      p.resolve(msg.result);
    }
  }
}
