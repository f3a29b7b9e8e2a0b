// Markdown for agent messages. Model output is untrusted and the page holds
// a session cookie, so: raw HTML in the text is shown as text (never
// parsed), the rendered HTML goes through DOMPurify (no scripts, event
// handlers or javascript: URLs survive) unless it is plain formatting that
// cannot carry any (plainhtml.ts), and links open in a new tab without
// the opener. Code blocks carry a copy button; highlighting loads per
// language on demand (highlight.ts), after the text is already readable.

import DOMPurify from 'dompurify';
import { Marked, type Tokens } from 'marked';
import { plainFormatting } from './plainhtml';

const escapes: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => escapes[c]);
}

const marked = new Marked({
  gfm: true,
  breaks: true,
  async: false,
  renderer: {
    // Raw HTML from the model is text, not markup.
    html({ text }: Tokens.HTML | Tokens.Tag): string {
      return escapeHtml(text);
    },
    code({ text, lang }: Tokens.Code): string {
      const language = (lang ?? '').trim().split(/\s+/)[0].toLowerCase().replace(/[^a-z0-9+#-]/g, '');
      const cls = language ? ` class="language-${language}"` : '';
      return (
        `<div class="code-block"><div class="code-head"><span class="code-lang">${escapeHtml(language || 'text')}</span>` +
        `<button type="button" class="copy" data-copy="1" aria-label="Copy code">Copy</button></div>` +
        `<pre><code${cls}>${escapeHtml(text)}</code></pre></div>`
      );
    },
  },
});

let hooked = false;
function hook(): void {
  if (hooked) return;
  hooked = true;
  DOMPurify.addHook('afterSanitizeAttributes', (node) => {
    if (node.tagName === 'A') {
      node.setAttribute('target', '_blank');
      node.setAttribute('rel', 'noopener noreferrer nofollow');
    }
  });
}

const cache = new Map<string, string>();
const CACHE_MAX = 4000;

/** Sanitized HTML for a Markdown text (memoized: a long thread re-renders often). */
export function renderMarkdown(text: string, remember = true): string {
  const hit = cache.get(text);
  if (hit !== undefined) return hit;
  const raw = (marked.parse(text) as string).trim();
  const clean = plainFormatting(raw) ? raw : sanitize(raw);
  if (!remember) return clean;
  if (cache.size >= CACHE_MAX) cache.delete(cache.keys().next().value as string);
  cache.set(text, clean);
  return clean;
}

function sanitize(raw: string): string {
  hook();
  return DOMPurify.sanitize(raw, {
    FORBID_TAGS: ['style', 'form', 'input', 'textarea', 'select', 'iframe', 'object', 'embed', 'svg', 'math'],
    FORBID_ATTR: ['style'],
    ALLOWED_URI_REGEXP: /^(?:https?:|mailto:|#)/i,
  });
}

/**
 * Texts that make marked (and DOMPurify) compile what a transcript uses,
 * one a task. The first texts a page renders cost a hundred times what
 * later ones do (functions and regular expressions compiled on first use,
 * and again when they turn hot): done while the page waits for a thread's
 * history, that is not in the task that draws it.
 */
const WARM_UP = ['a', 'a\nb', '**a** *b*', '`a`', '- a\n- b', '1. a', '# a', '> a', '~~a~~', '[a](https://a.invalid)', '```\na\n```'];

/** Renders the warm-up texts twice over (the second time tiers up), each in a task of its own. */
export function warmUp(): void {
  let i = 0;
  const step = () => {
    const text = WARM_UP[i % WARM_UP.length];
    const raw = (marked.parse(text) as string).trim();
    if (!plainFormatting(raw)) sanitize(raw);
    if (++i < 2 * WARM_UP.length) setTimeout(step, 0);
  };
  setTimeout(step, 0);
}

/** The HTML for a text already rendered and remembered, if any. */
export function cachedMarkdown(text: string): string | undefined {
  return cache.get(text);
}

/** Longest run of rendering for the rows in view in one task (ms): the rest goes to the deferred slices. */
const EAGER_MS = 12;
/** When the current task's first eager render started; reset by a timer (the next task). */
let eagerSince: number | undefined;

/**
 * The HTML for a text in view: rendered now while this task has spent
 * less than EAGER_MS on such renders, else undefined (the caller shows
 * the plain text and asks renderMarkdownLater). A draw of many rows in
 * view, or a slow machine, so never makes one long task of them.
 */
export function renderMarkdownNow(text: string): string | undefined {
  const hit = cache.get(text);
  if (hit !== undefined) return hit;
  const now = performance.now();
  if (eagerSince === undefined) {
    eagerSince = now;
    setTimeout(() => (eagerSince = undefined), 0);
  } else if (now - eagerSince > EAGER_MS) {
    return undefined;
  }
  return renderMarkdown(text);
}

/** Longest run of deferred rendering in one task (ms): well under the 50 ms of a long task. */
const SLICE_MS = 8;
/** Deferred renders waiting; a bound, so a view torn down mid-flood cannot pile them up. */
const LATER_MAX = 4000;

interface Later {
  text: string;
  /** Whether the row still wants it (false once it left the page). */
  wanted: () => boolean;
  done: () => void;
}

const later: Later[] = [];
let draining: ReturnType<typeof setTimeout> | undefined;

/**
 * Renders text in a later task, in slices of at most SLICE_MS, then calls
 * done (the result is in the cache). The rows near the view but outside
 * it use this, so drawing them never makes one long task; the newest
 * request goes first (what was drawn last is what the view moved to).
 */
export function renderMarkdownLater(text: string, wanted: () => boolean, done: () => void): void {
  if (later.length >= LATER_MAX) later.shift();
  later.push({ text, wanted, done });
  draining ??= setTimeout(drain, 0);
}

function drain(): void {
  draining = undefined;
  const end = performance.now() + SLICE_MS;
  const finished: Later[] = [];
  while (later.length > 0 && performance.now() < end) {
    const job = later.pop()!;
    if (!job.wanted()) continue;
    renderMarkdown(job.text);
    finished.push(job);
  }
  for (const job of finished) job.done();
  if (later.length > 0) draining = setTimeout(drain, 0);
}
