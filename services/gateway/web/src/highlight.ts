// Code highlighting, loaded on demand: highlight.js's core on the first code
// block, each language the first time a block uses it. Nothing here is in
// the initial bundle.

type Loader = () => Promise<{ default: unknown }>;

const languages: Record<string, Loader> = {
  go: () => import('highlight.js/lib/languages/go'),
  js: () => import('highlight.js/lib/languages/javascript'),
  javascript: () => import('highlight.js/lib/languages/javascript'),
  ts: () => import('highlight.js/lib/languages/typescript'),
  typescript: () => import('highlight.js/lib/languages/typescript'),
  json: () => import('highlight.js/lib/languages/json'),
  sh: () => import('highlight.js/lib/languages/bash'),
  bash: () => import('highlight.js/lib/languages/bash'),
  shell: () => import('highlight.js/lib/languages/bash'),
  py: () => import('highlight.js/lib/languages/python'),
  python: () => import('highlight.js/lib/languages/python'),
  rust: () => import('highlight.js/lib/languages/rust'),
  diff: () => import('highlight.js/lib/languages/diff'),
  yaml: () => import('highlight.js/lib/languages/yaml'),
  sql: () => import('highlight.js/lib/languages/sql'),
  css: () => import('highlight.js/lib/languages/css'),
  html: () => import('highlight.js/lib/languages/xml'),
  xml: () => import('highlight.js/lib/languages/xml'),
};

interface Hljs {
  registerLanguage(name: string, lang: unknown): void;
  getLanguage(name: string): unknown;
  highlightElement(el: HTMLElement): void;
}

let core: Promise<Hljs> | undefined;
const loaded = new Map<string, Promise<void>>();

async function ready(lang: string): Promise<Hljs | undefined> {
  const load = languages[lang];
  if (!load) return undefined;
  core ??= import('highlight.js/lib/core').then((m) => m.default as unknown as Hljs);
  const hljs = await core;
  let p = loaded.get(lang);
  if (!p) {
    p = load().then((m) => hljs.registerLanguage(lang, m.default));
    loaded.set(lang, p);
  }
  await p;
  return hljs;
}

/** Highlights the code blocks under root that name a known language. */
export function highlightUnder(root: HTMLElement): void {
  for (const el of root.querySelectorAll<HTMLElement>('pre > code[class^="language-"]:not([data-highlighted])')) {
    const lang = el.className.slice('language-'.length);
    void ready(lang).then((hljs) => {
      if (hljs && el.isConnected && !el.dataset.highlighted) hljs.highlightElement(el);
    }).catch(() => undefined);
  }
}
