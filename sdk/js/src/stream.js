/** The in-app stream (docs/channels.md, "In-app"): GET /api/in-app/stream?token= read with fetch (an
 * EventSource can send no header and Node has none), resumed with Last-Event-ID after a
 * drop, with backoff; `event: intervention` and `event: withdrawn` go to the listeners. */

import { CsError, errorBody } from './errors.js';
import { backoffDelay, retryAfterDelay } from './retry.js';
import { SseParser } from './sse.js';

const SERVER_RETRY = 3000; // until the stream's own `retry:` says otherwise
const MAX_DELAY = 60000;
const IDLE_TIMEOUT = 45000; // the server writes a heartbeat after 15 s of silence
const REMEMBERED = 1000;
const EVENTS = new Set(['intervention', 'withdrawn']);

export class InAppStream {
  constructor({ baseUrl, token, getToken, fetch, clock, random, report }) {
    Object.assign(this, { baseUrl, token, getToken, fetch, clock, random, report });
    this.listeners = new Set();
    this.lastEventId = null;
    this.retryMs = SERVER_RETRY;
    this.failures = 0;
    this.refreshed = false;
    this.running = false;
    this.controller = null;
    this.timer = null;
    this.idleTimer = null;
    this.seen = new Set();
  }

  subscribe(listener) {
    this.listeners.add(listener);
    if (!this.running) {
      this.running = true;
      this.connect();
    }
    return () => {
      this.listeners.delete(listener);
      if (this.listeners.size === 0) this.close();
    };
  }

  close() {
    this.running = false;
    this.controller?.abort();
    this.clock.clearTimeout(this.timer);
    this.clock.clearTimeout(this.idleTimer);
    this.timer = this.idleTimer = null;
  }

  async connect() {
    this.timer = null;
    const controller = new AbortController();
    this.controller = controller;
    let response;
    try {
      response = await this.fetch(await this.streamUrl(), { headers: this.headers(), signal: controller.signal });
    } catch (err) {
      if (this.running && !controller.signal.aborted) this.retry(null, err);
      return;
    }
    if (!this.running) return void response.body?.cancel().catch(() => {});
    if (!response.ok) return this.refused(response);
    this.failures = 0;
    this.refreshed = false;
    await this.read(response, controller);
    if (this.running && !controller.signal.aborted) this.schedule(this.retryMs);
  }

  async streamUrl() {
    if (this.token == null) this.token = await this.getToken();
    return `${this.baseUrl}/api/in-app/stream?token=${encodeURIComponent(this.token)}`;
  }

  headers() {
    const headers = { Accept: 'text/event-stream' };
    if (this.lastEventId) headers['Last-Event-ID'] = this.lastEventId;
    return headers;
  }

  async refused(response) {
    const { status } = response;
    const { error } = await errorBody(response);
    if (status === 401 && this.getToken && !this.refreshed) {
      this.token = null; // expired or revoked: ask the page's backend for a fresh one, now
      this.refreshed = true;
      return void this.connect();
    }
    const wait = retryAfterDelay(response.headers.get('Retry-After'), this.clock.now());
    const problem = new CsError(`the in-app stream answered ${status}: ${error || 'no reason given'}`,
      { kind: 'stream', status });
    if (status === 401 && this.getToken) this.token = null;
    if (status === 429 || status >= 500 || (status === 401 && this.getToken)) return this.retry(wait, problem);
    this.running = false; // a 400 or a fixed token the server refuses: retrying cannot help
    this.report(problem);
  }

  async read(response, controller) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    const parser = new SseParser();
    parser.lastEventId = this.lastEventId;
    this.watchIdle(controller);
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        this.watchIdle(controller);
        for (const event of parser.feed(decoder.decode(value, { stream: true }))) this.dispatch(event);
        this.lastEventId = parser.lastEventId;
        if (parser.retry != null) this.retryMs = parser.retry;
      }
    } catch {
      // dropped connection or our own abort: connect() decides what follows
    } finally {
      this.clock.clearTimeout(this.idleTimer);
      this.idleTimer = null;
    }
  }

  /** A connection that went silent (no heartbeat) is dead even if TCP has not said so. */
  watchIdle(controller) {
    this.clock.clearTimeout(this.idleTimer);
    this.idleTimer = this.clock.setTimeout(() => controller.abort(), IDLE_TIMEOUT);
  }

  dispatch({ type, data, id }) {
    if (!EVENTS.has(type)) return;
    let payload;
    try {
      payload = JSON.parse(data);
    } catch (err) {
      return this.report(new CsError(`an in-app ${type} message was not JSON`, { kind: 'stream', cause: err }));
    }
    const key = `${type}:${payload.interventionId}`;
    if (this.seen.has(key)) return;
    this.remember(key);
    const message = { event: type, id, ...payload };
    for (const listener of this.listeners) {
      try {
        listener(message);
      } catch (err) {
        this.report(new CsError('an onMessage callback threw', { kind: 'stream', cause: err }));
      }
    }
  }

  remember(key) {
    this.seen.add(key);
    if (this.seen.size > REMEMBERED) this.seen.delete(this.seen.values().next().value);
  }

  /** A drop is routine (a deploy, a proxy); a second failure in a row is worth a report. */
  retry(wait, cause) {
    this.failures += 1;
    if (this.failures > 1) {
      this.report(cause instanceof CsError ? cause
        : new CsError(`the in-app stream could not connect: ${cause?.message ?? cause}`, { kind: 'stream', cause }));
    }
    this.schedule(wait ?? backoffDelay(this.failures, { baseDelay: this.retryMs, maxDelay: MAX_DELAY, random: this.random }));
  }

  schedule(delay) {
    if (!this.running) return;
    this.timer = this.clock.setTimeout(() => this.connect(), delay);
  }
}
