// The wire types of the protocol (docs/PROTOCOL.md) are generated from the
// contract's Go types (shared/api) into protocol.gen.ts; this module names
// them as the client uses them. Only UI-side types are written here.

import type { TurnStatus } from './protocol.gen';

export type {
  Approval,
  Event as ThreadEvent,
  InitializeParams,
  InitializeResult,
  Item,
  MethodName,
  Methods,
  BusinessMethod,
  NotificationName,
  Notifications,
  ProfileInfo as Profile,
  ReplayParams,
  ReplayResult,
  RetryPolicy,
  SearchHit,
  ServiceInfo,
  TerminalInfo,
  TerminalReadResult,
  Thread,
  ThreadStartParams,
  Turn,
  TurnError,
  TurnStatus,
  TurnSteerParams,
  TurnSubmitParams,
  WorkspaceInfo as Workspace,
} from './protocol.gen';

/** A JSON object as the client reads it (event and item payloads, whose shape depends on their type). */
export type JsonObject = Record<string, unknown>;

/** A payload (unknown on the wire) as a JSON object: anything else reads as an empty one. */
export function asObject(v: unknown): JsonObject {
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as JsonObject) : {};
}

export const ACTIVE_TURN: ReadonlySet<TurnStatus> = new Set(['queued', 'starting', 'running', 'waitingApproval']);
