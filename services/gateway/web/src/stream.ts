// ThreadEventStream feeds one thread's durable events to the view through
// ONE contiguous cursor (the last sequence applied):
//
// - a live event exactly at cursor+1 is applied at once; an older one is
//   ignored (already applied);
// - a later one means events were missed: recovery replays from the cursor
//   with event/replay, fixing the cutoff (`through`) to the headSequence of
//   the round's first page and paging until hasMore is false. Live payloads
//   overlapping a recovery are read from the durable log, not queued;
// - one recovery runs at a time; a gap noticed during it asks for another
//   round after it, so a dropped final event is not missed;
// - recover() is also what a (re)connection calls: replay from the cursor.
//
// A replay that skips a sequence, names another thread, moves its captured
// head backwards or stops advancing is rejected rather than trusted.

import { RpcError } from './rpc';
import type { ReplayParams, ReplayResult, ThreadEvent } from './types';

export type Replay = (params: ReplayParams) => Promise<ReplayResult>;

export interface StreamHooks {
  /** Called exactly once per sequence, in order. */
  apply(event: ThreadEvent): void;
  /** A recovery started (true) or ended (false). */
  recovering?(active: boolean): void;
  /** A recovery failed; fatal errors are not retried automatically. */
  error?(err: unknown, fatal: boolean): void;
}

/** The replayed history cannot be trusted. */
export class ReplayError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ReplayError';
  }
}

/** Largest page event/replay accepts (maxBytes). */
export const MAX_REPLAY_BYTES = 786_432;

export class ThreadEventStream {
  private cursor = 0;
  private recoveringNow = false;
  private recheck = false;
  private stopped = false;
  private failures = 0;
  private retryTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    readonly threadId: string,
    private readonly replay: Replay,
    private readonly hooks: StreamHooks,
  ) {}

  /** The last sequence applied. */
  get position(): number {
    return this.cursor;
  }

  get recovering(): boolean {
    return this.recoveringNow;
  }

  /** A live thread.event notification (any thread). */
  live(event: ThreadEvent): void {
    if (this.stopped || event.threadId !== this.threadId) return;
    if (event.sequence <= this.cursor) return;
    if (event.sequence === this.cursor + 1) {
      this.advance(event);
      return;
    }
    this.recover();
  }

  /** Replays from the cursor; during a recovery, asks for one more round. */
  recover(): void {
    if (this.stopped) return;
    clearTimeout(this.retryTimer);
    if (this.recoveringNow) {
      this.recheck = true;
      return;
    }
    void this.run();
  }

  /** Stops: late replay answers and errors are ignored. */
  stop(): void {
    this.stopped = true;
    clearTimeout(this.retryTimer);
  }

  private advance(event: ThreadEvent): void {
    this.cursor = event.sequence;
    this.hooks.apply(event);
  }

  private async run(): Promise<void> {
    this.recoveringNow = true;
    this.hooks.recovering?.(true);
    try {
      do {
        this.recheck = false;
        await this.round();
      } while (this.recheck && !this.stopped);
      this.failures = 0;
    } catch (err) {
      if (this.stopped) return;
      const fatal = err instanceof ReplayError || (err instanceof RpcError && !err.retryable && err.code !== 'SERVICE_UNAVAILABLE');
      this.hooks.error?.(err, fatal);
      if (!fatal) {
        this.failures++;
        const delay = Math.min(10_000, 500 * 2 ** (this.failures - 1));
        this.retryTimer = setTimeout(() => this.recover(), delay);
      }
    } finally {
      this.recoveringNow = false;
      if (!this.stopped) this.hooks.recovering?.(false);
    }
  }

  /** One round: pages up to the cutoff captured on its first page. */
  private async round(): Promise<void> {
    let through: number | undefined;
    let maxBytes: number | undefined;
    for (;;) {
      const after = this.cursor;
      const params: ReplayParams = { threadId: this.threadId, after };
      if (through !== undefined) params.through = through;
      if (maxBytes !== undefined) params.maxBytes = maxBytes;
      let page: ReplayResult;
      try {
        page = await this.replay(params);
      } catch (err) {
        // One event larger than a default page: ask once for the largest page.
        if (err instanceof RpcError && err.code === 'RESPONSE_TOO_LARGE' && maxBytes === undefined) {
          maxBytes = MAX_REPLAY_BYTES;
          continue;
        }
        throw err;
      }
      if (this.stopped) return;
      if (page.headSequence !== undefined) {
        if (through === undefined) through = page.headSequence;
        else if (page.headSequence < through) throw new ReplayError(`the captured head of ${this.threadId} moved back from ${through} to ${page.headSequence}`);
      }
      if (through !== undefined && through < this.cursor) {
        throw new ReplayError(`the log of ${this.threadId} ends at ${through}, before the ${this.cursor} events already shown`);
      }
      for (const ev of page.events ?? []) {
        if (ev.threadId !== this.threadId) throw new ReplayError(`replay of ${this.threadId} returned an event of ${ev.threadId}`);
        if (ev.sequence <= this.cursor) continue; // applied live meanwhile
        if (ev.sequence !== this.cursor + 1) throw new ReplayError(`replay of ${this.threadId} skipped sequence ${this.cursor + 1}`);
        this.advance(ev);
      }
      if (this.cursor < page.nextAfter) throw new ReplayError(`replay of ${this.threadId} skipped to ${page.nextAfter} from ${this.cursor}`);
      if (!page.hasMore) return;
      if (page.nextAfter <= after) throw new ReplayError(`replay of ${this.threadId} did not advance past ${after}`);
      if (through !== undefined && this.cursor >= through) return;
    }
  }
}
