// The batching convention against the real service (docs/sdk.md): batch size and
// interval on an injected clock, retries that lose nothing and count nothing twice,
// Retry-After, refused batches, the bounded queue, identify first, shutdown.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { createClient } from '../src/index.js';
import { FakeClock } from '../testing/fake-clock.js';
import { startProxy } from '../testing/proxy.js';
import { startService } from '../testing/service.js';
import { until } from '../testing/wait.js';

let service;
let proxy;
let tenant;

before(async () => {
  service = await startService();
  tenant = await service.tenant('Acme');
  proxy = await startProxy(service.url);
});

after(async () => {
  await proxy?.close();
  await service?.stop();
});

/** A client through the proxy on a fake clock, with jitter pinned to its middle and
 * every fetch counted as it starts (the requests themselves are real). */
function sdk(options = {}) {
  const clock = new FakeClock();
  const errors = [];
  const calls = { n: 0 };
  const client = createClient({
    apiKey: tenant.ingestKey, baseUrl: proxy.url, clock, random: () => 0.5,
    onError: (err) => errors.push(err),
    fetch: (...args) => { calls.n += 1; return fetch(...args); },
    ...options,
  });
  return { client, clock, errors, calls };
}

async function storedEvents(userId) {
  const { status, body } = await service.api('GET', `/api/customers/${userId}`, tenant.adminKey);
  assert.equal(status, 200, JSON.stringify(body));
  return body;
}

const sizes = (requests) => requests.map((r) => r.body.events.length);

