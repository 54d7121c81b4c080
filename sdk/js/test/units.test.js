// The pieces that need no service: the SSE parser, the retry arithmetic, option checks,
// and the one-file bundle exporting what src/ exports.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { bundle } from '../scripts/bundle.mjs';
import * as sdk from '../src/index.js';
import { backoffDelay, isRetryable, retryAfterDelay } from '../src/retry.js';
import { SseParser } from '../src/sse.js';

test('the SSE parser joins events split anywhere, with any line ending', () => {
  const text = '\ufeffretry: 3000\r\n\r\nid: 7\nevent: intervention\ndata: {"a":\ndata: 1}\n\n: heartbeat\n\n'
    + 'event: withdrawn\rdata: {"interventionId":"x"}\r\r';
  const whole = new SseParser().feed(text);
  for (const size of [1, 2, 3, 5, 8]) {
    const parser = new SseParser();
    const events = [];
    for (let i = 0; i < text.length; i += size) events.push(...parser.feed(text.slice(i, i + size)));
    assert.deepEqual(events, whole, `chunks of ${size}`);
    assert.equal(parser.retry, 3000);
    assert.equal(parser.lastEventId, '7');
  }
  assert.deepEqual(whole, [
    { type: 'intervention', data: '{"a":\n1}', id: '7' },
    { type: 'withdrawn', data: '{"interventionId":"x"}', id: '7' },
  ]);
});

test('the SSE parser ignores comments, unknown fields and ids with NUL; data without event is "message"', () => {
  const events = new SseParser().feed(':hi\nfoo: bar\nid: a\0b\ndata\ndata:x\n\nid\n\n');
  assert.deepEqual(events, [{ type: 'message', data: '\nx', id: null }]);
});

test('backoff doubles up to its cap and jitter keeps it between half and whole', () => {
  const opts = { baseDelay: 1000, maxDelay: 30000 };
  assert.deepEqual([1, 2, 3, 6, 9].map((a) => backoffDelay(a, { ...opts, random: () => 0.999999 })), [1000, 2000, 4000, 30000, 30000]);
  assert.deepEqual([1, 2, 3].map((a) => backoffDelay(a, { ...opts, random: () => 0 })), [500, 1000, 2000]);
});

test('Retry-After in seconds or as a date; what is retried (not a 408, like any 4xx but 429)', () => {
  const now = Date.parse('2026-11-02T09:30:00Z');
  assert.equal(retryAfterDelay('2', now), 2000);
  assert.equal(retryAfterDelay('Mon, 02 Nov 2026 09:30:05 GMT', now), 5000);
  assert.equal(retryAfterDelay('soon', now), null);
  assert.equal(retryAfterDelay(null, now), null);
  assert.deepEqual([429, 500, 503, 408, 400, 401, 403, 404, 413].map(isRetryable),
    [true, true, true, false, false, false, false, false, false]);
});

test('init refuses bad options with one clear sentence', () => {
  const ok = { apiKey: 'rt_live_x', baseUrl: 'http://127.0.0.1:1' };
  assert.throws(() => sdk.createClient({ baseUrl: ok.baseUrl }), { name: 'TypeError', message: /needs apiKey/ });
  assert.throws(() => sdk.createClient({ apiKey: 'k' }), { message: /needs baseUrl/ });
  assert.throws(() => sdk.createClient({ ...ok, maxBatchSize: 101 }), { message: /maxBatchSize must be a whole number from 1 to 100/ });
  assert.throws(() => sdk.createClient({ ...ok, maxQueueSize: 5 }), { message: /maxQueueSize must be a whole number of at least 10/ });
  assert.throws(() => sdk.createClient({ ...ok, flushInterval: 0 }), { message: /flushInterval must be a positive/ });
  assert.throws(() => sdk.createClient({ ...ok, clock: { now: () => 0 } }), { message: /clock.setTimeout/ });
  assert.throws(() => sdk.createClient(ok).onMessage(() => {}), { message: /needs init\(\{inAppToken\}\)/ });
  assert.throws(() => sdk.track('x'), { message: /call init/ });
  assert.equal(sdk.createClient({ ...ok, baseUrl: 'http://h:1/' }).options.baseUrl, 'http://h:1');
});

test('the bundle is one module exporting what src/index.js exports', async () => {
  const code = bundle();
  assert.doesNotMatch(code, /^import /m);
  const mod = await import(`data:text/javascript;base64,${Buffer.from(code).toString('base64')}`);
  assert.deepEqual(Object.keys(mod).sort(), Object.keys(sdk).sort());
  const client = mod.createClient({ apiKey: 'k', baseUrl: 'http://127.0.0.1:1' });
  assert.throws(() => client.track('a'), { message: /before identify/ });
});
