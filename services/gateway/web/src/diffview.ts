// Diff lines for a file-change item, loaded on demand. An item carries
// either a unified patch (providers that report patches) or the file's
// text before and after (agentd's own tools and the script provider).

import { structuredPatch } from 'diff';

export interface DiffLine {
  sign: '+' | '-' | ' ' | '@';
  text: string;
}

export function diffLines(p: Record<string, unknown>): DiffLine[] {
  if (typeof p.diff === 'string') return fromPatch(p.diff); // agentd's own tools
  if (typeof p.patch === 'string') return fromPatch(p.patch);
  const before = typeof p.before === 'string' ? p.before : '';
  const after = typeof p.after === 'string' ? p.after : '';
  const patch = structuredPatch('a', 'b', before, after, '', '', { context: 3 });
  const out: DiffLine[] = [];
  for (const h of patch.hunks) {
    out.push({ sign: '@', text: `@@ -${h.oldStart},${h.oldLines} +${h.newStart},${h.newLines} @@` });
    for (const l of h.lines) {
      if (l.startsWith('\\')) continue; // "\ No newline at end of file"
      const sign = l[0] === '+' || l[0] === '-' ? l[0] : ' ';
      out.push({ sign, text: l.slice(1) });
    }
  }
  return out;
}

function fromPatch(patch: string): DiffLine[] {
  const out: DiffLine[] = [];
  for (const l of patch.split('\n')) {
    if (l.startsWith('+++') || l.startsWith('---') || l.startsWith('diff ') || l.startsWith('index ') || l.startsWith('\\')) continue;
    if (l.startsWith('@@')) out.push({ sign: '@', text: l });
    else if (l.startsWith('+')) out.push({ sign: '+', text: l.slice(1) });
    else if (l.startsWith('-')) out.push({ sign: '-', text: l.slice(1) });
    else if (l !== '' || out.length > 0) out.push({ sign: ' ', text: l.startsWith(' ') ? l.slice(1) : l });
  }
  while (out.length > 0 && out[out.length - 1].sign === ' ' && out[out.length - 1].text === '') out.pop();
  return out;
}