test('25 track calls make 3 POSTs: 10, 10, then 5 when the interval ends', async () => {
  const { client, clock, calls } = sdk();
  client.identify('u-batch', { name: 'Ada', email: 'ada@acme.example' });
  await client.flush();
  assert.deepEqual(sizes(proxy.tracks('u-batch')), [1]);

  for (let i = 0; i < 25; i++) client.track('viewed_page', { n: i });
  await until(() => client.stats.sent === 21, { what: 'two full batches' });
  assert.deepEqual(sizes(proxy.tracks('u-batch')), [1, 10, 10]);
  assert.deepEqual(clock.pending(), [1000], 'only the interval timer waits');
  clock.advance(999);
  assert.equal(calls.n, 3, 'nothing is sent before the interval ends');
  clock.advance(1);
  assert.equal(calls.n, 4);
  await until(() => client.stats.sent === 26, { what: 'the last 5' });
  assert.deepEqual(sizes(proxy.tracks('u-batch')), [1, 10, 10, 5]);

  const { customer, events } = await storedEvents('u-batch');
  assert.equal(customer.name, 'Ada');
  const viewed = events.filter((e) => e.event === 'viewed_page');
  assert.deepEqual(viewed.map((e) => e.properties.n).sort((a, b) => a - b), [...Array(25).keys()]);
  const stamped = proxy.tracks('u-batch').flatMap((r) => r.body.events);
  assert.equal(new Set(stamped.map((e) => e.idempotency_key)).size, 26);
  for (const e of stamped) {
    assert.match(e.idempotency_key, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.equal(e.timestamp, new Date(clock.now() - 1000).toISOString(), 'stamped when queued');
  }
  await client.shutdown();
});

test('a 500, then a 500 after the service stored the batch, then 200: every event once', async () => {
  const { client, clock } = sdk();
  proxy.once({ status: 500 }); // never reaches the service
  proxy.once({ forward: true, status: 500 }); // stored, but the answer is lost
  client.identify('u-retry');
  for (let i = 0; i < 9; i++) client.track('saved_report', { n: i });
  const flushed = client.flush();

  await until(() => client.stats.retries === 1, { what: 'the first failure' });
  assert.deepEqual(clock.pending(), [750], 'backoff 1000 ms, jitter pinned to 0.75');
  clock.advance(750);
  await until(() => client.stats.retries === 2, { what: 'the second failure' });
  assert.deepEqual(clock.pending(), [1500], 'doubled');
  clock.advance(1500);
  await flushed;

  const tries = proxy.tracks('u-retry');
  assert.deepEqual(tries.map((r) => r.status), [500, 500, 200]);
  assert.deepEqual(tries[1].answer, { accepted: 10, duplicates: 0, over_limit: 0 });
  assert.deepEqual(tries[2].answer, { accepted: 0, duplicates: 10, over_limit: 0 });
  const keys = tries.map((r) => r.body.events.map((e) => e.idempotency_key).join());
  assert.equal(new Set(keys).size, 1, 'the same batch, with the same keys, every time');
  assert.deepEqual(client.stats, { queued: 0, sent: 10, batches: 1, duplicates: 10, retries: 2, dropped: 0, rejected: 0, beaconed: 0 });
  const { events } = await storedEvents('u-retry');
  assert.equal(events.length, 10, 'nothing lost, nothing twice');
  await client.shutdown();
});

test('a 429 with Retry-After: 2 waits exactly 2 s on the clock, and flush() waits with it', async () => {
  const { client, clock, calls } = sdk();
  proxy.once({ status: 429, headers: { 'Retry-After': '2' }, body: { error: 'rate limit reached', code: 'rate_limited' } });
  client.identify('u-429');
  let done = false;
  const flushed = client.flush().then(() => { done = true; });
  await until(() => client.stats.retries === 1, { what: 'the 429' });
  assert.deepEqual(clock.pending(), [2000]);
  clock.advance(1999);
  assert.equal(calls.n, 1);
  assert.equal(done, false);
  clock.advance(1);
  assert.equal(calls.n, 2);
  await flushed;
  assert.deepEqual(proxy.tracks('u-429').map((r) => r.status), [429, 200]);
  assert.equal(client.stats.sent, 1);
  await client.shutdown();
});

test('a 400 drops that batch, reports it, and later events still go', async () => {
  const { client, errors } = sdk();
  client.identify('u-400');
  await client.flush();
  client.track('noted', { text: 'a\u0000b' }); // the service stores no NUL character
  await client.flush();
  assert.equal(errors.length, 1);
  const [err] = errors;
  assert.equal(err.name, 'CsError');
  assert.equal(err.kind, 'rejected');
  assert.equal(err.status, 400);
  assert.equal(err.code, 'validation_failed');
  assert.equal(err.events.length, 1);
  assert.match(err.message, /refused 1 events \(400\)/);
  assert.equal(client.stats.rejected, 1);
  assert.equal(client.stats.retries, 0, 'a 400 is not retried');

  client.track('exported_csv');
  await client.flush();
  const { events } = await storedEvents('u-400');
  assert.deepEqual(events.map((e) => e.event).sort(), ['$identify', 'exported_csv']);
});

test('a 408 is dropped like any 4xx other than 429, not retried', async () => {
  const { client, clock, errors } = sdk();
  proxy.once({ status: 408, body: { error: 'request timeout', code: 'timeout' } });
  client.identify('u-408');
  const flushed = client.flush();
  await until(() => errors.length || client.stats.retries, { what: 'the 408' });
  assert.equal(client.stats.retries, 0);
  assert.deepEqual(clock.pending(), [], 'no retry waits');
  await flushed;
  assert.deepEqual(errors.map((e) => [e.kind, e.status, e.events.length]), [['rejected', 408, 1]]);
  await client.shutdown();
});

test('names over 255 characters, NaN and Infinity throw in the caller and queue nothing', async () => {
  const { client, calls } = sdk();
  assert.throws(() => client.identify('u'.repeat(256)), { name: 'RangeError', message: /userId must be at most 255 characters, not 256/ });
  const longest = 'u'.repeat(254) + '\u{1F600}'; // 255 characters, as the service counts them
  client.identify(longest);
  assert.throws(() => client.track('e'.repeat(256)), { name: 'RangeError', message: /event must be at most 255/ });
  for (const bad of [NaN, Infinity, -Infinity]) {
    assert.throws(() => client.track('rated', { score: bad }), { name: 'TypeError', message: /cannot be sent as JSON \(score is/ });
    assert.throws(() => client.track('rated', { scores: [1, bad] }), { name: 'TypeError', message: /cannot be sent as JSON/ });
  }
  assert.throws(() => client.identify('u-nan', { size: NaN }), { message: /cannot be sent as JSON/ });
  assert.equal(client.userId, longest, 'a refused identify changes no user');
  client.track('e'.repeat(255), { score: 1 });
  assert.equal(client.stats.queued, 2);
  assert.equal(calls.n, 0);
  await client.flush();
  const { events } = await storedEvents(encodeURIComponent(longest));
  assert.deepEqual(events.map((e) => e.event).sort(), ['$identify', 'e'.repeat(255)]);
  await client.shutdown();
});

test('with slow answers, steady tracks still go once a second, about 5 a batch', async () => {
  const held = [];
  let slow = true;
  const fetchSlowly = (...args) => (slow ? new Promise((resolve) => held.push(resolve)) : Promise.resolve())
    .then(() => fetch(...args));
  const { client, clock } = sdk({ fetch: fetchSlowly });
  client.identify('u-steady');
  for (let tick = 1; tick <= 30; tick++) {
    if (held.length) { // the request sent during the last tick is answered now, 200 ms later
      const { batches } = client.stats;
      held.shift()();
      await until(() => client.stats.batches > batches, { what: 'a slow answer' });
    }
    clock.advance(200);
    client.track('typed', { tick });
  }
  slow = false;
  held.shift()?.();
  await client.flush();
  assert.deepEqual(sizes(proxy.tracks('u-steady')), [5, 5, 5, 5, 5, 5, 1]);
  const firsts = proxy.tracks('u-steady').slice(0, 6).map((r) => Date.parse(r.body.events[0].timestamp));
  assert.deepEqual(firsts.slice(1).map((t, i) => t - firsts[i]), [1000, 1000, 1000, 1000, 1000]);
  await client.shutdown();
});

test('track and setLocale before identify are refused, and nothing is sent', async () => {
  const { client, calls } = sdk();
  assert.throws(() => client.track('opened_app'), { message: /track\(\) before identify/ });
  assert.throws(() => client.setLocale('fr-FR'), { message: /setLocale\(\) before identify/ });
  assert.throws(() => client.identify(''), TypeError);
  assert.equal(client.stats.queued, 0);
  assert.equal(calls.n, 0);

  client.identify('u-locale', { name: 'Zoë' });
  assert.throws(() => client.track(''), TypeError);
  assert.throws(() => client.track('a', [1]), TypeError);
  assert.throws(() => client.track('a', { n: 1n }), { message: /cannot be sent as JSON/ });
  client.setLocale('fr-FR');
  await client.flush();
  const { customer } = await storedEvents('u-locale');
  assert.equal(customer.locale, 'fr-FR');
  assert.equal(customer.name, 'Zoë');
  await client.shutdown();
});

test('a full queue drops the oldest, counts and reports them; the rest arrive after an outage', async () => {
  const { client, clock, errors } = sdk({ maxQueueSize: 12 });
  proxy.once({ destroy: true }); // a network error
  client.identify('u-full');
  const flushed = client.flush();
  await until(() => client.stats.retries === 1, { what: 'the network error' });
  for (let i = 0; i < 15; i++) client.track('synced', { n: i });
  assert.equal(client.stats.dropped, 4);
  assert.equal(client.stats.queued, 12);
  assert.deepEqual(errors.map((e) => e.kind), ['overflow', 'overflow', 'overflow', 'overflow']);
  assert.equal(errors[0].events[0].event, '$identify', 'the oldest goes first');

  clock.advance(clock.pending()[0]);
  await flushed;
  assert.deepEqual(sizes(proxy.tracks('u-full')), [1, 10, 2]);
  const { events } = await storedEvents('u-full');
  assert.deepEqual(events.map((e) => e.properties.n).sort((a, b) => a - b), [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]);
  await client.shutdown();
});

test('shutdown() flushes, stops every timer, and refuses later calls', async () => {
  const { client, clock } = sdk();
  client.identify('u-bye');
  client.track('logged_out');
  assert.deepEqual(clock.pending(), [1000]);
  await client.shutdown();
  assert.equal(client.stats.sent, 2);
  assert.deepEqual(clock.pending(), []);
  assert.throws(() => client.track('late'), { message: /after shutdown/ });
});

test('after shutdown() a late failure arms no retry, a waiting flush() resolves, a new one throws', async () => {
  let answer;
  const answered = new Promise((resolve) => { answer = resolve; });
  const heldFetch = (...args) => answered.then(() => fetch(...args));
  const { client, clock } = sdk({ fetch: heldFetch });
  proxy.once({ status: 429, headers: { 'Retry-After': '40' } });
  client.identify('u-late');
  clock.advance(1000); // the interval: the request goes, and is held
  let flushed = false;
  client.flush().then(() => { flushed = true; });
  const closing = client.shutdown({ timeout: 100 });
  clock.advance(100);
  await closing;
  await new Promise(setImmediate);
  assert.equal(flushed, true, 'a flush() still waiting resolves: nothing more will be sent');
  assert.deepEqual(clock.pending(), []);
  answer();
  await until(() => client.stats.retries === 1, { what: 'the 429' });
  assert.deepEqual(clock.pending(), [], 'no 40 s retry timer keeps the process alive');
  assert.throws(() => client.flush(), { message: /flush\(\) after shutdown/ });
});
