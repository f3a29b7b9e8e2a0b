/** A fresh client-chosen key (messageId) for a keyed submission. */
export function newMessageId(): string {
  const b = new Uint8Array(16);
  crypto.getRandomValues(b);
  return 'msg_' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}
