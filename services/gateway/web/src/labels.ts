// Words for people: statuses, error codes and what to do about them. The
// UI never shows method names, CLI flags or internal enum names; this file
// is where a wire word becomes a sentence.

const STATUS: Record<string, string> = {
  idle: 'Idle',
  queued: 'Queued',
  starting: 'Starting',
  running: 'Running',
  waitingApproval: 'Waiting for your approval',
  completed: 'Done',
  failed: 'Failed',
  interrupted: 'Stopped',
  inProgress: 'Running',
  approved: 'Approved',
  denied: 'Denied',
  cancelled: 'Cancelled',
  pending: 'Pending',
  accepted: 'Delivered',
  delivered: 'Delivered',
};

/** A status as a person reads it ("waitingApproval" → "Waiting for your approval"). */
export function statusLabel(status: string): string {
  return STATUS[status] ?? status.replace(/([a-z])([A-Z])/g, '$1 $2').replace(/^./, (c) => c.toUpperCase());
}

/** What the page can do about an error, offered as a button. */
export type ErrorAction = 'trust' | 'retry' | 'reload' | 'newLink';

export interface HumanError {
  text: string;
  action?: ErrorAction;
}

/** What the user was doing when the error happened. */
const ACTIVITY: Record<string, string> = {
  'thread/start': 'The thread could not be started',
  'thread/list': 'The thread list could not be read',
  'event/replay': 'The thread history could not be read',
  'thread/rename': 'The thread could not be renamed',
  'thread/archive': 'The thread could not be archived',
  'thread/search': 'The search did not finish',
  'turn/start': 'Your message was not sent',
  'turn/enqueue': 'Your follow-up was not queued',
  'turn/steer': 'Your steering message was not delivered',
  'turn/interrupt': 'The turn could not be stopped',
  'approval/respond': 'Your decision was not recorded',
  'terminal/create': 'The terminal could not be opened',
  'terminal/input': 'Your keystrokes did not reach the terminal',
  'terminal/close': 'The terminal could not be closed',
  'terminal/read': 'The terminal output could not be read',
  'workspace/list': 'The recent workspaces could not be read',
  'profile/list': 'The profiles could not be read',
};

/** Sentences by error code: what happened and what to do. */
const CODES: Record<string, HumanError> = {
  WORKSPACE_UNTRUSTED: { text: 'This folder is not trusted yet. Agents run commands in it, so trust it only if you know what it holds.', action: 'trust' },
  NOT_FOUND: { text: 'It no longer exists (it may have been removed by another window). Check the name and try again.' },
  INVALID_PARAMS: { text: 'Something in the form is not accepted. Check the fields and try again.' },
  CONFLICT: { text: 'Someone else changed this at the same time. The view has the latest state; try again if still needed.' },
  SERVICE_DRAINING: { text: 'The service is pausing for a restart, so it takes no new work right now. Approvals and stopping turns still work; try again in a moment.', action: 'retry' },
  SERVICE_UNAVAILABLE: { text: 'The service is not answering. It may be restarting; try again in a moment.', action: 'retry' },
  OVERLOADED: { text: 'The service is busy. Try again in a few seconds.', action: 'retry' },
  UNAUTHORIZED: { text: 'Your session has ended. Open a new link from the deepcode app on this computer.', action: 'newLink' },
  FORBIDDEN: { text: 'This browser session is not allowed to do that.' },
  REQUEST_TOO_LARGE: { text: 'That is too large to send. Shorten it and try again.' },
  RESPONSE_TOO_LARGE: { text: 'The answer was too large to show here.' },
  PROVIDER_UNAVAILABLE: { text: 'The agent for this profile is not available on this computer. Choose another profile, or install the agent.' },
  PROVIDER_AUTH_FAILED: { text: 'The agent could not sign in to its model provider. Check its credentials, then try again.' },
  PROVIDER_RATE_LIMITED: { text: 'The model provider is limiting requests. Wait a little and try again.', action: 'retry' },
  WORKSPACE_CONFLICT: { text: 'Another turn is using this folder right now. Wait for it to finish.' },
  DUPLICATE_MESSAGE_CONFLICT: { text: 'This message was already sent with different text. Reload the thread to see what was received.', action: 'reload' },
  INPUT_DELIVERY_PENDING: { text: 'Your message is waiting to reach the agent.' },
  INPUT_DELIVERY_UNCERTAIN: { text: 'It is not known whether the agent received your message. Check the transcript before sending it again.' },
  NOT_IMPLEMENTED: { text: 'This service does not support that yet. Update deepcode to use it.' },
  METHOD_NOT_FOUND: { text: 'This service does not support that yet. Update deepcode to use it.' },
  RESULT_UNKNOWN: { text: 'The connection dropped before the service answered, so it is not known whether it happened. Check the transcript before trying again.' },
  OFFLINE: { text: 'Not connected, so nothing was sent. Try again once the connection is back.' },
  WORKER_CRASHED: { text: 'The agent stopped unexpectedly. Start a new turn to continue.' },
  DAEMON_TIMEOUT: { text: 'The service took too long to answer. Try again.', action: 'retry' },
  INTERNAL: { text: 'Something went wrong inside the service. Try again; if it keeps happening, the service log says more.' },
};

/** The sentence (and action) for an error code, seen while doing `method`. */
export function humanError(method: string, code: string): HumanError {
  const what = ACTIVITY[method] ?? 'That did not work';
  const known = CODES[code];
  if (known) return { text: `${what}. ${known.text}`, action: known.action };
  return { text: `${what}. Try again; if it keeps happening, the service log says more.` };
}

/** A short relative or absolute time for hover titles. */
export function timeLabel(iso: string | undefined): string {
  if (!iso) return '';
  // Each draw labels every thread listed and every row drawn again, and
  // formatting is the dearer part of drawing a row: remember the labels.
  const hit = timeLabels.get(iso);
  if (hit !== undefined) return hit;
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  // One formatter for all labels: toLocaleString builds a new one per call.
  timeFormat ??= new Intl.DateTimeFormat(undefined, { year: 'numeric', month: 'numeric', day: 'numeric', hour: 'numeric', minute: 'numeric', second: 'numeric' });
  const label = timeFormat.format(d);
  if (timeLabels.size >= TIME_LABELS_MAX) timeLabels.clear();
  timeLabels.set(iso, label);
  return label;
}

let timeFormat: Intl.DateTimeFormat | undefined;
const timeLabels = new Map<string, string>();
const TIME_LABELS_MAX = 5000;

/** A duration such as "1.2 s" or "3 min 4 s". */
export function durationLabel(fromIso: string | undefined, toIso: string | undefined): string {
  if (!fromIso || !toIso) return '';
  const ms = new Date(toIso).getTime() - new Date(fromIso).getTime();
  if (!Number.isFinite(ms) || ms < 0) return '';
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
}
