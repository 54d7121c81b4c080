/** The cs JavaScript SDK (docs/sdk.md). The functions act on the client made by `init`;
 * `createClient` makes an independent one. Types: ../index.d.ts; guide: ../README.md. */

import { Client } from './client.js';

export { Client } from './client.js';
export { CsError } from './errors.js';

let current = null;

export function createClient(options) {
  return new Client(options);
}

/** Makes the client the other functions use; a previous one is shut down (flushed). */
export function init(options) {
  const client = new Client(options);
  const previous = current;
  current = client;
  previous?.shutdown().catch(() => {});
  return client;
}

export function identify(userId, traits) {
  return use('identify').identify(userId, traits);
}

export function setLocale(locale) {
  return use('setLocale').setLocale(locale);
}

export function track(event, properties) {
  return use('track').track(event, properties);
}

export function flush() {
  return use('flush').flush();
}

export function shutdown(options) {
  return use('shutdown').shutdown(options);
}

export function onMessage(callback) {
  return use('onMessage').onMessage(callback);
}

export function reportClick(interventionId) {
  return use('reportClick').reportClick(interventionId);
}

export function dismiss(interventionId) {
  return use('dismiss').dismiss(interventionId);
}

export function stats() {
  return use('stats').stats;
}

function use(method) {
  if (current == null) throw new Error(`cs: call init({apiKey, baseUrl}) before ${method}()`);
  return current;
}
