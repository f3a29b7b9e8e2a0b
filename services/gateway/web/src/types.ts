// Wire shapes of the business protocol (docs/PROTOCOL.md), as the gateway
// and agentd send them.

export type JsonObject = Record<string, unknown>;

export interface Thread {
  id: string;
  workspace: string;
  profile: string;
  title: string;
  kind: string;
  status: string;
  headSequence: number;
  turnCount: number;
  createdAt: string;
  updatedAt: string;
  /** The status of the thread's latest turn (absent before its first turn). */
  lastTurnStatus?: string;
  archived?: boolean;
}

export type TurnStatus =
  | 'queued'
  | 'starting'
  | 'running'
  | 'waitingApproval'
  | 'completed'
  | 'failed'
  | 'interrupted';

export interface TurnError {
  code: string;
  message: string;
  retryable: boolean;
}

export interface Turn {
  id: string;
  threadId: string;
  ordinal: number;
  status: TurnStatus;
  messageId: string;
  profile: string;
  model?: string;
  reasoning?: string;
  error?: TurnError;
  response?: string;
  createdAt: string;
  startedAt?: string;
  finishedAt?: string;
}

export interface Item {
  id: string;
  threadId: string;
  turnId: string;
  kind: string; // userMessage, agentMessage, commandExecution, fileChange, …
  status: string; // inProgress, completed, failed
  payload: JsonObject;
  createdAt: string;
  updatedAt: string;
}

export interface Approval {
  id: string;
  threadId: string;
  turnId: string;
  revision: number;
  status: string; // pending, approved, denied, cancelled
  kind: string;
  summary: string;
  details: unknown;
  createdAt: string;
}

/** One record of a thread's durable event log (thread.event, event/replay). */
export interface ThreadEvent {
  threadId: string;
  sequence: number;
  type: string;
  at: string;
  payload: JsonObject;
}

export interface ReplayParams {
  threadId: string;
  after: number;
  through?: number;
  maxBytes?: number;
}

export interface ReplayResult {
  events: ThreadEvent[];
  nextAfter: number;
  hasMore: boolean;
  /** The committed head captured before the page was read (absent on older servers). */
  headSequence?: number;
}

export type RetryPolicy = 'never' | 'safe' | 'keyed';

export interface ServiceInfo {
  instanceId: string;
  schemaVersion: number;
  transport: string;
  shutdownScope: string;
  frontendBuildId?: string;
  /** The phase when this connection initialized; changes follow as service.phase. */
  phase?: string;
}

export interface InitializeResult {
  protocolVersion: string;
  capabilities: { requestRetry?: Record<string, RetryPolicy> };
  serviceInfo?: ServiceInfo;
}

export const ACTIVE_TURN: ReadonlySet<TurnStatus> = new Set(['queued', 'starting', 'running', 'waitingApproval']);

/** A workspace the service knows (workspace/list), most recently used first. */
export interface Workspace {
  path: string;
  trusted: boolean;
  threadCount: number;
  lastUsedAt: string;
}

/** A profile the service can run (profile/list). */
export interface Profile {
  name: string;
  provider: string;
  model?: string;
  default?: boolean;
}

/** A thread found by thread/search, with where the text matched. */
export interface SearchHit {
  thread: Thread;
  /** A short excerpt around the match, plain text. */
  snippet: string;
  /** "title" or "text". */
  field: string;
}
