/** Page hide in a browser: the last moment a page reliably runs code, so the queue goes
 * out with navigator.sendBeacon, which outlives the page but cannot set Authorization. */

/** Calls `onHide` when the page is hidden or left; returns the function that stops it. */
export function watchPageHide(onHide) {
  const doc = globalThis.document;
  const win = globalThis.window;
  if (!doc || typeof win?.addEventListener !== 'function') return () => {};
  const onVisibility = () => {
    if (doc.visibilityState === 'hidden') onHide();
  };
  doc.addEventListener('visibilitychange', onVisibility);
  win.addEventListener('pagehide', onHide);
  return () => {
    doc.removeEventListener('visibilitychange', onVisibility);
    win.removeEventListener('pagehide', onHide);
  };
}

/** A synchronous chunk sender over sendBeacon, or null where there is none (Node). The key
 * rides in `?api_key=` (the service takes it there from ingest-only keys, docs/sdk.md) and
 * the body is a string, sent as text/plain: no CORS preflight, which a beacon cannot do. */
export function beaconSender(trackUrl, apiKey) {
  const nav = globalThis.navigator;
  if (typeof nav?.sendBeacon !== 'function' || !globalThis.document) return null;
  const url = `${trackUrl}?api_key=${encodeURIComponent(apiKey)}`;
  return (events) => nav.sendBeacon(url, JSON.stringify({ events }));
}
