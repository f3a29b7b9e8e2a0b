// Views (preact + htm). They read the Controller and call its actions.

import { html } from 'htm/preact';
import { useEffect, useReducer, useState } from 'preact/hooks';
import type { Controller } from './controller';
import type { ItemView as Item, ResolvedApproval, TurnView as Turn } from './model';
import type { ConnectionState } from './runtime';
import type { Approval, Thread } from './types';

type Props = { ctl: Controller };

function useController(ctl: Controller): void {
  const [, bump] = useReducer((n: number, _: void) => n + 1, 0);
  useEffect(() => ctl.subscribe(() => bump()), [ctl]);
}

export function App({ ctl }: Props) {
  useController(ctl);
  const state = ctl.rt.state;
  return html`
    <div class="app">
      <${StatusBar} ctl=${ctl} />
      ${blocked(state)
        ? html`<${Blocked} state=${state} />`
        : html`<div class="main">
            <aside class="sidebar">
              <${NewThreadForm} ctl=${ctl} />
              <${ThreadList} ctl=${ctl} />
            </aside>
            <section class="thread">${ctl.model ? html`<${ThreadView} ctl=${ctl} />` : html`<p class="empty">Select a thread, or start one.</p>`}</section>
          </div>`}
      <${Notices} ctl=${ctl} />
    </div>
  `;
}

function blocked(s: ConnectionState): boolean {
  return s.kind === 'signedOut' || s.kind === 'stale' || s.kind === 'failed';
}

function connectionLabel(s: ConnectionState): string {
  switch (s.kind) {
    case 'connecting':
      return 'connecting…';
    case 'connected':
      return 'connected';
    case 'reconnecting':
      return `reconnecting (attempt ${s.attempt})…`;
    case 'signedOut':
      return 'signed out';
    case 'stale':
      return 'out of date';
    case 'failed':
      return 'failed';
  }
}

function StatusBar({ ctl }: Props) {
  const s = ctl.rt.state;
  return html`
    <header class="statusbar">
      <span class="brand">deepcode</span>
      <span class="conn" data-testid="connection" data-state=${s.kind}>${connectionLabel(s)}</span>
      <span class="phase" data-testid="phase" data-phase=${ctl.rt.phase}>service ${ctl.rt.phase}</span>
      ${ctl.rt.phase === 'draining' ? html`<span class="hint">new work is paused; approvals and interrupts still work</span>` : null}
      <span class="spacer"></span>
      ${ctl.rt.instanceId ? html`<span class="instance" title="instance id">${ctl.rt.instanceId}</span>` : null}
      ${s.kind === 'signedOut' ? null : html`<button class="link" onClick=${() => void ctl.logout()}>Log out</button>`}
    </header>
  `;
}

function Blocked({ state }: { state: ConnectionState }) {
  if (state.kind === 'stale') {
    return html`<div class="blocked" data-testid="blocked" data-state="stale">
      <h2>This page is out of date</h2>
      <p>The service now serves another version of the web client.</p>
      <button onClick=${() => location.reload()}>Reload</button>
    </div>`;
  }
  if (state.kind === 'failed') {
    return html`<div class="blocked" data-testid="blocked" data-state="failed"><h2>Cannot use this service</h2><p>${state.message}</p></div>`;
  }
  return html`<div class="blocked" data-testid="blocked" data-state="signedOut">
    <h2>Your browser session has ended</h2>
    <p>The service restarted, you logged out, or the session expired. Run <code>deepcode web</code> for a new link.</p>
  </div>`;
}

function NewThreadForm({ ctl }: Props) {
  const [workspace, setWorkspace] = useState('');
  const [profile, setProfile] = useState('shell');
  const [title, setTitle] = useState('');
  const [trust, setTrust] = useState(false);
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    const ok = await ctl.createThread({ workspace, profile, title, trust });
    setBusy(false);
    if (ok) setTitle('');
  };
  return html`
    <form class="new-thread" data-testid="new-thread" onSubmit=${submit}>
      <h3>New thread</h3>
      <label>Workspace <input name="workspace" required placeholder="/absolute/path" value=${workspace} onInput=${(e: Event) => setWorkspace(inputValue(e))} /></label>
      <label>Profile <input name="profile" list="profiles" value=${profile} onInput=${(e: Event) => setProfile(inputValue(e))} /></label>
      <datalist id="profiles"><option value="shell" /><option value="script" /></datalist>
      <label>Title <input name="title" value=${title} onInput=${(e: Event) => setTitle(inputValue(e))} /></label>
      <label class="check"><input type="checkbox" name="trust" checked=${trust} onChange=${(e: Event) => setTrust((e.target as HTMLInputElement).checked)} /> Trust this workspace (recorded)</label>
      <button type="submit" disabled=${busy || !ctl.rt.connected}>Start thread</button>
    </form>
  `;
}

