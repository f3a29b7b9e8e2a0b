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
