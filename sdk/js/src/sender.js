/** The batching convention (docs/sdk.md): events
 * wait in a bounded queue and go out as one POST /api/track at `maxBatchSize` events or
 * `flushInterval` ms after the oldest was queued, one request at a time. A failed send
 * (network, 5xx, 429) is retried after a backoff or the server's Retry-After; any other
 * 4xx is final, so that batch is dropped and reported. */

import { CsError, errorBody } from './errors.js';
import { backoffDelay, isRetryable, retryAfterDelay } from './retry.js';

export class Sender {
  constructor({ url, apiKey, fetch, clock, random, maxBatchSize, flushInterval, maxQueueSize,
    retryBaseDelay, retryMaxDelay, requestTimeout, report }) {
    Object.assign(this, { url, apiKey, fetch, clock, random, maxBatchSize, flushInterval, maxQueueSize,
      retryBaseDelay, retryMaxDelay, requestTimeout, report });
    this.queue = [];
    this.queuedAt = new WeakMap(); // event -> the clock's time when it was queued
    this.inFlight = null;
    this.intervalTimer = null;
    this.timerAt = null;
    this.retryTimer = null;
    this.attempt = 0;
    this.draining = false; // a flush() waits: send short batches too, until nothing is pending
    this.stopped = false;
    this.waiters = [];
    this.counts = { sent: 0, batches: 0, duplicates: 0, retries: 0, dropped: 0, rejected: 0, beaconed: 0 };
  }

  get pending() {
    return this.queue.length + (this.inFlight ? this.inFlight.length : 0);
  }

  stats() {
    return { queued: this.pending, ...this.counts };
  }

  enqueue(event) {
    this.queuedAt.set(event, this.clock.now());
    this.queue.push(event);
    this.trim();
    this.pump();
  }

  /** Resolves when every queued event has been delivered or refused. */
  flush() {
    if (this.pending === 0) return Promise.resolve();
    this.draining = true;
    const done = new Promise((resolve) => this.waiters.push(resolve));
    this.pump();
    return done;
  }

  /** Flushes for at most `timeout` ms (on the client's clock), then stops every timer. */
  async shutdown(timeout) {
    let timer = null;
    const expired = new Promise((resolve) => { timer = this.clock.setTimeout(resolve, timeout); });
    await Promise.race([this.flush(), expired]);
    this.clock.clearTimeout(timer);
    this.stopped = true;
    this.disarm();
    this.clock.clearTimeout(this.retryTimer);
    this.retryTimer = null;
    for (const resolve of this.waiters.splice(0)) resolve(); // nothing more will be sent
  }

  /** Hands the queue (and the batch in flight: a copy the server will count as
   * duplicates) to `sendChunk`, a synchronous sender such as sendBeacon. */
  handOff(sendChunk) {
    const inFlight = this.inFlight || [];
    const all = inFlight.concat(this.queue);
    let handed = 0;
    for (let i = 0; i < all.length; i += this.maxBatchSize) {
      const chunk = all.slice(i, i + this.maxBatchSize);
      if (!sendChunk(chunk)) break;
      handed += chunk.length;
    }
    this.queue.splice(0, Math.max(0, handed - inFlight.length));
    this.counts.beaconed += handed;
    this.pump();
  }

  /** Sends when a batch is due; otherwise, while events wait and no request is under
   * way (its end pumps again), keeps a timer for when the oldest will be due. */
  pump() {
    if (this.stopped || this.retryTimer != null) return;
    if (this.queue.length === 0) {
      this.disarm();
      this.settle();
    } else if (this.inFlight) {
      this.disarm();
    } else if (this.due()) {
      this.send();
    } else {
      this.arm(this.queuedAt.get(this.queue[0]) + this.flushInterval);
    }
  }

  /** A full batch, a flush, or the oldest has waited the interval (or the clock was set
   * back, which would hold it). */
  due() {
    const waited = this.clock.now() - this.queuedAt.get(this.queue[0]);
    return this.draining || this.queue.length >= this.maxBatchSize || waited >= this.flushInterval || waited < 0;
  }

  /** The interval timer, firing at the clock's time `at`. */
  arm(at) {
    if (this.intervalTimer != null && this.timerAt === at) return;
    this.disarm();
    this.timerAt = at;
    this.intervalTimer = this.clock.setTimeout(() => {
      this.intervalTimer = null;
      this.pump();
    }, at - this.clock.now());
  }

  disarm() {
    this.clock.clearTimeout(this.intervalTimer);
    this.intervalTimer = null;
  }

  settle() {
    if (this.pending > 0) return;
    this.draining = false;
    for (const resolve of this.waiters.splice(0)) resolve();
  }

  async send() {
    const batch = this.queue.splice(0, this.maxBatchSize);
    this.inFlight = batch;
    this.pump();
    const outcome = await this.post(batch);
    this.inFlight = null;
    if (outcome.ok) this.delivered(batch, outcome.body);
    else if (outcome.retryAfter !== undefined) this.failed(batch, outcome.retryAfter);
    else this.refused(batch, outcome);
    this.pump();
  }

  async post(batch) {
    let response;
    try {
      response = await this.fetch(this.url, {
        method: 'POST',
        headers: { Authorization: `Bearer ${this.apiKey}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ events: batch }),
        signal: timeoutSignal(this.requestTimeout),
      });
    } catch {
      return { retryAfter: null }; // network error or time-out: the server may not have it
    }
    if (response.ok) return { ok: true, body: await response.json().catch(() => ({})) };
    if (isRetryable(response.status)) {
      await response.arrayBuffer().catch(() => null);
      return { retryAfter: retryAfterDelay(response.headers.get('Retry-After'), this.clock.now()) };
    }
    return { status: response.status, ...(await errorBody(response)) };
  }

  delivered(batch, body) {
    this.attempt = 0;
    this.counts.sent += batch.length;
    this.counts.batches += 1;
    this.counts.duplicates += Number(body?.duplicates) || 0;
  }

  failed(batch, retryAfter) {
    this.attempt += 1;
    this.counts.retries += 1;
    this.queue.unshift(...batch);
    this.trim();
    this.disarm();
    if (this.stopped) return; // shutdown() is over: nothing may keep the process alive
    const delay = retryAfter ?? backoffDelay(this.attempt, {
      baseDelay: this.retryBaseDelay, maxDelay: this.retryMaxDelay, random: this.random,
    });
    this.retryTimer = this.clock.setTimeout(() => {
      this.retryTimer = null;
      if (!this.stopped && !this.inFlight && this.queue.length) this.send();
    }, delay);
  }

  refused(batch, { status, error, code }) {
    this.attempt = 0;
    this.counts.rejected += batch.length;
    const why = error || `HTTP ${status}`;
    this.report(new CsError(`POST /api/track refused ${batch.length} events (${status}): ${why}`,
      { kind: 'rejected', status, code, events: batch }));
  }

  trim() {
    const over = this.queue.length - this.maxQueueSize;
    if (over <= 0) return;
    const lost = this.queue.splice(0, over);
    this.counts.dropped += over;
    this.report(new CsError(`queue full (${this.maxQueueSize} events): dropped the ${over} oldest`,
      { kind: 'overflow', events: lost }));
  }
}

function timeoutSignal(ms) {
  return typeof AbortSignal !== 'undefined' && typeof AbortSignal.timeout === 'function'
    ? AbortSignal.timeout(ms) : undefined;
}
