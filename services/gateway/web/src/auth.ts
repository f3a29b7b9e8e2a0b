// Browser session: the single-use ticket from the `deepcode web` link is
// taken out of the address (before anything is sent anywhere) and
// exchanged for the service's HttpOnly session cookie.

/** Reads #ticket=… and removes the whole fragment from the address and history entry. */
export function takeTicket(): string | null {
  const fragment = location.hash.replace(/^#/, '');
  if (location.hash !== '' || location.href.endsWith('#')) {
    history.replaceState(history.state, '', location.pathname + location.search);
  }
  const ticket = new URLSearchParams(fragment).get('ticket');
  return ticket === null || ticket === '' ? null : ticket;
}

export interface ExchangeResult {
  ok: boolean;
  code?: string;
  message?: string;
}

/** Exchanges the ticket for the session cookie (same origin, JSON only). */
export async function exchange(ticket: string): Promise<ExchangeResult> {
  try {
    const res = await fetch('/auth/exchange', {
      method: 'POST',
      credentials: 'same-origin',
      cache: 'no-store',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ ticket }),
    });
    if (res.ok) return { ok: true };
    return { ok: false, ...(await errorOf(res)) };
  } catch (err) {
    return { ok: false, code: 'SERVICE_UNAVAILABLE', message: `the service did not answer: ${String(err)}` };
  }
}

/** Whether this browser's session still exists. */
export async function checkSession(): Promise<'valid' | 'invalid' | 'unreachable'> {
  try {
    const res = await fetch('/auth/session', {
      method: 'POST',
      credentials: 'same-origin',
      cache: 'no-store',
      signal: AbortSignal.timeout(5000),
    });
    if (res.ok) return 'valid';
    if (res.status === 401) return 'invalid';
    return 'unreachable';
  } catch {
    return 'unreachable';
  }
}

/** Ends this browser's session; the service closes its sockets. */
export async function logout(): Promise<void> {
  await fetch('/auth/logout', { method: 'POST', credentials: 'same-origin', cache: 'no-store' });
}

async function errorOf(res: Response): Promise<{ code: string; message: string }> {
  try {
    const body = (await res.json()) as { error?: { code?: string; message?: string } };
    return { code: body.error?.code ?? `HTTP_${res.status}`, message: body.error?.message ?? res.statusText };
  } catch {
    return { code: `HTTP_${res.status}`, message: res.statusText };
  }
}