function ThreadList({ ctl }: Props) {
  const selected = ctl.model?.threadId;
  return html`
    <nav class="threads">
      <h3>Threads <button class="link" onClick=${() => void ctl.refreshThreads()} disabled=${!ctl.rt.connected}>refresh</button></h3>
      <ul>
        ${ctl.threads.map(
          (t: Thread) => html`<li key=${t.id}>
            <button class=${t.id === selected ? 'thread-entry selected' : 'thread-entry'} data-testid="thread" data-thread-id=${t.id} onClick=${() => ctl.select(t.id)}>
              <span class="title">${t.title || t.workspace}</span>
              <span class="meta">${t.profile} · ${t.turnCount} turn${t.turnCount === 1 ? '' : 's'}</span>
            </button>
          </li>`,
        )}
      </ul>
      ${ctl.threadsCursor
        ? html`<button class="link" data-testid="more-threads" onClick=${() => void ctl.moreThreads()} disabled=${ctl.loadingThreads || !ctl.rt.connected}>
            ${ctl.loadingThreads ? 'loading…' : 'more threads'}
          </button>`
        : null}
    </nav>
  `;
}

function ThreadView({ ctl }: Props) {
  const model = ctl.model!;
  const info = ctl.selectedThread;
  return html`
    <div class="thread-view" data-testid="thread-view" data-thread-id=${model.threadId}>
      <header class="thread-head">
        <h2>${info?.title || info?.workspace || model.threadId}</h2>
        <span class="meta">${info ? `${info.workspace} · ${info.profile}` : ''}</span>
        ${ctl.recovering ? html`<span class="recovering" data-testid="recovering">catching up…</span>` : null}
      </header>
      ${ctl.streamError
        ? html`<p class="stream-error">History could not be read: ${ctl.streamError} <button class="link" onClick=${() => ctl.select(model.threadId)}>reload thread</button></p>`
        : null}
      <div class="turns">
        ${model.turnList.map(
          (t) => html`<${TurnBlock} key=${t.id} ctl=${ctl} turn=${t} />`,
        )}
      </div>
      <${Composer} ctl=${ctl} />
    </div>
  `;
}

function TurnBlock({ ctl, turn }: Props & { turn: Turn }) {
  const model = ctl.model!;
  return html`
    <article class="turn" data-testid="turn" data-status=${turn.status} data-turn-id=${turn.id}>
      <header><span class="ordinal">Turn ${turn.ordinal === Number.MAX_SAFE_INTEGER ? '?' : turn.ordinal}</span> <span class=${'status status-' + turn.status}>${turn.status}</span></header>
      ${turn.itemIds.map((id) => {
        const item = model.items.get(id);
        return item ? html`<${ItemBlock} key=${id} ctl=${ctl} item=${item} />` : null;
      })}
      ${model.resolvedOf(turn.id).map((a) => html`<${ResolvedCard} key=${a.id} approval=${a} />`)}
      ${model.approvalsOf(turn.id).map((a) => html`<${ApprovalCard} key=${a.id} ctl=${ctl} approval=${a} />`)}
      ${turn.error ? html`<p class="turn-error">${turn.error.message} (${turn.error.code})</p>` : null}
    </article>
  `;
}

function ItemBlock({ ctl, item }: Props & { item: Item }) {
  const selected = ctl.selectedItem === item.id;
  return html`
    <div
      class=${`item item-${item.kind}${selected ? ' selected' : ''}`}
      data-testid="item"
      data-kind=${item.kind}
      data-status=${item.status}
      data-item-id=${item.id}
      onClick=${() => ctl.selectItem(item.id)}
    >
      ${itemBody(item)}
      ${selected ? html`<pre class="item-details">${JSON.stringify(item.payload, null, 2)}</pre>` : null}
    </div>
  `;
}

