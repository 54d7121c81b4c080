/** When to try again: exponential backoff with jitter, or exactly what the server asked. */

/** Milliseconds before retry number `attempt` (1-based): base·2^(attempt-1), capped, then
 * scaled into [half, whole] by `random()` so many clients do not retry in step. */
export function backoffDelay(attempt, { baseDelay, maxDelay, random }) {
  const ceiling = Math.min(maxDelay, baseDelay * 2 ** (attempt - 1));
  return Math.round(ceiling * (0.5 + random() * 0.5));
}

/** Milliseconds a `Retry-After` header asks for (delta-seconds or an HTTP date), or null. */
export function retryAfterDelay(header, nowMs) {
  if (header == null || header === '') return null;
  const text = String(header).trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  return Number.isNaN(at) ? null : Math.max(0, at - nowMs);
}

/** Whether a failed answer is worth retrying: throttled, or the server's fault. Any other
 * 4xx, 408 included, would fail again (docs/sdk.md). */
export function isRetryable(status) {
  return status === 429 || status >= 500;
}
