// ThreadModel: the selected thread's turns, items and approvals, built only
// from its durable events, each applied once and in order by the
// ThreadEventStream. Entity snapshots (item.completed, turn.*) replace what
// deltas accumulated; deltas after an item completed are ignored.

import { asObject, type Approval, type Item, type JsonObject, type ThreadEvent, type Turn, type TurnError, type TurnStatus } from './types';

export interface ItemView {
  id: string;
  turnId: string;
  kind: string;
  status: string;
  payload: JsonObject;
  /** Agent message text, or command output, as streamed so far. */
  text: string;
  /** When the item started (its first event). */
  at: string;
}

/** One row of a turn, in event order: an item or an approval where it was asked. */
export type Entry = { kind: 'item'; id: string } | { kind: 'approval'; id: string };

export interface TurnView {
  id: string;
  ordinal: number;
  status: TurnStatus;
  error?: TurnError;
  itemIds: string[];
  entries: Entry[];
  createdAt?: string;
  startedAt?: string;
  finishedAt?: string;
}

/** A row of the flattened transcript (what the windowed list renders). */
export type Row =
  | { kind: 'turn'; turn: TurnView }
  | { kind: 'item'; turn: TurnView; id: string }
  | { kind: 'approval'; turn: TurnView; id: string }
  | { kind: 'end'; turn: TurnView };

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
  /** Bumped on every applied event: views memoize on it. */
  version = 0;
  /** The time of the event being applied. */
  private at = '';

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

  /** The approval with this id, pending or decided. */
  approval(id: string): Approval | ResolvedApproval | undefined {
    return this.pending.get(id) ?? this.resolved.get(id);
  }

  /** The transcript as rows, turns in order, each followed by its entries in event order. */
  rows(): Row[] {
    const out: Row[] = [];
    for (const turn of this.turnList) {
      out.push({ kind: 'turn', turn });
      for (const e of turn.entries) out.push({ kind: e.kind, turn, id: e.id });
      if (turn.error) out.push({ kind: 'end', turn });
    }
    return out;
  }

  apply(ev: ThreadEvent): void {
    const p = asObject(ev.payload);
    this.version++;
    this.at = ev.at;
    switch (ev.type) {
      case 'turn.queued':
      case 'turn.completed':
      case 'turn.failed':
      case 'turn.interrupted':
        this.upsertTurn(p.turn as Turn);
        break;
      case 'turn.started': {
        const t = this.turn(p.turnId as string);
        t.startedAt ??= ev.at;
        this.setStatus(t.id, 'running');
        break;
      }
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
        if (this.resolved.has(a.id)) break;
        if (!this.pending.has(a.id)) this.turn(a.turnId).entries.push({ kind: 'approval', id: a.id });
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
      t = { id, ordinal: Number.MAX_SAFE_INTEGER, status: 'queued', itemIds: [], entries: [] };
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
    if (turn.createdAt) t.createdAt = turn.createdAt;
    if (turn.startedAt) t.startedAt = turn.startedAt;
    if (turn.finishedAt) t.finishedAt = turn.finishedAt;
  }

  private setStatus(turnId: string, status: TurnStatus): void {
    const t = this.turn(turnId);
    if (!TERMINAL.has(t.status)) t.status = status;
  }

  private upsertItem(item: Item): void {
    const t = this.turn(item.turnId);
    let v = this.items.get(item.id);
    if (!v) {
      v = { id: item.id, turnId: item.turnId, kind: item.kind, status: item.status, payload: {}, text: '', at: item.createdAt || this.at };
      this.items.set(item.id, v);
      t.itemIds.push(item.id);
      t.entries.push({ kind: 'item', id: item.id });
    }
    v.kind = item.kind;
    v.status = item.status;
    v.payload = asObject(item.payload);
    const final = finalText(item);
    // A command's final payload keeps only the tail of its output: keep the
    // streamed whole when there is one.
    if (final !== undefined && item.status !== 'inProgress' && !(item.kind === 'commandExecution' && v.text !== '')) v.text = final;
  }

  private delta(turnId: string, itemId: string, delta: JsonObject): void {
    let v = this.items.get(itemId);
    if (!v) {
      // item.started precedes its deltas in the log; be lenient anyway.
      v = { id: itemId, turnId, kind: 'agentMessage', status: 'inProgress', payload: {}, text: '', at: this.at };
      this.items.set(itemId, v);
      const t = this.turn(turnId);
      t.itemIds.push(itemId);
      t.entries.push({ kind: 'item', id: itemId });
    }
    if (v.status !== 'inProgress') return;
    if (typeof delta?.text === 'string') v.text += delta.text;
  }
}

/** The whole text an ended item carries in its payload, if any. */
function finalText(item: Item): string | undefined {
  const p = asObject(item.payload);
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
