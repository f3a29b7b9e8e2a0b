// ThreadModel: the selected thread's turns, items and approvals, built only
// from its durable events, each applied once and in order by the
// ThreadEventStream. Entity snapshots (item.completed, turn.*) replace what
// deltas accumulated; deltas after an item completed are ignored.

import type { Approval, Item, JsonObject, ThreadEvent, Turn, TurnError, TurnStatus } from './types';

export interface ItemView {
  id: string;
  turnId: string;
  kind: string;
  status: string;
  payload: JsonObject;
  /** Agent message text, or command output, as streamed so far. */
  text: string;
}

export interface TurnView {
  id: string;
  ordinal: number;
  status: TurnStatus;
  error?: TurnError;
  itemIds: string[];
}

export interface ResolvedApproval extends Approval {
  decision: string;
}

const TERMINAL: ReadonlySet<string> = new Set(['completed', 'failed', 'interrupted']);

export class ThreadModel {
  readonly turns = new Map<string, TurnView>();
  readonly items = new Map<string, ItemView>();
  /** Approvals waiting for a decision, by id. */
  readonly pending = new Map<string, Approval>();
  /** Decided approvals, by id (shown in their turn). */
  readonly resolved = new Map<string, ResolvedApproval>();
  private order: string[] = [];

  constructor(readonly threadId: string) {}

  /** Turns in order. */
  get turnList(): TurnView[] {
    return this.order.map((id) => this.turns.get(id)!).sort((a, b) => a.ordinal - b.ordinal);
  }

  /** The first turn that has not ended (the one steer and interrupt act on). */
  get activeTurn(): TurnView | undefined {
    return this.turnList.find((t) => !TERMINAL.has(t.status) && t.status !== 'queued') ?? this.turnList.find((t) => !TERMINAL.has(t.status));
  }

  approvalsOf(turnId: string): Approval[] {
    return [...this.pending.values()].filter((a) => a.turnId === turnId);
  }

  resolvedOf(turnId: string): ResolvedApproval[] {
    return [...this.resolved.values()].filter((a) => a.turnId === turnId);
  }

  apply(ev: ThreadEvent): void {
    const p = ev.payload;
    switch (ev.type) {
      case 'turn.queued':
      case 'turn.completed':
      case 'turn.failed':
      case 'turn.interrupted':
        this.upsertTurn(p.turn as Turn);
        break;
      case 'turn.started':
        this.setStatus(p.turnId as string, 'running');
        break;
      case 'item.started':
      case 'item.completed':
        this.upsertItem(p.item as Item);
        break;
      case 'turn.steered':
        this.upsertItem(p.item as Item);
        break;
      case 'item.delta':
        this.delta(p.turnId as string, p.itemId as string, p.delta as JsonObject);
        break;
      case 'approval.requested': {
        const a = p.approval as Approval;
        this.pending.set(a.id, a);
        this.setStatus(a.turnId, 'waitingApproval');
        break;
      }
      case 'approval.resolved': {
        const id = p.approvalId as string;
        const a = this.pending.get(id);
        if (!a) break;
        this.pending.delete(id);
        this.resolved.set(id, { ...a, revision: p.revision as number, decision: p.decision as string });
        const turn = this.turns.get(a.turnId);
        if (turn?.status === 'waitingApproval' && this.approvalsOf(a.turnId).length === 0) turn.status = 'running';
        break;
      }
      default:
        break; // a newer event type: nothing to show yet
    }
  }

  private turn(id: string): TurnView {
    let t = this.turns.get(id);
    if (!t) {
      t = { id, ordinal: Number.MAX_SAFE_INTEGER, status: 'queued', itemIds: [] };
      this.turns.set(id, t);
      this.order.push(id);
    }
    return t;
  }

  private upsertTurn(turn: Turn): void {
    const t = this.turn(turn.id);
    t.ordinal = turn.ordinal;
    t.status = turn.status;
    if (turn.error) t.error = turn.error;
  }

  private setStatus(turnId: string, status: TurnStatus): void {
    const t = this.turn(turnId);
    if (!TERMINAL.has(t.status)) t.status = status;
  }

  private upsertItem(item: Item): void {
    const t = this.turn(item.turnId);
    let v = this.items.get(item.id);
    if (!v) {
      v = { id: item.id, turnId: item.turnId, kind: item.kind, status: item.status, payload: {}, text: '' };
      this.items.set(item.id, v);
      t.itemIds.push(item.id);
    }
    v.kind = item.kind;
    v.status = item.status;
    v.payload = item.payload ?? {};
    const final = finalText(item);
    // A command's final payload keeps only the tail of its output: keep the
    // streamed whole when there is one.
    if (final !== undefined && item.status !== 'inProgress' && !(item.kind === 'commandExecution' && v.text !== '')) v.text = final;
  }

  private delta(turnId: string, itemId: string, delta: JsonObject): void {
    let v = this.items.get(itemId);
    if (!v) {
      // item.started precedes its deltas in the log; be lenient anyway.
      v = { id: itemId, turnId, kind: 'agentMessage', status: 'inProgress', payload: {}, text: '' };
      this.items.set(itemId, v);
      this.turn(turnId).itemIds.push(itemId);
    }
    if (v.status !== 'inProgress') return;
    if (typeof delta?.text === 'string') v.text += delta.text;
  }
}

/** The whole text an ended item carries in its payload, if any. */
function finalText(item: Item): string | undefined {
  const p = item.payload ?? {};
  switch (item.kind) {
    case 'userMessage':
    case 'agentMessage':
      return typeof p.text === 'string' ? p.text : undefined;
    case 'commandExecution':
      return typeof p.output === 'string' ? p.output : undefined;
    default:
      return undefined;
  }
}
