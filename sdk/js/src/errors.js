/** What `onError` receives: a kind, and for refused batches the answer and the events. */
export class CsError extends Error {
  /**
   * @param {string} message
   * @param {{kind: 'rejected'|'overflow'|'stream', status?: number|null, code?: string|null,
   *          events?: object[], cause?: unknown}} info
   */
  constructor(message, { kind, status = null, code = null, events = [], cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'CsError';
    this.kind = kind;
    this.status = status;
    this.code = code;
    this.events = events;
  }
}

/** Reads an error answer's `{error, code}` (docs/api.md, "Errors") without trusting it is JSON. */
export async function errorBody(response) {
  try {
    const body = await response.json();
    return { error: String(body?.error ?? ''), code: body?.code ?? null };
  } catch {
    return { error: '', code: null };
  }
}