function itemBody(item: Item) {
  const p = item.payload;
  switch (item.kind) {
    case 'userMessage': {
      const steer = p.submission === 'steer';
      return html`<span class="who">${steer ? 'You (steer)' : 'You'}</span><span class="item-text">${item.text}</span>${steer && p.deliveryState ? html`<span class="badge">${String(p.deliveryState)}</span>` : null}`;
    }
    case 'agentMessage':
      return html`<span class="who">Agent</span><span class="item-text">${item.text}</span>`;
    case 'commandExecution': {
      const cmd = Array.isArray(p.command) ? (p.command as unknown[]).join(' ') : '';
      return html`<span class="who">$ ${cmd}</span><pre class="item-text output">${item.text}</pre>${typeof p.exitCode === 'number' ? html`<span class="badge">exit ${p.exitCode}</span>` : null}`;
    }
    case 'fileChange':
      return html`<span class="who">File</span><span class="item-text">${String(p.action ?? 'change')} ${String(p.path ?? '')}${typeof p.bytes === 'number' && p.bytes > 0 ? ` (${p.bytes} bytes)` : ''}</span>`;
    default:
      return html`<span class="who">${item.kind}</span>`;
  }
}

function ApprovalCard({ ctl, approval }: Props & { approval: Approval }) {
  const [busy, setBusy] = useState(false);
  const decide = async (d: 'approve' | 'deny') => {
    setBusy(true);
    await ctl.respond(approval, d);
    setBusy(false);
  };
  return html`
    <div class="approval" data-testid="approval" data-approval-id=${approval.id}>
      <span class="who">Approval needed</span>
      <span class="summary">${approval.summary}</span>
      <button disabled=${busy || !ctl.rt.connected} onClick=${() => void decide('approve')}>Approve</button>
      <button class="secondary" disabled=${busy || !ctl.rt.connected} onClick=${() => void decide('deny')}>Deny</button>
    </div>
  `;
}

function ResolvedCard({ approval }: { approval: ResolvedApproval }) {
  return html`<div class="approval resolved" data-testid="approval-resolved" data-decision=${approval.decision}>
    <span class="who">Approval</span><span class="summary">${approval.summary}</span><span class="badge">${approval.decision}</span>
  </div>`;
}

function Composer({ ctl }: Props) {
  const [text, setText] = useState('');
  const [busy, setBusy] = useState(false);
  const active = ctl.model?.activeTurn;
  const canSend = ctl.rt.connected && !busy && text.trim() !== '';
  const send = async (steer: boolean) => {
    setBusy(true);
    const ok = await ctl.send(text, steer);
    setBusy(false);
    if (ok) setText('');
  };
  const onKey = (e: KeyboardEvent) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey) && canSend) {
      e.preventDefault();
      void send(false);
    }
  };
  return html`
    <div class="composer">
      <textarea
        data-testid="prompt"
        rows="4"
        placeholder=${active ? 'Queue a follow-up, or steer the running turn…' : 'Ask the agent… (Ctrl+Enter to send)'}
        value=${text}
        onInput=${(e: Event) => setText((e.target as HTMLTextAreaElement).value)}
        onKeyDown=${onKey}
      ></textarea>
      <div class="actions">
        <button data-testid="send" disabled=${!canSend} onClick=${() => void send(false)}>${active ? 'Queue' : 'Send'}</button>
        ${active
          ? html`<button data-testid="steer" class="secondary" disabled=${!canSend} onClick=${() => void send(true)}>Steer</button>
              <button data-testid="interrupt" class="danger" disabled=${!ctl.rt.connected} onClick=${() => void ctl.interrupt()}>Interrupt</button>`
          : null}
      </div>
    </div>
  `;
}

function Notices({ ctl }: Props) {
  if (ctl.notices.length === 0) return null;
  return html`<div class="notices">
    ${ctl.notices.map(
      (n) => html`<div key=${n.id} class=${'notice notice-' + n.kind} data-testid="notice" data-kind=${n.kind}>
        <span>${n.text}</span><button class="link" onClick=${() => ctl.dismiss(n.id)}>dismiss</button>
      </div>`,
    )}
  </div>`;
}

function inputValue(e: Event): string {
  return (e.target as HTMLInputElement).value;
}
