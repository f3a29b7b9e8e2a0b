// Windowing arithmetic for the transcript (views.ts ThreadView): only the
// rows near the view are in the page; spacers stand in for the others, as
// tall as those rows were when last measured, or as a guess for their kind
// (the mean of the rows of that kind measured so far) until they are.
// Pure: no DOM here, so node --test covers it.

/** Heights of rows by key: measured where known, else guessed by kind. */
export class RowHeights {
  private readonly known = new Map<string, number>();
  private readonly byKind = new Map<string, { sum: number; n: number }>();

  constructor(
    private readonly guesses: Readonly<Record<string, number>>,
    private readonly fallback = 48,
  ) {}

  get(key: string, kind: string): number {
    const h = this.known.get(key);
    if (h !== undefined) return h;
    const k = this.byKind.get(kind);
    return k ? k.sum / k.n : (this.guesses[kind] ?? this.fallback);
  }

  /** Records a measured height; whether it differs from what was known. */
  set(key: string, kind: string, h: number): boolean {
    if (!Number.isFinite(h) || h < 0) return false;
    const old = this.known.get(key);
    if (old === h) return false;
    const k = this.byKind.get(kind) ?? { sum: 0, n: 0 };
    if (old === undefined) k.n++;
    k.sum += h - (old ?? 0);
    this.byKind.set(kind, k);
    this.known.set(key, h);
    return true;
  }

  get size(): number {
    return this.known.size;
  }
}

/** Prefix sums: out[i] is the top of row i, out[n] the total height. */
export function offsets(heights: readonly number[]): Float64Array {
  const out = new Float64Array(heights.length + 1);
  for (let i = 0; i < heights.length; i++) out[i + 1] = out[i] + heights[i];
  return out;
}

/** The first row whose bottom is below y (n if none). */
export function rowAt(offs: Float64Array, y: number): number {
  const n = offs.length - 1;
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (offs[mid + 1] > y) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/** Rows [start, end) that overlap the band [top, bottom); at least one row when there are rows. */
export function rangeAt(offs: Float64Array, top: number, bottom: number): [number, number] {
  const n = offs.length - 1;
  if (n === 0) return [0, 0];
  const start = Math.min(rowAt(offs, top), n - 1);
  let end = start + 1;
  while (end < n && offs[end] < bottom) end++;
  return [start, end];
}

/** A run of rendered rows [from, to), or a spacer standing in for rows [from, to). */
export interface Segment {
  from: number;
  to: number;
  rows: boolean;
}

/**
 * The transcript as rendered runs and spacers, in order: the window plus
 * the pinned rows (always in the page), adjacent runs merged.
 */
export function segments(n: number, window: [number, number], pinned: readonly number[]): Segment[] {
  const runs: [number, number][] = [];
  if (window[1] > window[0]) runs.push([window[0], window[1]]);
  for (const i of pinned) if (i >= 0 && i < n) runs.push([i, i + 1]);
  runs.sort((a, b) => a[0] - b[0]);
  const merged: [number, number][] = [];
  for (const r of runs) {
    const last = merged[merged.length - 1];
    if (last && r[0] <= last[1]) last[1] = Math.max(last[1], r[1]);
    else merged.push([r[0], r[1]]);
  }
  const out: Segment[] = [];
  let at = 0;
  for (const [from, to] of merged) {
    if (from > at) out.push({ from: at, to: from, rows: false });
    out.push({ from, to, rows: true });
    at = to;
  }
  if (at < n) out.push({ from: at, to: n, rows: false });
  return out;
}
