// Builds dist/ reproducibly: fixed esbuild flags, no timestamps, no source
// paths. The build id is the first 16 hex digits of the SHA-256 of the
// built files (names and contents) with the id itself replaced by a
// placeholder; it names the asset files, is written to dist/build-id.txt
// and is compiled into the bundle with --define (__BUILD_ID__). The Go
// test services/gateway/web_test.go recomputes it the same way.
//
//   hash = SHA-256 over the files but build-id.txt, sorted by path, of
//          "<path>\n<byte length>\n<content>\n" (id → placeholder in both)

import { build } from 'esbuild';
import { createHash } from 'node:crypto';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = dirname(fileURLToPath(import.meta.url));
const dist = join(root, 'dist');
const PLACEHOLDER = '0000000000000000';
const pkg = JSON.parse(await readFile(join(root, 'package.json'), 'utf8'));

const common = {
  absWorkingDir: root,
  bundle: true,
  minify: true,
  write: false,
  sourcemap: false,
  legalComments: 'none',
  charset: 'utf8',
  target: ['es2020', 'chrome103', 'firefox100', 'safari16'],
  logLevel: 'warning',
};

/** Every dist file (but build-id.txt) built with this id. */
async function bundle(id) {
  // ES modules with code splitting: the terminal, the highlighter and the
  // diff view are chunks loaded on first use (content-hashed names, in the
  // same flat assets/ folder as the entry).
  const js = await build({
    ...common,
    entryPoints: { [`app.${id}`]: 'src/main.ts' },
    outdir: 'assets',
    splitting: true,
    format: 'esm',
    chunkNames: 'chunk-[hash]',
    platform: 'browser',
    define: { __BUILD_ID__: JSON.stringify(id), __APP_VERSION__: JSON.stringify(pkg.version) },
  });
  const css = await build({ ...common, entryPoints: ['src/app.css'], outfile: 'app.css' });
  const html = (await readFile(join(root, 'src/index.html'), 'utf8')).replaceAll('__BUILD_ID__', id);
  const files = new Map([['index.html', html]]);
  for (const f of js.outputFiles) files.set(`assets/${f.path.slice(f.path.lastIndexOf('/') + 1)}`, f.text);
  files.set(`assets/app.${id}.css`, css.outputFiles[0].text);
  return files;
}

export function buildId(files, id) {
  const h = createHash('sha256');
  for (const name of [...files.keys()].sort()) {
    const content = Buffer.from(files.get(name).replaceAll(id, PLACEHOLDER), 'utf8');
    h.update(`${name.replaceAll(id, PLACEHOLDER)}\n${content.length}\n`);
    h.update(content);
    h.update('\n');
  }
  return h.digest('hex').slice(0, 16);
}

const draft = await bundle(PLACEHOLDER);
const id = buildId(draft, PLACEHOLDER);
const files = await bundle(id);
// The second pass differs from the first only by the id.
for (const [name, text] of draft) {
  if (files.get(name.replaceAll(PLACEHOLDER, id)) !== text.replaceAll(PLACEHOLDER, id)) {
    throw new Error(`${name}: the bundle changed beyond its build id between two passes`);
  }
}
if (buildId(files, id) !== id) throw new Error('the build id does not describe the bundle');

await rm(dist, { recursive: true, force: true });
for (const [name, text] of files) {
  await mkdir(dirname(join(dist, name)), { recursive: true });
  await writeFile(join(dist, name), text);
}
await writeFile(join(dist, 'build-id.txt'), id + '\n');
console.log(`dist/ built: ${id}`);
