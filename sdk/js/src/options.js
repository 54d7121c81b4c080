/** `init` options: defaults (docs/sdk.md) and one clear sentence for a bad value. */

import { systemClock } from './clock.js';

const DEFAULTS = {
  maxBatchSize: 10,
  flushInterval: 1000,
  maxQueueSize: 10000,
  retryBaseDelay: 1000,
  retryMaxDelay: 30000,
  requestTimeout: 10000,
  beacon: true,
};

export function resolveOptions(options) {
  if (options == null || typeof options !== 'object') throw new TypeError('cs: init() takes an options object');
  const o = { ...DEFAULTS, ...definedOnly(options) };
  if (typeof o.apiKey !== 'string' || !o.apiKey) throw new TypeError('cs: init() needs apiKey (an ingest-only key in a browser)');
  o.baseUrl = baseUrl(o.baseUrl);
  integer(o, 'maxBatchSize', 1, 100);
  integer(o, 'maxQueueSize', o.maxBatchSize, Number.MAX_SAFE_INTEGER);
  for (const name of ['flushInterval', 'retryBaseDelay', 'retryMaxDelay', 'requestTimeout']) positive(o, name);
  o.clock = o.clock ?? systemClock;
  for (const fn of ['now', 'setTimeout', 'clearTimeout']) {
    if (typeof o.clock[fn] !== 'function') throw new TypeError(`cs: clock.${fn} must be a function`);
  }
  o.fetch = o.fetch ?? ((...args) => globalThis.fetch(...args));
  o.random = o.random ?? Math.random;
  o.onError = o.onError ?? ((err) => console.warn(`[cs] ${err.message}`));
  for (const fn of ['fetch', 'random', 'onError']) {
    if (typeof o[fn] !== 'function') throw new TypeError(`cs: ${fn} must be a function`);
  }
  if (o.getInAppToken != null && typeof o.getInAppToken !== 'function') {
    throw new TypeError('cs: getInAppToken must be a function returning a token (or a promise of one)');
  }
  if (o.inAppToken != null && typeof o.inAppToken !== 'string') throw new TypeError('cs: inAppToken must be a string');
  return o;
}

function definedOnly(options) {
  return Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined));
}

function baseUrl(value) {
  const fallback = globalThis.location?.origin;
  const url = value ?? (fallback && fallback !== 'null' ? fallback : undefined);
  if (typeof url !== 'string' || !/^https?:\/\//.test(url)) {
    throw new TypeError('cs: init() needs baseUrl, the service address such as "https://cs.example.com"');
  }
  return url.replace(/\/+$/, '');
}

function integer(o, name, min, max) {
  if (!Number.isInteger(o[name]) || o[name] < min || o[name] > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `of at least ${min}` : `from ${min} to ${max}`;
    throw new TypeError(`cs: ${name} must be a whole number ${range}`);
  }
}

function positive(o, name) {
  if (typeof o[name] !== 'number' || !(o[name] > 0) || !Number.isFinite(o[name])) {
    throw new TypeError(`cs: ${name} must be a positive number of milliseconds`);
  }
}
